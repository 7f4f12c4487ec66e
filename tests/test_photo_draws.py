"""The per-sample photometric ops' random parameters, from their definitions (torchvision's
ranges, Bernoulli probabilities, uniform orders and permutations), drawn from the real
keys; pairing (A equal to B with per-image draws off: byte-identical outputs), thread
counts, batches and epochs; and a loader that uses none of them builds none of them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from drawn_ops import LAYOUTS, equal_pairs_file, loader_epoch, run_steps
from test_distributions import binomial_z, chi2_p

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.photo_ops import photo_steps
from ffcv_pairs.kernels import hashing
from ffcv_pairs.kernels.hashing import OP_USER, PHOTO_OP_IDS, uniform_rows

ALPHA = 1e-5
N = 6000
IDS = np.arange(N, dtype=np.int64)
CLOCK = np.array([7, 3], np.int64)
EVERY = dict(
    color_jitter=(0.4, 0.3, 0.5, 0.1),
    saturation=0.6,
    hue=0.2,
    gamma=(0.7, 1.5),
    gamma_p=0.6,
    grayscale=0.2,
    autocontrast=0.3,
    equalize=0.3,
    sharpness=0.4,
    posterize=0.3,
    solarize=0.3,
    invert=0.5,
    channel_shuffle=0.5,
)


def rows(aug: PairAugment, name: str, tag: int = 0, channels: int = 3) -> np.ndarray:
    """Op ``name``'s drawn rows for samples IDS on field ``tag``."""
    (step,) = (s for s in photo_steps(aug, channels, "uint8", "A") if s.name == name)
    u = uniform_rows(IDS, CLOCK, step.op, 0 if step.paired else tag, step.uniforms)
    return step.draw(u)


def uniform_p(x: np.ndarray, lo: float, hi: float, bins: int = 20) -> float:
    assert x.min() >= lo and x.max() <= hi, (x.min(), x.max(), lo, hi)
    counts = np.histogram(x, bins=bins, range=(lo, hi))[0]
    return chi2_p(counts, np.full(bins, 1 / bins))


def test_ids_are_their_own_and_below_the_users() -> None:
    """Disjoint from every other ``OP_`` id of the hash's module, and below the user's."""
    ids = list(PHOTO_OP_IDS.values())
    others = {v for k, v in vars(hashing).items() if k.startswith("OP_") and isinstance(v, int)}
    assert len(set(ids)) == len(ids) and not others & set(ids) and max(ids) < OP_USER


@pytest.mark.parametrize(
    "name, p",
    [
        ("grayscale", 0.2),
        ("autocontrast", 0.3),
        ("equalize", 0.3),
        ("sharpness", 0.4),
        ("posterize", 0.3),
        ("solarize", 0.3),
        ("invert", 0.5),
        ("channel_shuffle", 0.5),
        ("gamma", 0.6),
    ],
)
def test_applied_with_its_probability(name: str, p: float) -> None:
    applied = rows(PairAugment(**EVERY), name)[:, 0]
    assert set(np.unique(applied)) <= {0.0, 1.0}
    assert abs(binomial_z(int(applied.sum()), N, p)) < 5


def test_jitter_factors_uniform_over_torchvisions_ranges() -> None:
    aug = PairAugment(**EVERY)
    for name, k, (lo, hi) in [("saturation", 6, (0.4, 1.6)), ("hue", 7, (-0.2, 0.2))]:
        r = rows(aug, name)
        assert uniform_p(r[:, k], lo, hi) > ALPHA, name
        assert (r[:, 8:12] == [0, 0, name == "saturation", name == "hue"]).all()
    r = rows(aug, "color_jitter")
    for k, (lo, hi) in enumerate([(0.6, 1.4), (0.7, 1.3), (0.5, 1.5), (-0.1, 0.1)]):
        assert uniform_p(r[:, 4 + k], lo, hi) > ALPHA, k
    assert uniform_p(rows(PairAugment(saturation=1.5), "saturation")[:, 6], 0.0, 2.5) > ALPHA
    assert uniform_p(rows(aug, "gamma")[:, 1], 0.7, 1.5) > ALPHA


def permutation_counts(perms: np.ndarray) -> np.ndarray:
    size = perms.shape[1]
    assert (np.sort(perms, axis=1) == np.arange(size)).all(), "not permutations"
    code = np.zeros(len(perms), np.int64)
    for k in range(size):
        code = code * size + perms[:, k].astype(np.int64)
    return np.unique(code, return_counts=True)[1]


