"""Paired augmentation: reference equality, pairing, reproducibility, probabilities, errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import reference as ref
import torch

from ffcv_pairs import ArraySource, make_loader, write_pairs
from ffcv_pairs.augment.config import PairAugment, image_axes
from ffcv_pairs.format.reader import PairReader
from ffcv_pairs.load.pipeline import LoaderError

SEED = 11


def _data(n: int, shape, dtype, rng_seed=0, paired="neg"):
    rng = np.random.default_rng(rng_seed)
    if np.dtype(dtype) == np.uint8:
        a = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        b = (255 - a) if paired == "neg" else a.copy()
    else:
        a = rng.standard_normal((n, *shape)).astype(dtype) * 10
        b = -a if paired == "neg" else a.copy()
    return a, b, np.arange(n, dtype=np.int64)


def _file(tmp_path: Path, a, b, labels, name="x.beton") -> Path:
    path = tmp_path / name
    write_pairs(ArraySource(a, b, labels), path, page_size=1 << 16, progress=False)
    return path


def _batches(path: Path, aug: PairAugment, epoch=0, threads=2, order="sequential", bs=16, **kw):
    loader = make_loader(
        path,
        batch_size=bs,
        order=order,
        seed=SEED,
        augment=aug,
        drop_last=False,
        num_threads=threads,
        **kw,
    )
    loader.set_epoch(epoch)
    out = [[t.clone() for t in batch] for batch in loader]
    a, b, lab = (torch.cat([x[i] for x in out]) for i in range(3))
    by_id = torch.argsort(lab)
    return a[by_id].numpy(), b[by_id].numpy(), lab[by_id].numpy()


GEOMETRIES = [
    PairAugment(hflip=1.0),
    PairAugment(vflip=0.5, hflip=0.5),
    PairAugment(rot90=True, crop=(14, 14)),
    PairAugment(rot90=True, hflip=0.5, vflip=0.5, crop=(14, 14), crop_padding=1),
    PairAugment(crop=(10, 12), crop_padding=3),
    PairAugment(crop=(10, 12), crop_padding=5, pad_mode="reflect", hflip=0.5),
    PairAugment(crop=(12, 12), crop_padding=2, pad_mode="edge", rot90=True, translate=(2, 3)),
    PairAugment(translate=(4, 4), fill=7, hflip=0.5),
    PairAugment(crop=(9, 12), center=True, hflip=0.5),
    PairAugment(crop=(12, 12), center=True, rot90=True, translate=(1, 2)),
]
LAYOUTS = [
    ((3, 14, 16), "uint8"),
    ((14, 16, 3), "uint8"),
    ((14, 16), "float32"),
    ((2, 14, 16), "float16"),
    ((14, 16, 4), "float32"),
]


@pytest.mark.parametrize(("shape", "dtype"), LAYOUTS)
@pytest.mark.parametrize("aug", GEOMETRIES, ids=lambda a: repr(a)[12:60])
def test_geometry_equals_reference(tmp_path: Path, shape, dtype, aug) -> None:
    a, b, labels = _data(40, shape, dtype)
    path = _file(tmp_path, a, b, labels)
    xa, xb, ids = _batches(path, aug, epoch=3)
    from ffcv_pairs import ArraySpec

    lay = image_axes(ArraySpec(shape, dtype))
    for sid in ids:
        prm = ref.params(aug, lay, SEED, 3, sid, 0)
        np.testing.assert_array_equal(xa[sid], ref.geometry(a[sid], lay, aug, prm))
        np.testing.assert_array_equal(xb[sid], ref.geometry(b[sid], lay, aug, prm))


def near_tie(exact: np.ndarray) -> np.ndarray:
    """Within 1e-3 of x.5, where float32 arithmetic may round either way."""
    return np.abs(exact - np.floor(exact) - 0.5) < 1e-3


def assert_close_to(got: np.ndarray, exact: np.ndarray, dtype, ties=False) -> None:
    """uint8: the exact value rounded half up, except near a tie, where it may be one off, or
    near a tie of an earlier rounding (``ties``), whose one level a later gain (brightness,
    contrast) may stretch to two; floats: equal to float32 (float16) precision."""
    if np.dtype(dtype) == np.uint8:
        want = ref.round_uint8(exact)
        diff = np.abs(got.astype(np.int64) - want) * np.where(ties, 0.5, 1.0)
        assert diff.max() <= 1, diff.max()
        loose = near_tie(exact) | ties
        assert not (diff[~loose]).any(), (got[~loose], want[~loose])
    else:
        tol = 2e-3 if np.dtype(dtype) == np.float16 else 1e-5
        np.testing.assert_allclose(got, exact, rtol=tol, atol=tol * (1 + np.abs(exact).max()))


@pytest.mark.parametrize(
    ("shape", "dtype"), [((3, 16, 16), "uint8"), ((16, 16, 2), "float32"), ((1, 16, 16), "float16")]
)
@pytest.mark.parametrize("extra", [{}, {"hflip": 0.5, "rot90": True, "translate": (2, 2)}])
def test_resized_crop_equals_reference(tmp_path: Path, shape, dtype, extra) -> None:
    aug = PairAugment(resized_crop=(9, 9), crop_scale=(0.2, 1.0), **extra)
    a, b, labels = _data(30, shape, dtype, paired="same")
    path = _file(tmp_path, a, b, labels)
    xa, xb, ids = _batches(path, aug, epoch=1)
    from ffcv_pairs import ArraySpec

    lay = image_axes(ArraySpec(shape, dtype))
    for sid in ids:
        prm = ref.params(aug, lay, SEED, 1, sid, 0)
        assert_close_to(xa[sid], ref.resized(a[sid], lay, aug, prm), dtype)
    np.testing.assert_array_equal(xa, xb)  # B == A stays B == A


@pytest.mark.parametrize(
    ("shape", "dtype"), [((3, 16, 12), "uint8"), ((12, 16, 2), "float32"), ((10, 10), "float16")]
)
@pytest.mark.parametrize("out", [(9, 9), (6, 10), (10, 6)])
def test_center_resized_crop_equals_reference_in_every_epoch(
    tmp_path: Path, shape, dtype, out
) -> None:
    """The largest central region of the output's aspect ratio, resized: the same in every
    epoch (no draw), and the region the definition gives."""
    aug = PairAugment(resized_crop=out, center=True)
    a, b, labels = _data(20, shape, dtype, paired="same")
    path = _file(tmp_path, a, b, labels)
    from ffcv_pairs import ArraySpec

    lay = image_axes(ArraySpec(shape, dtype))
    first = _batches(path, aug, epoch=0)
    for epoch in (1, 5):
        for x, y in zip(first, _batches(path, aug, epoch=epoch)):
            np.testing.assert_array_equal(x, y)
    xa, xb, ids = first
    for sid in ids:
        prm = ref.params(aug, lay, SEED, 0, sid, 0)
        assert (prm.rh * out[1] - prm.rw * out[0]) ** 2 <= max(out) ** 2  # the output's ratio
        assert prm.rh == lay.height or prm.rw == lay.width  # as large as it fits
        assert_close_to(xa[sid], ref.resized(a[sid], lay, aug, prm), dtype)
    np.testing.assert_array_equal(xa, xb)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (
            {"rot90": True, "resized_crop": (64, 48)},
            r"augment rot90 needs a square output, got resized_crop=\(64, 48\)",
        ),
        ({"rot90": True, "crop": (8, 10)}, r"rot90 needs a square output, got crop=\(8, 10\)"),
        ({"center": True}, "augment center applies to crop=.* or resized_crop="),
        (
            {"center": True, "resized_crop": (8, 8), "crop_scale": (0.5, 1.0)},
            r"augment center takes the central region, crop_scale=\(0.5, 1.0\) draws",
        ),
        ({"center": 1, "crop": (8, 8)}, "augment center must be True or False, got 1"),
    ],
)
def test_refused_at_construction(kwargs, needle) -> None:
    """Not at make_loader: the size alone decides, whatever the file."""
    with pytest.raises((ValueError, TypeError), match=needle):
        PairAugment(**kwargs)


@pytest.mark.parametrize(
    ("shape", "dtype"), [((3, 8, 8), "uint8"), ((8, 8, 3), "float32"), ((2, 8, 8), "float16")]
)
@pytest.mark.parametrize(
    "aug",
    [
        PairAugment(brightness=0.3),
        PairAugment(contrast=0.4, contrast_paired=False),
        PairAugment(noise_std=2.0),
        PairAugment(
            brightness=0.2, contrast=0.2, noise_std=1.0, brightness_paired=False, noise_paired=True
        ),
    ],
    ids=["brightness", "contrast-unpaired", "noise", "all"],
)
def test_photometric_equals_reference(tmp_path: Path, shape, dtype, aug) -> None:
    a, b, labels = _data(24, shape, dtype)
    if np.dtype(dtype).kind == "f":  # N(0, 10) values: a range that holds them
        aug = replace(aug, value_range=(-100.0, 100.0))
    path = _file(tmp_path, a, b, labels)
    xa, xb, ids = _batches(path, aug, epoch=2)
    from ffcv_pairs import ArraySpec

    lay = image_axes(ArraySpec(shape, dtype))
    for sid in ids:
        assert_close_to(xa[sid], ref.photometric(a[sid], lay, aug, (SEED, 2, sid, 0)), dtype)
        assert_close_to(xb[sid], ref.photometric(b[sid], lay, aug, (SEED, 2, sid, 1)), dtype)


def _symmetry(img: np.ndarray) -> tuple[tuple[int, int], tuple[int, int]]:
    """Which of the 8 symmetries of the square a coordinate-coded output went through:
    the source (row, column) steps of one output step down and one right, read at the
    centre (always inside the source for the crops used here)."""
    rows, cols = img[0].astype(np.int64), img[1].astype(np.int64)
    down = (rows[6, 5] - rows[5, 5], cols[6, 5] - cols[5, 5])
    right = (rows[5, 6] - rows[5, 5], cols[5, 6] - cols[5, 5])
    assert sorted(map(abs, down + right)) == [0, 0, 1, 1], (down, right)
    return (int(down[0]), int(down[1])), (int(right[0]), int(right[1]))


@pytest.mark.parametrize("pad_mode", ["reflect", "edge"])
def test_pairing_survives(tmp_path: Path, pad_mode: str) -> None:
    """B = 255 - A elementwise, before and after every geometric augmentation, and the
    flips and quarter turns really happen, sample by sample, at their rates."""
    aug = PairAugment(
        hflip=0.5,
        vflip=0.5,
        rot90=True,
        crop=(12, 12),
        crop_padding=3,
        translate=(2, 2),
        pad_mode=pad_mode,
    )
    a, _, labels = _data(200, (3, 16, 16), "uint8")
    a[:, 0], a[:, 1] = np.arange(16)[:, None], np.arange(16)[None, :]  # source row, column
    path = _file(tmp_path, a, 255 - a, labels)
    seen: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for epoch in range(3):
        loader = make_loader(path, batch_size=32, seed=epoch, augment=aug, window_bytes=1 << 16)
        loader.set_epoch(epoch)
        for xa, xb, _ in loader:
            assert torch.equal(xb, 255 - xa)
            seen.extend(_symmetry(x) for x in xa.numpy())
    # Independent flips at 1/2 and a uniform quarter turn: each of the 8 symmetries has
    # probability 1/8, and a flipped (mirrored) sample 1/2. hflip alone cannot be told
    # apart here (hflip + vflip is a half turn): test_flip_rate_matches_probability has it.
    n = len(seen)
    assert n == 3 * len(loader) * 32
    counts = {s: seen.count(s) for s in set(seen)}
    assert len(counts) == 8, counts
    chi2 = sum((c - n / 8) ** 2 / (n / 8) for c in counts.values())
    assert chi2 < 35.26, counts  # P(chi2 with 7 dof > 35.26) = 1e-5
    flipped = sum(1 for down, right in seen if down[0] * right[1] - down[1] * right[0] < 0)
    assert abs(flipped - n / 2) < 4.5 * np.sqrt(n / 4), (flipped, n)


def test_brightness_zero_is_the_identity_and_nonzero_is_not(tmp_path: Path) -> None:
    """brightness=0 leaves images bit-identical, and so does a brightness too small to
    move a uint8 value (rounding must give each value back: uint8 batches are fused into
    the decoder, so the op runs there); a real brightness scales each image by its own
    factor in [1 - b, 1 + b]."""
    a, _, labels = _data(64, (3, 8, 8), "uint8")
    a = np.clip(a, 20, 200)  # no clipping at 0 or 255 for the factor check below
    path = _file(tmp_path, a, 255 - a, labels)
    for brightness in (0.0, 1e-6):
        xa, xb, ids = _batches(path, PairAugment(brightness=brightness))
        assert xa.tobytes() == a[ids].tobytes(), brightness
        assert xb.tobytes() == (255 - a)[ids].tobytes(), brightness
    xa, _, ids = _batches(path, PairAugment(brightness=0.3))
    before = a[ids].astype(np.float64)
    assert (xa != before).any(axis=(1, 2, 3)).mean() > 0.9
    factor = xa.sum(axis=(1, 2, 3), dtype=np.float64) / before.sum(axis=(1, 2, 3))
    assert (factor > 0.7 - 0.01).all() and (factor < 1.3 + 0.01).all(), factor
    assert factor.std() > 0.05, factor  # a factor per sample, not one for all


def test_independent_geometry_breaks_pairing(tmp_path: Path) -> None:
    a, b, labels = _data(64, (3, 16, 16), "uint8")
    path = _file(tmp_path, a, b, labels)
    aug = PairAugment(hflip=0.5, rot90=True, geometry_paired=False)
    xa, xb, _ = _batches(path, aug)
    assert (xb != 255 - xa).any(axis=(1, 2, 3)).mean() > 0.5


def test_reproducible_across_runs_threads_and_orders(tmp_path: Path) -> None:
    aug = PairAugment(
        hflip=0.5,
        crop=(12, 12),
        crop_padding=2,
        brightness=0.3,
        brightness_paired=False,
        noise_std=1.0,
    )
    a, b, labels = _data(100, (3, 16, 16), "uint8")
    path = _file(tmp_path, a, b, labels)
    one = _batches(path, aug, epoch=4, threads=1)
    two = _batches(path, aug, epoch=4, threads=2)
    again = _batches(path, aug, epoch=4, threads=2)
    shuffled = _batches(path, aug, epoch=4, order="random", bs=7)
    ranked = _batches(path, aug, epoch=4, order="quasi_random", rank=1, world_size=2)
    for other in (two, again, shuffled):
        for x, y in zip(one, other):
            assert x.tobytes() == y.tobytes()
    ids = ranked[2]
    assert one[0][ids].tobytes() == ranked[0].tobytes()  # rank layout does not matter
    other_epoch = _batches(path, aug, epoch=5)
    assert one[0].tobytes() != other_epoch[0].tobytes()


def test_flip_rate_matches_probability(tmp_path: Path) -> None:
    n, p = 3000, 0.3
    a = np.zeros((n, 1, 2, 4), dtype=np.uint8)
    a[:, :, :, 0] = 1  # asymmetric: a flip moves the 1 to the right
    path = _file(tmp_path, a, a, np.arange(n))
    xa, _, _ = _batches(path, PairAugment(hflip=p), bs=500)
    rate = float((xa[:, 0, 0, 3] == 1).mean())
    assert abs(rate - p) < 4 * np.sqrt(p * (1 - p) / n), rate


def test_normalize_and_dtype_on_device_stage(tmp_path: Path) -> None:
    a, b, labels = _data(20, (3, 8, 8), "uint8")
    path = _file(tmp_path, a, b, labels)
    mean, std = (10.0, 20.0, 30.0), (2.0, 4.0, 8.0)
    aug = PairAugment(normalize_mean=mean, normalize_std=std)
    xa, xb, ids = _batches(path, aug)
    assert xa.dtype == np.float32
    expect = (a[ids].astype(np.float32) - np.array(mean, np.float32)[:, None, None]) / np.array(
        std, np.float32
    )[:, None, None]
    np.testing.assert_allclose(xa, expect, rtol=1e-6)
    bf16 = PairAugment(normalize_mean=mean, normalize_std=std, out_dtype="bfloat16")
    xa, xb, _ = next(iter(make_loader(path, batch_size=4, augment=bf16, order="sequential")))
    assert xa.dtype == xb.dtype == torch.bfloat16
    torch.testing.assert_close(xa.float(), torch.from_numpy(expect[:4]), rtol=1e-2, atol=1e-2)
    xa16, _, _ = _batches(path, PairAugment(out_dtype="float16"))
    assert xa16.dtype == np.float16 and (xa16 == a[ids]).all()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"hflip": 1.5}, r"augment hflip must be between 0.0 and 1.0, got 1.5"),
        ({"vflip": -0.1}, r"augment vflip must be between 0.0 and 1.0, got -0.1"),
        ({"crop": (40, 40)}, r"crop=\(40, 40\) is larger than A's image \(16, 16\)"),
        (
            {"normalize_mean": (1.0, 2.0), "normalize_std": (1.0, 1.0)},
            "normalize_mean has 2 values but A has 3 channel",
        ),
        ({"crop": (8, 10), "rot90": True}, "rot90 needs a square output"),
        (
            {"pad_mode": "wrap"},
            r"augment pad_mode must be one of \['constant', 'reflect', 'edge'\], got 'wrap'",
        ),
        (
            {"crop_scale": (0.5, 1.0)},
            r"augment crop_scale applies to resized_crop=\(height, width\)",
        ),
        (
            {"crop": (8, 8), "resized_crop": (8, 8)},
            r"augment crop=\(8, 8\) and resized_crop=\(8, 8\): choose one",
        ),
        (
            {"crop": (8, 8), "crop_padding": 2, "fill": 300},
            r"augment fill=300.0 is not a uint8 value \(A is uint8\): use a whole number in "
            r"\[0, 255\]",
        ),
        ({"brightness": 1.5}, r"augment brightness must be >= 0.0 and < 1.0, got 1.5"),
    ],
)
def test_bad_config_names_field_and_range(tmp_path: Path, kwargs, needle) -> None:
    a, b, labels = _data(8, (3, 16, 16), "uint8")
    path = _file(tmp_path, a, b, labels)
    with pytest.raises(ValueError, match=needle):
        make_loader(path, batch_size=4, augment=PairAugment(**kwargs))
    if "crop" not in kwargs and "normalize_mean" not in kwargs:  # checked where given
        with pytest.raises(ValueError, match=needle):
            PairAugment(**kwargs)


def test_yaml_roundtrip(tmp_path: Path) -> None:
    p = tmp_path / "aug.yaml"
    p.write_text("augment:\n  hflip: 0.5\n  crop: [56, 56]\n  crop_padding: 4\n")
    aug = PairAugment.from_yaml(p)
    assert aug == PairAugment(hflip=0.5, crop=(56, 56), crop_padding=4)
    p.write_text("hflip: 0.5\nflip_h: 1\n")
    with pytest.raises(ValueError, match=r"unknown augment option\(s\) \['flip_h'\]"):
        PairAugment.from_yaml(p)


FLOAT_PHOTOMETRIC = [
    PairAugment(brightness=0.5),
    PairAugment(contrast=0.3, contrast_paired=False),
    PairAugment(brightness=0.5, contrast=0.5, noise_std=0.2),
]


@pytest.mark.parametrize("aug", FLOAT_PHOTOMETRIC, ids=["brightness", "contrast", "all"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_photometric_stays_in_range(tmp_path: Path, aug: PairAugment, dtype: str) -> None:
    """0..1 floats, as torchvision: brightness 0.5 used to reach 1.485 and contrast 0.3
    -0.19; now every value stays in [0, 1], equal to the reference (which clamps)."""
    rng = np.random.default_rng(9)
    a = rng.uniform(0, 1, (32, 3, 8, 8)).astype(dtype)
    b = rng.uniform(0, 1, (32, 3, 8, 8)).astype(dtype)
    path = _file(tmp_path, a, b, np.arange(32))
    xa, xb, ids = _batches(path, aug, epoch=1)
    assert min(xa.min(), xb.min()) >= 0.0 and max(xa.max(), xb.max()) <= 1.0
    assert (xa == 1.0).any() or (xa == 0.0).any(), "some value should clamp"
    from ffcv_pairs import ArraySpec

    lay = image_axes(ArraySpec((3, 8, 8), dtype))
    for sid in ids:
        assert_close_to(xa[sid], ref.photometric(a[sid], lay, aug, (SEED, 1, sid, 0)), dtype)
        assert_close_to(xb[sid], ref.photometric(b[sid], lay, aug, (SEED, 1, sid, 1)), dtype)


def test_float_values_outside_the_range_are_refused(tmp_path: Path) -> None:
    """Data the user did not declare is never clamped silently."""
    a, b, labels = _data(16, (3, 8, 8), "float32")
    path = _file(tmp_path, a, b, labels)
    with pytest.raises(
        LoaderError,
        match=r"augment value_range=\(0, 1\): sample \d+ of [AB] has \d+ values outside it "
        r"\(from -\d",
    ):
        _batches(path, PairAugment(brightness=0.2))
    wide = PairAugment(brightness=0.2, value_range=(-100.0, 100.0))
    _batches(path, wide)  # declared: fine


@pytest.mark.parametrize(
    ("options", "ops"),
    [
        ({"gamma": (0.8, 1.2)}, "gamma"),
        ({"invert": 1.0, "blur": 1.0}, "invert, blur"),
        ({"policy": "trivial_augment_wide"}, "policy"),
    ],
    ids=["gamma", "invert-blur", "policy"],
)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_drawn_ops_refuse_float_values_outside_the_range(
    tmp_path: Path, options: dict, ops: str, dtype: str
) -> None:
    """The per-sample ops clamp float images to value_range as brightness does: one value of
    2 in B's sample 5 is refused by name, not turned into 1 (gamma) or 0 (invert); the
    range's own ends pass, and a declared range loads the same file."""
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1, (8, 3, 16, 16)).astype(dtype)
    a[0, 0, 0, :2] = 0.0, 1.0  # the ends are inside
    b = a.copy()
    b[5, 1, 2, 3] = 2.0
    path = _file(tmp_path, a, b, np.arange(8))
    with pytest.raises(
        LoaderError,
        match=rf"^augment value_range=\(0, 1\): sample 5 of B has 1 values outside it \(from 2 "
        rf"to 2\); {ops} clamp float images to value_range",
    ):
        _batches(path, PairAugment(**options), bs=8)
    _batches(path, PairAugment(**options, value_range=(0.0, 2.0)), bs=8)
    _batches(path, PairAugment(channel_shuffle=1.0, erasing=1.0), bs=8)  # they clamp nothing
    b[5, 1, 2, 3] = 1.0
    _batches(_file(tmp_path, a, b, np.arange(8), "inside.beton"), PairAugment(**options), bs=8)


