"""The policies' draws (``PairAugment(policy=...)``) from their definitions: each op of the
list equally likely, TrivialAugmentWide's bin uniform, the sign of a signed magnitude a fair
coin, RandAugment's magnitude fixed; paired draws shared, unpaired ones independent; A equal
to B gives byte-identical outputs, the same for every thread count, through the loader too;
refusals named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from drawn_ops import LAYOUTS, equal_pairs_file, loader_epoch, run_steps
from test_distributions import chi2_p

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.policies import OP_POLICY, PolicyChoices, index_map, policy_steps
from ffcv_pairs.kernels import hashing
from ffcv_pairs.kernels.hashing import OP_USER, PHOTO_OP_IDS, uniform_rows
from ffcv_pairs.kernels.policy import POLICY_OPS

ALPHA = 1e-5
N = 30000
IDS = np.arange(N, dtype=np.int64)
CLOCK = np.array([11, 2], np.int64)
SIGNED = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
SIGNED += ("Brightness", "Color", "Contrast", "Sharpness")
WIDE = PairAugment(policy="trivial_augment_wide")
RAND = PairAugment(policy="rand_augment", policy_num_ops=3, policy_magnitude=12)


def u_rows(aug: PairAugment, tag: int = 0) -> np.ndarray:
    return uniform_rows(
        IDS, CLOCK, OP_POLICY, 0 if aug.policy_paired else tag, 3 * aug.policy_count
    )


def ops_and_magnitudes(aug: PairAugment, j: int, tag: int = 0, size=(40, 50)):
    """Each sample's op and signed magnitude in round ``j``, as every step reads them."""
    return PolicyChoices(aug, *size)(u_rows(aug, tag), j)


def test_id_is_its_own_and_below_the_users() -> None:
    others = {v for k, v in vars(hashing).items() if k.startswith("OP_") and isinstance(v, int)}
    assert OP_POLICY == 72 and OP_POLICY not in others | set(PHOTO_OP_IDS.values())
    assert OP_POLICY < hashing.OP_BATCH < OP_USER


@pytest.mark.parametrize("aug", [WIDE, RAND], ids=["wide", "rand"])
def test_each_op_equally_likely_and_signs_fair(aug: PairAugment) -> None:
    for j in range(aug.policy_count):
        op, magnitude = ops_and_magnitudes(aug, j)
        counts = np.bincount(op, minlength=len(POLICY_OPS))
        assert len(counts) == 14 and chi2_p(counts, np.full(14, 1 / 14)) > ALPHA
        for name in SIGNED:
            m = magnitude[op == POLICY_OPS.index(name)]
            m = m[m != 0]
            negative = int((m < 0).sum())
            assert chi2_p(np.array([negative, len(m) - negative]), np.array([0.5, 0.5])) > ALPHA
        for name in ("Identity", "AutoContrast", "Equalize", "Posterize", "Solarize"):
            assert (magnitude[op == POLICY_OPS.index(name)] >= 0).all()


def test_wide_bins_uniform_over_the_31_magnitudes() -> None:
    op, magnitude = ops_and_magnitudes(WIDE, 0)
    for name, top in (("Rotate", 135.0), ("TranslateX", 32.0), ("Contrast", 0.99)):
        levels = np.linspace(0, top, 31)
        m = np.abs(magnitude[op == POLICY_OPS.index(name)])  # TranslateX: its map truncates
        k = np.abs(m[:, None] - levels[None]).argmin(axis=1)
        assert np.abs(m - levels[k]).max() < 1e-4
        assert chi2_p(np.bincount(k, minlength=31), np.full(31, 1 / 31)) > ALPHA


def test_rand_magnitude_is_fixed_and_ops_independent() -> None:
    (op0, m0), (op1, _) = ops_and_magnitudes(RAND, 0), ops_and_magnitudes(RAND, 1)
    rotate = np.abs(m0[op0 == POLICY_OPS.index("Rotate")])
    np.testing.assert_allclose(rotate, 30.0 * 12 / 30, rtol=1e-6)
    shift = np.abs(m0[op0 == POLICY_OPS.index("TranslateX")])
    np.testing.assert_allclose(shift, 150 / 331 * 50 * 12 / 30, rtol=1e-6)
    cells = np.bincount(op0 * 14 + op1, minlength=196)
    assert chi2_p(cells, np.full(196, 1 / 196)) > ALPHA


def test_paired_draws_are_shared_and_unpaired_ones_independent() -> None:
    np.testing.assert_array_equal(u_rows(WIDE, 0), u_rows(WIDE, 1))
    apart = PairAugment(policy="trivial_augment_wide", policy_paired=False)
    a, b = ops_and_magnitudes(apart, 0, 0)[0], ops_and_magnitudes(apart, 0, 1)[0]
    cells = np.bincount(a * 14 + b, minlength=196)
    assert chi2_p(cells, np.full(196, 1 / 196)) > ALPHA