def test_jitter_order_uniform_over_the_24_orders() -> None:
    counts = permutation_counts(rows(PairAugment(**EVERY), "color_jitter")[:, :4])
    assert len(counts) == 24 and chi2_p(counts, np.full(24, 1 / 24)) > ALPHA


@pytest.mark.parametrize("channels", [3, 4])
def test_channel_shuffle_uniform_over_the_permutations(channels: int) -> None:
    perms = rows(PairAugment(channel_shuffle=1.0), "channel_shuffle", channels=channels)[:, 1:]
    count = math.factorial(channels)
    counts = permutation_counts(perms)
    assert len(counts) == count and chi2_p(counts, np.full(count, 1 / count)) > ALPHA


def test_paired_draws_are_shared_and_unpaired_ones_independent() -> None:
    paired = PairAugment(**EVERY)
    apart = PairAugment(**EVERY, invert_paired=False, saturation_paired=False)
    np.testing.assert_array_equal(rows(paired, "invert", 0), rows(paired, "invert", 1))
    a, b = rows(apart, "invert", 0)[:, 0], rows(apart, "invert", 1)[:, 0]
    cells = np.bincount((2 * a + b).astype(np.int64), minlength=4)
    assert chi2_p(cells, np.full(4, 0.25)) > ALPHA  # independent fair coins
    sa, sb = rows(apart, "saturation", 0)[:, 6], rows(apart, "saturation", 1)[:, 6]
    assert abs(np.corrcoef(sa, sb)[0, 1]) < 5 / math.sqrt(N)


# -- whole batches through the driver -------------------------------------------------------
def run(aug: PairAugment, images: np.ndarray, ids: np.ndarray, tag: int, threads: int = 2):
    """The ops of ``aug`` on a copy of CHW ``images`` (samples ``ids``), as the loader runs them."""
    steps = photo_steps(aug, images.shape[1], images.dtype.name, "A")
    return run_steps(steps, aug, images, ids, tag, CLOCK, threads)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_paired_outputs_byte_identical_across_fields_threads_and_batches(dtype: str) -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (24, 3, 12, 10)).astype(dtype)
    if dtype == "float32":
        images /= 255
    ids = (np.arange(24) * 7919).astype(np.int64)
    aug = PairAugment(**EVERY)
    a = run(aug, images, ids, 0)
    assert not np.array_equal(a, images)
    assert a.tobytes() == run(aug, images, ids, 1).tobytes()  # B, paired: A's bytes
    assert a.tobytes() == run(aug, images, ids, 0, threads=1).tobytes()
    half = run(aug, images[5:17], ids[5:17], 0)  # another batch, another place in it
    assert half.tobytes() == a[5:17].tobytes()
    apart = PairAugment(**{**EVERY, "gamma_p": 1.0, "gamma_paired": False})
    assert not np.array_equal(run(apart, images, ids, 0), run(apart, images, ids, 1))


