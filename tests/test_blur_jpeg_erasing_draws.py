"""Blur, JPEG and erasing: their random parameters from their definitions (torchvision's
``GaussianBlur`` sigma, ``JPEG`` quality and ``RandomErasing.get_params``, re-derived here
from their documentation), drawn from the real keys; pairing and ``erasing_target``; a loader
across thread counts and runs; the checks of their options."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from drawn_ops import LAYOUTS, equal_pairs_file, loader_epoch, run_steps
from test_distributions import binomial_z, chi2_p, chi2_two_sample_p, ks_uniform_p

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.photo_ops import apply_photo_steps, photo_steps
from ffcv_pairs.kernels.hashing import uniform_rows

ALPHA = 1e-5
N = 6000
IDS = np.arange(N, dtype=np.int64)
CLOCK = np.array([11, 2], np.int64)
SIZE = (40, 30)


def rows(aug: PairAugment, name: str, tag: int = 0, size: tuple = SIZE) -> np.ndarray:
    """Op ``name``'s drawn rows for samples IDS on field ``tag``, and the uniforms."""
    (step,) = (s for s in photo_steps(aug, 3, "uint8", "A", size) if s.name == name)
    u = uniform_rows(IDS, CLOCK, step.op, 0 if step.paired else tag, step.uniforms)
    return step.draw(u)


@pytest.mark.parametrize("name, p", [("blur", 0.3), ("jpeg", 0.6), ("erasing", 0.5)])
def test_applied_with_its_probability(name: str, p: float) -> None:
    applied = rows(PairAugment(**{name: p}, erasing_scale=(0.01, 0.02)), name)[:, 0]
    assert abs(binomial_z(int(applied.sum()), N, p)) < 5


def test_blur_sigma_uniform_and_the_kernel_from_it() -> None:
    r = rows(PairAugment(blur=1.0, blur_sigma=(0.2, 1.8)), "blur")
    counts = np.histogram(r[:, 1], bins=20, range=(0.2, 1.8))[0]
    assert r[:, 1].min() >= 0.2 and r[:, 1].max() <= 1.8
    assert chi2_p(counts, np.full(20, 0.05)) > ALPHA
    np.testing.assert_array_equal(r[:, 2], [int(3.5 * s) * 2 + 1 for s in r[:, 1]])
    fixed = rows(PairAugment(blur=1.0, blur_kernel=9), "blur")
    assert (fixed[:, 2] == 9).all()


def test_jpeg_quality_an_integer_uniform_over_the_range_inclusive() -> None:
    q = rows(PairAugment(jpeg=1.0, jpeg_quality=(40, 59)), "jpeg")[:, 1]
    assert (q == np.round(q)).all() and q.min() == 40 and q.max() == 59
    assert chi2_p(np.bincount(q.astype(int) - 40, minlength=20), np.full(20, 0.05)) > ALPHA
    assert (rows(PairAugment(jpeg=1.0, jpeg_quality=(7, 7)), "jpeg")[:, 1] == 7).all()


def get_params(rng: np.random.Generator, height: int, width: int, scale, ratio):
    """torchvision's ``RandomErasing.get_params`` as its documentation states it: up to 10
    tries of an area ``uniform(scale) * height * width`` and an aspect ratio
    ``exp(uniform(log ratio))``; ``h``, ``w`` the rounded square roots of area times and
    over the ratio; the first with ``h < height`` and ``w < width`` is placed at a uniform
    integer ``top`` in ``[0, height - h]`` and ``left`` in ``[0, width - w]``; else None."""
    for _ in range(10):
        area = height * width * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        h, w = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if h < height and w < width:
            return rng.integers(0, height - h + 1), rng.integers(0, width - w + 1), h, w
    return None