@pytest.mark.parametrize("channels", [3, 1])
def test_each_sample_runs_the_one_apply_of_its_op(channels: int) -> None:
    """Per round, exactly the step of the sample's op is on (none for Identity, and for Color
    on one channel), with its parameter: the factor ``1 + magnitude``, the bits, the
    threshold ``255 * magnitude``, the pixel map of the geometric ops."""
    steps = policy_steps(RAND, channels, "uint8", "A", (40, 50))
    u = u_rows(RAND)
    for j in range(RAND.policy_count):
        op, m = ops_and_magnitudes(RAND, j)
        names = np.array(POLICY_OPS)[op]
        g, jit, sh, po, so, ac, eq = (s.draw(u) for s in steps[7 * j : 7 * j + 7])
        geometric = np.isin(names, SIGNED[:5])
        np.testing.assert_array_equal(g[:, 0], geometric)
        assert (g[:, 1] == 0).all()  # PairAugment's fill
        np.testing.assert_array_equal(g[geometric, 2:], index_map(op, m, 40, 50)[geometric])
        parts = {"Brightness": 8, "Contrast": 9, "Color": 10}
        for name, col in parts.items():
            expected = (names == name) & (channels == 3 or name != "Color")
            np.testing.assert_array_equal(jit[:, col], expected)
            np.testing.assert_allclose(jit[names == name, 4], 1 + m[names == name])
        assert (jit[:, 11] == 0).all()  # never hue
        for rows_, name, value in ((sh, "Sharpness", 1 + m), (po, "Posterize", m)):
            np.testing.assert_array_equal(rows_[:, 0], names == name)
            np.testing.assert_allclose(rows_[names == name, 1], value[names == name])
        np.testing.assert_allclose(so[names == "Solarize", 1], 255 * m[names == "Solarize"])
        np.testing.assert_array_equal(so[:, 0], names == "Solarize")
        np.testing.assert_array_equal(ac[:, 0], names == "AutoContrast")
        np.testing.assert_array_equal(eq[:, 0], names == "Equalize")


def run(aug: PairAugment, images: np.ndarray, ids: np.ndarray, tag: int, threads: int = 2):
    steps = policy_steps(aug, images.shape[1], images.dtype.name, "A", images.shape[2:])
    return run_steps(steps, aug, images, ids, tag, CLOCK, threads)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("aug", [WIDE, RAND], ids=["wide", "rand"])
def test_paired_outputs_byte_identical_across_fields_threads_and_batches(dtype, aug) -> None:
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (40, 3, 12, 14)).astype(dtype)
    if dtype == "float32":
        images /= 255
    ids = (np.arange(40) * 7919).astype(np.int64)
    a = run(aug, images, ids, 0)
    assert not np.array_equal(a, images)
    assert a.tobytes() == run(aug, images, ids, 1).tobytes()
    assert a.tobytes() == run(aug, images, ids, 0, threads=1).tobytes()
    assert run(aug, images[7:29], ids[7:29], 0).tobytes() == a[7:29].tobytes()
    apart = PairAugment(policy=aug.policy, policy_paired=False)
    assert not np.array_equal(run(apart, images, ids, 0), run(apart, images, ids, 1))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_loader_pairs_repeats_and_threads(tmp_path: Path, layout: str) -> None:
    path = equal_pairs_file(tmp_path / "p.beton", layout)
    aug = PairAugment(hflip=0.5, crop=(8, 8), fill=3, policy="rand_augment", policy_num_ops=3)

    def epoch(e: int, threads: int) -> bytes:
        return loader_epoch(path, aug, e, threads)

    first = epoch(1, 2)
    assert first == epoch(1, 1)
    assert first != epoch(2, 2)


def test_refusals_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"augment policy must be one of .* got 'trivial'"):
        PairAugment(policy="trivial")
    with pytest.raises(ValueError, match=r"augment policy_magnitude .* 31"):
        PairAugment(policy="rand_augment", policy_magnitude=31)
    with pytest.raises(ValueError, match=r"policy='rand_augment' .* dense fields \['label'\]"):
        PairAugment(policy="rand_augment", dense={"label": "mask"})
    with pytest.raises(ValueError, match=r"policy='trivial_augment_wide' takes 1 or 3 .* has 4"):
        policy_steps(WIDE, 4, "uint8", "A", (8, 8))
    assert policy_steps(WIDE, 1, "float16", "A", (8, 8))
    assert not policy_steps(
        PairAugment(policy="rand_augment", policy_num_ops=0), 3, "uint8", "A", (8, 8)
    )
    a = np.zeros((4, 3, 8, 8), np.uint8)
    path = tmp_path / "m.beton"
    write_pairs(ArraySource(a, a, np.zeros((4, 8, 8), np.uint8)), path, progress=False)
    with pytest.raises(ValueError, match=r"policy='trivial_augment_wide' .* field 'label'"):
        make_loader(path, batch_size=2, augment=WIDE, device="cpu")


def test_erasing_follows_the_policy(tmp_path: Path) -> None:
    """torchvision's recipes erase after the policy: every pixel the erasing changes is its
    value, never a value the policy made of it (inverted, equalised, moved)."""
    rng = np.random.default_rng(3)
    a = rng.integers(1, 256, (64, 3, 16, 16), dtype=np.uint8)
    path = tmp_path / "p.beton"
    write_pairs(ArraySource(a, a.copy(), np.arange(64)), path, progress=False)

    def batch(**erasing: float) -> np.ndarray:
        aug = PairAugment(policy="rand_augment", policy_num_ops=3, **erasing)
        loader = make_loader(path, batch_size=64, augment=aug, order="sequential", device="cpu")
        return next(iter(loader))[0].numpy()

    policy, both = batch(), batch(erasing=1.0, erasing_value=0.0)
    changed = policy != both
    assert changed.any(axis=(1, 2, 3)).sum() > 32  # most samples erased
    assert (both[changed] == 0).all()