def test_rgb_ops_refuse_other_channel_counts_by_name() -> None:
    with pytest.raises(ValueError, match=r"augment saturation=0.2 needs 3 channels .* has 4"):
        photo_steps(PairAugment(saturation=0.2), 4, "uint8", "A")
    with pytest.raises(ValueError, match=r"augment invert: .* A is int16"):
        photo_steps(PairAugment(invert=0.5), 3, "int16", "A")
    assert photo_steps(PairAugment(invert=0.5, gamma=(1, 2)), 1, "uint8", "A")


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_rgb_ops_leave_one_channel_as_it_is(dtype: str) -> None:
    """As torchvision's ``adjust_saturation``, ``adjust_hue`` and ``rgb_to_grayscale`` on one
    channel: the jitter's brightness and contrast, in its drawn order, are all that moves."""
    rng = np.random.default_rng(8)
    images = rng.integers(0, 256, (16, 1, 12, 10)).astype(dtype)
    if dtype == "float32":
        images /= 255
    ids = np.arange(16, dtype=np.int64) * 31
    assert photo_steps(PairAugment(saturation=0.4, hue=0.1, grayscale=1.0), 1, dtype, "A") == ()
    every = run(PairAugment(color_jitter=(0.4, 0.4, 0.4, 0.1)), images, ids, 0)
    moved = run(PairAugment(color_jitter=(0.4, 0.4, 0.0, 0.0)), images, ids, 0)
    assert every.tobytes() == moved.tobytes() and not np.array_equal(every, images)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"hue": 0.6}, r"augment hue must be .*0\.5, got 0\.6"),
        ({"color_jitter": (0.1, 0.1, 0.1, 0.7)}, r"color_jitter=\(0\.1, 0\.1, 0\.1, 0\.7\)"),
        ({"gamma": (1.5, 0.5)}, r"augment gamma=\(1\.5, 0\.5\) must be \(low, high\)"),
        ({"posterize_bits": 9}, r"augment posterize_bits .* 9"),
        ({"invert": 1.5}, r"augment invert .* 1\.5"),
        ({"saturation": -1}, r"augment saturation .* -1"),
        ({"equalize_paired": 1}, r"augment equalize_paired"),
    ],
)
def test_bad_options_are_named(options: dict, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        PairAugment(**options)


NOTHING_NEW = """
import sys
import numpy as np
from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.kernels import colour, drawn_driver, hashing, sharpness, tones
path = sys.argv[1]
a = np.zeros((8, 3, 8, 8), np.uint8)
write_pairs(ArraySource(a, a, np.arange(8)), path, progress=False)
for invert in (0.0, 0.5):
    aug = PairAugment(hflip=0.5, brightness=0.2, contrast=0.2, invert=invert)
    next(iter(make_loader(path, batch_size=4, augment=aug, device="cpu")))
    built = [f.py_func.__name__ for f in (colour.color_jitter, colour.grayscale,
             colour.channel_shuffle, tones.gamma, tones.invert, tones.solarize, tones.posterize,
             tones.autocontrast, tones.equalize, sharpness.sharpness, hashing.uniform_rows)
             if f.overloads]
    print(built, drawn_driver.drawn_op_kernel.cache_info().currsize)
"""


def test_a_pipeline_without_them_compiles_none_of_them(tmp_path: Path) -> None:
    """In a fresh process: no apply function, no driver and no draw is compiled or loaded
    until a pipeline uses one, and then only what it needs."""
    from tests.conftest import run_python

    out = run_python(NOTHING_NEW, str(tmp_path / "z.beton")).stdout.strip().splitlines()
    assert out[-2:] == ["[] 0", "['invert', 'uniform_rows'] 1"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_loader_pairs_repeats_and_resumes(tmp_path: Path, layout: str) -> None:
    """Through make_loader: A equal to B gives equal outputs; a repeated epoch and another
    thread count give the same bytes; two epochs differ."""
    path = equal_pairs_file(tmp_path / "p.beton", layout)
    rgb = layout != "hw"
    options = {k: v for k, v in EVERY.items() if rgb or k not in ("saturation", "hue", "grayscale")}
    if not rgb:
        options["color_jitter"] = (0.4, 0.3, 0.0, 0.0)
    aug = PairAugment(hflip=0.5, crop=(8, 8) if rgb else None, **options)

    def epoch(e: int, threads: int) -> bytes:
        return loader_epoch(path, aug, e, threads)

    first = epoch(1, 2)
    assert first == epoch(1, 1)
    assert first != epoch(2, 2)


def test_a_quantized_files_solarize_threshold_becomes_a_code() -> None:
    """The ops see a quantized file's codes: a threshold in the floats' units is rewritten."""
    from ffcv_pairs.augment.units import dequantizing
    from ffcv_pairs.format.quantization import Quantization
    from ffcv_pairs.format.schema import ArraySpec, PairSchema

    q = Quantization(-1.0, 1.0)
    spec = ArraySpec((3, 8, 8), "uint8", q)
    aug = PairAugment(solarize=1.0, solarize_threshold=0.2)
    codes = dequantizing(aug, q, PairSchema(spec, spec))
    assert codes.solarize_threshold == pytest.approx(1.2 / q.step)
    assert (
        dequantizing(PairAugment(solarize=1.0), q, PairSchema(spec, spec)).solarize_threshold
        is None
    )


def test_float16_images_go_through_as_float32(tmp_path: Path) -> None:
    """A float16 file: the ops work on float32 and the result is stored back as float16
    (invert: ``1 - x``, the default value_range)."""
    rng = np.random.default_rng(4)
    a = rng.random((16, 2, 6, 5)).astype(np.float16)
    path = tmp_path / "h.beton"
    write_pairs(ArraySource(a, a.copy(), np.arange(16)), path, progress=False)
    aug = PairAugment(invert=1.0, invert_paired=False)
    x, y, ids = next(iter(make_loader(path, batch_size=16, augment=aug, order="sequential")))
    expected = (1 - a[ids.numpy()].astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(y.numpy(), expected)