@pytest.mark.parametrize("scale, ratio", [((0.02, 0.33), (0.3, 3.3)), ((0.3, 0.9), (0.5, 4.0))])
def test_erasing_boxes_follow_torchvisions_get_params(scale, ratio) -> None:
    """The boxes' sizes, the share with none, and the place given the size, against the same
    algorithm run on numpy's generator (two-sample chi-square)."""
    ours = rows(PairAugment(erasing=1.0, erasing_scale=scale, erasing_ratio=ratio), "erasing")
    rng = np.random.default_rng(8)
    ref = [get_params(rng, *SIZE, scale, ratio) for _ in range(N)]
    ref_hw = np.array([(b[2], b[3]) if b else (0, 0) for b in ref])
    code = lambda hw: np.minimum(hw[:, 0] // 3, 13) * 14 + np.minimum(hw[:, 1] // 3, 13)  # noqa: E731
    bins = 14 * 14
    assert (
        chi2_two_sample_p(
            np.bincount(code(ours[:, 3:5].astype(int)), minlength=bins),
            np.bincount(code(ref_hw), minlength=bins),
        )
        > ALPHA
    )
    none, ref_none = int((ours[:, 0] == 0).sum()), sum(b is None for b in ref)
    assert chi2_two_sample_p(np.array([none, N - none]), np.array([ref_none, N - ref_none])) > ALPHA
    placed = ours[ours[:, 0] == 1]
    for axis, side in ((1, SIZE[0]), (2, SIZE[1])):  # top, left: uniform given h, w
        room = side - placed[:, 2 + axis] + 1
        assert (placed[:, axis] >= 0).all() and (placed[:, axis] < room).all()
        assert ks_uniform_p((placed[:, axis] + RNG_JITTER.random(len(placed))) / room) > ALPHA


RNG_JITTER = np.random.default_rng(1)  # spreads an integer place over its cell, for KS


def test_erasing_box_from_its_uniforms_as_get_params_reads_them() -> None:
    """The same algorithm, scalar, on our uniforms in the documented order: equal boxes."""
    aug = PairAugment(erasing=1.0, erasing_scale=(0.2, 0.9), erasing_ratio=(0.5, 2.0))
    (step,) = photo_steps(aug, 3, "uint8", "A", SIZE)
    u = uniform_rows(IDS[:500], CLOCK, step.op, 0, step.uniforms)
    got = step.draw(u)
    for row, uu in zip(got, u):
        box = None
        for t in range(10):
            area = SIZE[0] * SIZE[1] * (0.2 + 0.7 * uu[1 + 2 * t])
            aspect = math.exp(math.log(0.5) + (math.log(2.0) - math.log(0.5)) * uu[2 + 2 * t])
            h, w = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if h < SIZE[0] and w < SIZE[1]:
                box = (int(uu[21] * (SIZE[0] - h + 1)), int(uu[22] * (SIZE[1] - w + 1)), h, w)
                break
        assert (tuple(row[1:5]) == box) if box else row[0] == 0


# -- whole batches through the driver -------------------------------------------------------
EVERY = dict(blur=0.7, jpeg=0.7, jpeg_quality=(20, 90), erasing=0.7, erasing_value="random")


def run(aug: PairAugment, images: np.ndarray, ids: np.ndarray, tag: int) -> np.ndarray:
    steps = photo_steps(aug, images.shape[1], images.dtype.name, "A", images.shape[2:])
    return run_steps(steps, aug, images, ids, tag, CLOCK)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_paired_outputs_byte_identical_and_targets(dtype: str) -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (16, 3, 20, 18)).astype(dtype)
    if dtype == "float32":
        images /= 255
    ids = (np.arange(16) * 7919).astype(np.int64)
    aug = PairAugment(**EVERY)
    a = run(aug, images, ids, 0)
    assert a.tobytes() == run(aug, images, ids, 1).tobytes() and not np.array_equal(a, images)
    assert run(aug, images[3:9], ids[3:9], 0).tobytes() == a[3:9].tobytes()
    for name in ("blur", "jpeg"):
        apart = PairAugment(**{name: 1.0, f"{name}_paired": False})
        assert not np.array_equal(run(apart, images, ids, 0), run(apart, images, ids, 1))
    only_a = PairAugment(erasing=1.0, erasing_target="A")
    assert not np.array_equal(run(only_a, images, ids, 0), images)
    assert run(only_a, images, ids, 1).tobytes() == images.tobytes()
    only_b = PairAugment(erasing=1.0, erasing_target="B")
    assert run(only_b, images, ids, 0).tobytes() == images.tobytes()
    flat = np.full_like(images, 0.5 if dtype == "float32" else 200)
    for target, same in (("both", True), ("each", False)):
        aug = PairAugment(erasing=1.0, erasing_target=target, erasing_value=0)
        boxes = [run(aug, flat, ids, tag) == 0 for tag in (0, 1)]
        assert boxes[0].any() and np.array_equal(*boxes) == same, target