def test_a_float_fill_outside_the_range_is_refused_where_it_would_clamp(tmp_path: Path) -> None:
    """A fill the ops would clamp is refused when the loader is made; where nothing pads
    with it (reflect) or nothing clamps (no photometric op), any float fill stays allowed."""
    rng = np.random.default_rng(4)
    a = rng.uniform(0, 1, (4, 3, 16, 16)).astype(np.float32)
    path = _file(tmp_path, a, a.copy(), np.arange(4))
    with pytest.raises(
        ValueError,
        match=r"^augment fill=2 lies outside value_range \(0, 1\) of A's float32 values, which "
        r"the photometric ops clamp to: set fill or value_range$",
    ):
        make_loader(path, batch_size=4, augment=PairAugment(rotate=30, fill=2.0, gamma=(0.8, 1.2)))
    for fine in (
        PairAugment(rotate=30, fill=2.0, pad_mode="reflect", gamma=(0.8, 1.2)),
        PairAugment(rotate=30, fill=2.0),
        PairAugment(rotate=30, fill=2.0, gamma=(0.8, 1.2), value_range=(0.0, 2.0)),
    ):
        make_loader(path, batch_size=4, augment=fine)


@pytest.mark.parametrize(
    ("dtype", "threshold", "top"), [("uint8", 300.0, "255"), ("float32", 7.0, "1")]
)
def test_an_unreachable_solarize_threshold_is_refused(
    tmp_path: Path, dtype: str, threshold: float, top: str
) -> None:
    """As torchvision's solarize: a threshold above the images' largest value would invert
    nothing."""
    a = np.zeros((4, 3, 8, 8), dtype)
    path = _file(tmp_path, a, a.copy(), np.arange(4))
    aug = PairAugment(solarize=1.0, solarize_threshold=threshold)
    with pytest.raises(
        ValueError,
        match=rf"^augment solarize_threshold={threshold} is above A's largest {dtype} value "
        rf"{top}: no value would be inverted$",
    ):
        make_loader(path, batch_size=4, augment=aug)
    make_loader(
        path, batch_size=4, augment=PairAugment(solarize=1.0, solarize_threshold=float(top))
    )