def test_random_erasing_is_normal_after_the_normalisation() -> None:
    """``erasing_value='random'`` with a normalisation: ``(x - mean) / std`` of the erased
    float values is standard normal (the float range wide enough not to clamp)."""
    from scipy import stats

    aug = PairAugment(
        erasing=1.0,
        erasing_scale=(0.3, 0.3),
        erasing_ratio=(1.0, 1.0),
        erasing_value="random",
        normalize_mean=(5.0,),
        normalize_std=(2.0,),
        value_range=(-100.0, 100.0),
    )
    images = np.full((8, 1, 30, 30), 1000.0, np.float32)  # outside the range: what is left
    out = run(aug, images, np.arange(8, dtype=np.int64), 0)
    z = (out[out != 1000.0].astype(np.float64) - 5.0) / 2.0
    assert len(z) == 8 * 16 * 16 and stats.kstest(z, "norm").pvalue > ALPHA


@pytest.mark.parametrize("layout", LAYOUTS)
def test_loader_pairs_repeats_and_thread_counts(tmp_path: Path, layout: str) -> None:
    path = equal_pairs_file(tmp_path / "p.beton", layout, (16, 14))
    aug = PairAugment(hflip=0.5, crop=(12, 12), **EVERY)

    def epoch(e: int, threads: int) -> bytes:
        return loader_epoch(path, aug, e, threads)

    first = epoch(1, 2)
    assert first == epoch(1, 1) == epoch(1, 2)
    assert first != epoch(2, 2)


def test_float16_files_blur_jpeg_and_erase_as_float32(tmp_path: Path) -> None:
    """A float16 file gives the float32 file of the same values' batches, cast to float16."""
    a = np.random.default_rng(4).random((16, 3, 12, 10)).astype(np.float16)
    aug = PairAugment(blur=1.0, jpeg=1.0, erasing=1.0, erasing_value=0.5, blur_paired=False)
    out = []
    for dtype in ("float16", "float32"):
        path = tmp_path / f"{dtype}.beton"
        b = a.astype(dtype)
        write_pairs(ArraySource(b, b.copy(), np.arange(16)), path, progress=False)
        loader = make_loader(path, batch_size=16, augment=aug, order="sequential", device="cpu")
        x, y, _ = next(iter(loader))
        assert x.dtype == y.dtype and not np.array_equal(x.numpy(), y.numpy())
        out.append((x.numpy(), y.numpy()))
    for half, full in zip(out[0], out[1]):
        np.testing.assert_array_equal(half, full.astype(np.float16))