def test_value_range_is_for_float_images(tmp_path: Path) -> None:
    a, b, labels = _data(8, (3, 8, 8), "uint8")
    path = _file(tmp_path, a, b, labels)
    with pytest.raises(
        ValueError,
        match=r"augment value_range=\(0.0, 255.0\) is for floating-point images; A and B are uint8",
    ):
        make_loader(path, batch_size=4, augment=PairAugment(value_range=(0, 255)))
    with pytest.raises(
        ValueError, match=r"augment value_range=\(1.0, 1.0\) must be \(low, high\), low < high"
    ):
        PairAugment(value_range=(1, 1))


def test_old_spellings_still_work_with_a_warning(tmp_path: Path) -> None:
    """``crop`` + ``crop_scale`` was the resized crop, ``paired_geometry`` the flag."""
    with pytest.warns(FutureWarning, match=r"say resized_crop=\(9, 9\)"):
        old = PairAugment(crop=(9, 9), crop_scale=(0.3, 1.0), hflip=0.5)
    assert old == PairAugment(resized_crop=(9, 9), crop_scale=(0.3, 1.0), hflip=0.5)
    with pytest.warns(FutureWarning, match="paired_geometry is now geometry_paired"):
        flag = PairAugment(hflip=0.5, paired_geometry=False)
    assert flag == PairAugment(hflip=0.5, geometry_paired=False)
    with pytest.warns(FutureWarning):
        assert PairAugment.from_dict({"paired_geometry": False}).geometry_paired is False
    a, b, labels = _data(16, (3, 12, 12), "uint8")
    path = _file(tmp_path, a, b, labels)
    schema = PairReader(path).schema
    with pytest.warns(FutureWarning, match=r"layouts\(\) is now field_axes\(\)"):
        assert flag.layouts(schema) == flag.field_axes(schema)
    new_way = _batches(path, PairAugment(resized_crop=(9, 9), crop_scale=(0.3, 1.0), hflip=0.5))
    for x, y in zip(_batches(path, old), new_way):
        np.testing.assert_array_equal(x, y)