def test_a_quantized_files_erasing_value_becomes_the_nearest_code() -> None:
    from ffcv_pairs.augment.units import dequantizing
    from ffcv_pairs.format.quantization import Quantization
    from ffcv_pairs.format.schema import ArraySpec, PairSchema

    q = Quantization(-1.0, 1.0)
    spec = ArraySpec((3, 8, 8), "uint8", q)
    codes = dequantizing(PairAugment(erasing=1.0, erasing_value=0.3), q, PairSchema(spec, spec))
    assert codes.erasing_value == round(1.3 / q.step)
    photo_steps(codes, 3, "uint8", "A", (8, 8))  # a code: a uint8 value
    kept = dequantizing(PairAugment(erasing=1.0, erasing_value="random"), q, PairSchema(spec, spec))
    assert kept.erasing_value == "random"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"blur": 1.5}, r"augment blur must be between 0\.0 and 1\.0, got 1\.5"),
        ({"blur_sigma": (2.0, 1.0)}, r"augment blur_sigma=\(2\.0, 1\.0\) must be \(low, high\)"),
        ({"blur_sigma": (0.0, 1.0)}, r"augment blur_sigma\[0\] must be > 0\.0, got 0\.0"),
        ({"blur_kernel": 4}, r"augment blur_kernel must be odd, got 4"),
        ({"blur_kernel": 2.5}, r"augment blur_kernel must be an integer, got 2\.5"),
        (
            {"jpeg_quality": (50, 101)},
            r"augment jpeg_quality\[1\] must be between 1 and 100, got 101",
        ),
        ({"jpeg_quality": (90, 50)}, r"augment jpeg_quality=\(90, 50\) must be \(low, high\)"),
        ({"jpeg_paired": 1}, r"augment jpeg_paired must be True or False, got 1"),
        ({"erasing": -0.1}, r"augment erasing must be between 0\.0 and 1\.0, got -0\.1"),
        ({"erasing_scale": (0.1, 1.5)}, r"augment erasing_scale\[1\] must be > 0\.0 and <= 1\.0"),
        ({"erasing_ratio": (3.0, 0.3)}, r"augment erasing_ratio=\(3\.0, 0\.3\) must be"),
        (
            {"erasing_value": "noise"},
            r"augment erasing_value must be a number or 'random', got 'noise'",
        ),
        (
            {"erasing_target": "C"},
            r"augment erasing_target must be one of \['both', 'A', 'B', 'each'\], got 'C'",
        ),
    ],
)
def test_bad_options_are_named(options: dict, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        PairAugment(**options)


def test_what_a_field_refuses_is_named() -> None:
    with pytest.raises(
        ValueError, match=r"augment jpeg=0\.5 takes images of 1 or 3 channels; A has 4"
    ):
        photo_steps(PairAugment(jpeg=0.5), 4, "uint8", "A", SIZE)
    with pytest.raises(ValueError, match=r"augment erasing_value=0\.5 is not a uint8 value"):
        photo_steps(PairAugment(erasing=0.5, erasing_value=0.5), 3, "uint8", "A", SIZE)
    with pytest.raises(
        ValueError, match=r"augment erasing_value=2\.0 lies outside value_range \(0\.0, 1\.0\)"
    ):
        photo_steps(PairAugment(erasing=0.5, erasing_value=2), 3, "float32", "A", SIZE)
    assert photo_steps(PairAugment(blur=0.5, erasing=0.5), 5, "uint8", "A", SIZE)


NOTHING_NEW = """
import sys
import numpy as np
from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.kernels import blur, erasing, jpeg_artefacts, tones
path = sys.argv[1]
a = np.zeros((8, 3, 8, 8), np.uint8)
write_pairs(ArraySource(a, a, np.arange(8)), path, progress=False)
for options in ({"invert": 0.5}, {"jpeg": 0.5}):
    aug = PairAugment(hflip=0.5, **options)
    next(iter(make_loader(path, batch_size=4, augment=aug, device="cpu")))
    fns = (blur.gaussian_blur, jpeg_artefacts.jpeg_artefacts, erasing.erase, tones.invert)
    print([f.py_func.__name__ for f in fns if f.overloads])
"""


def test_only_the_ops_a_pipeline_uses_are_compiled(tmp_path: Path) -> None:
    from tests.conftest import run_python

    out = run_python(NOTHING_NEW, str(tmp_path / "z.beton")).stdout.strip().splitlines()
    assert out[-2:] == ["['invert']", "['jpeg_artefacts', 'invert']"]


def test_an_apply_that_marks_its_sample_failed_is_raised_naming_it() -> None:
    """The failure mark JPEG sets when libjpeg-turbo fails: the first value of the row -1."""
    import numba as nb

    from ffcv_pairs.augment.photo_ops import PhotoStep

    @nb.njit(nogil=True)
    def fails_on_odd(image, params, tag):  # pragma: no cover - JIT
        if image[0, 0, 0, 0] % 2:
            params[0] = -1.0

    images = np.arange(6, dtype=np.uint8).reshape(6, 1, 1, 1, 1).repeat(2, axis=2)
    step = PhotoStep("jpeg", 65, True, 1, lambda u: u, fails_on_odd)
    ids = np.arange(10, 16, dtype=np.int64)
    with pytest.raises(RuntimeError, match=r"augment jpeg: failed on sample 11 of field 1 \(3 of"):
        apply_photo_steps(np.ascontiguousarray(images), ids, CLOCK, (step,), (0, 255, 1), 1)
