"""Distributions of the geometric augmentation, checked against each op's definition.

The images encode their own coordinates (channel 0 = source row, channel 1 =
source column, channel 2 = a per-sample marker), so every output tells which
crop offset, flip, rotation, translation or resized box produced it. The
recovered parameters of thousands of draws are tested against the distribution
the op is defined to have (uniform offsets over the whole allowed range,
Bernoulli flips, uniform quarter turns, torchvision's ``RandomResizedCrop``),
using only the public API: nothing here reads the kernels' random draws.
B is an invertible function of A; its recovered geometry must equal A's.

Seeds are fixed, so results are deterministic; ``ALPHA`` is small enough that a
correct implementation passes for practically any seed, and large enough that
an off-by-one range or a wrong law fails by many orders of magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs

SEED = 20251
ALPHA = 1e-5  # significance of every test
N, EPOCHS = 3000, 4  # samples in a file, epochs read: N * EPOCHS draws per test
FILL = 255  # constant padding; coordinates and markers stay below it
MARK = 250  # B = MARK - A, and markers are sample_id % MARK


# -- statistics, from their textbook definitions --------------------------------------------
def chi2_sf(x: float, df: int) -> float:
    """P(chi2_df > x), closed form (regularised upper gamma at integer or half-integer a)."""
    y = x / 2.0
    if y <= 0:
        return 1.0
    if df % 2 == 0:
        return sum(math.exp(-y + j * math.log(y) - math.lgamma(j + 1)) for j in range(df // 2))
    tail = sum(
        math.exp(-y + (j - 0.5) * math.log(y) - math.lgamma(j + 0.5))
        for j in range(1, (df + 1) // 2)
    )
    return math.erfc(math.sqrt(y)) + tail


def chi2_p(observed: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's goodness of fit of counts to known cell probabilities."""
    observed = np.asarray(observed, dtype=np.float64)
    expected = observed.sum() * np.asarray(probs, dtype=np.float64)
    assert (expected >= 5).all(), expected  # the chi-square approximation needs it
    return chi2_sf(float(((observed - expected) ** 2 / expected).sum()), len(observed) - 1)


def chi2_two_sample_p(r: np.ndarray, s: np.ndarray) -> float:
    """Homogeneity of two count vectors (observed ``r`` vs a simulation ``s``)."""
    r, s = np.asarray(r, np.float64), np.asarray(s, np.float64)
    keep = (r + s) > 0
    r, s = r[keep], s[keep]
    k1, k2 = math.sqrt(s.sum() / r.sum()), math.sqrt(r.sum() / s.sum())
    return chi2_sf(float(((k1 * r - k2 * s) ** 2 / (r + s)).sum()), len(r) - 1)


def ks_uniform_p(u: np.ndarray) -> float:
    """Kolmogorov-Smirnov test of ``u`` against U(0, 1) (Stephens' approximation)."""
    u = np.sort(u)
    n = len(u)
    grid = np.arange(1, n + 1) / n
    d = max(float((grid - u).max()), float((u - (grid - 1 / n)).max()))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return min(1.0, max(0.0, p))


def binomial_z(successes: int, n: int, p: float) -> float:
    return (successes - n * p) / math.sqrt(n * p * (1 - p))


def uniform_counts(values: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Counts of each integer in [lo, hi]; every value must lie in that range."""
    assert values.min() >= lo and values.max() <= hi, (values.min(), values.max(), lo, hi)
    return np.bincount(values - lo, minlength=hi - lo + 1)


# -- coordinate-coded pairs ---------------------------------------------------------------------
def coded_uint8(n: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A: rows, columns and a per-sample marker as uint8 CHW; B = MARK - A."""
    a = np.empty((n, 3, height, width), dtype=np.uint8)
    a[:, 0] = np.arange(height)[:, None]
    a[:, 1] = np.arange(width)[None, :]
    a[:, 2] = (np.arange(n) % MARK)[:, None, None]
    return a, (MARK - a).astype(np.uint8), np.arange(n, dtype=np.int64)


def write(path: Path, a: np.ndarray, b: np.ndarray, labels: np.ndarray) -> Path:
    write_pairs(ArraySource(a, b, labels), path, workers=1, page_size=1 << 20, progress=False)
    return path


def load(path: Path, aug: PairAugment, epochs: int = EPOCHS) -> tuple[np.ndarray, ...]:
    """(A, B, sample id) of every sample over ``epochs`` epochs, in sequential order."""
    loader = make_loader(
        path,
        batch_size=500,
        order="sequential",
        seed=SEED,
        augment=aug,
        drop_last=False,
        num_threads=1,
        device="cpu",
    )
    parts: list[list[np.ndarray]] = [[], [], []]
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            for part, x in zip(parts, batch):
                part.append(x.clone().numpy())
    a, b, ids = (np.concatenate(p) for p in parts)
    return a, b, ids


# -- recovering the geometry from an output image -----------------------------------------------
def _region_coords(out_h: int, out_w: int, hflip: int, vflip: int, turns: int) -> np.ndarray:
    """For each output pixel, its (row, col) in the crop region, by the definition:
    take the region, flip (h, then v), rotate by ``turns`` quarter turns (np.rot90)."""
    rh, rw = (out_h, out_w) if turns % 2 == 0 else (out_w, out_h)
    grid = np.stack(np.meshgrid(np.arange(rh), np.arange(rw), indexing="ij"))
    if hflip:
        grid = grid[:, :, ::-1]
    if vflip:
        grid = grid[:, ::-1, :]
    return np.rot90(grid, turns, axes=(1, 2))


def recover(
    out: np.ndarray, height: int, width: int, candidates: Sequence[tuple[int, int, int]]
) -> np.ndarray:
    """Per image: ``(hflip, vflip, turns, y0, x0)``, the one candidate transform (and the
    region's offset in the source) that explains every pixel, padding included."""
    rows, cols = out[:, 0].astype(np.int64), out[:, 1].astype(np.int64)
    inside = out[:, 0] != FILL
    assert (inside == (out[:, 1] != FILL)).all() and inside.any(axis=(1, 2)).all()
    big = 1 << 20
    found = np.full((len(out), 5), -big, dtype=np.int64)
    hits = np.zeros(len(out), dtype=np.int64)
    for hflip, vflip, turns in candidates:
        ry, rx = _region_coords(out.shape[2], out.shape[3], hflip, vflip, turns)
        offsets = []
        ok = np.ones(len(out), dtype=bool)
        for coord, r in ((rows, ry), (cols, rx)):
            est = coord - r
            lo = np.where(inside, est, big).min(axis=(1, 2))
            ok &= lo == np.where(inside, est, -big).max(axis=(1, 2))
            offsets.append(lo)
        y0, x0 = offsets
        ys, xs = y0[:, None, None] + ry, x0[:, None, None] + rx
        expect_inside = (ys >= 0) & (ys < height) & (xs >= 0) & (xs < width)
        ok &= (expect_inside == inside).all(axis=(1, 2))
        found[ok] = np.stack(
            [np.full_like(y0, hflip), np.full_like(y0, vflip), np.full_like(y0, turns), y0, x0],
            axis=1,
        )[ok]
        hits += ok
    assert (hits == 1).all(), f"{(hits != 1).sum()} images match no single candidate"
    return found


def recover_pair(
    a: np.ndarray,
    b: np.ndarray,
    ids: np.ndarray,
    height: int,
    width: int,
    candidates: Sequence[tuple[int, int, int]],
) -> np.ndarray:
    """A's geometry; asserts the markers name the sample and B's geometry equals A's."""
    got = recover(a, height, width, candidates)
    inside = a[:, 2] != FILL
    assert (a[:, 2] == (ids % MARK)[:, None, None])[inside].all(), "pixels from another sample"
    b_as_a = np.where(b == FILL, FILL, MARK - b.astype(np.int64)).astype(np.uint8)
    np.testing.assert_array_equal(recover(b_as_a, height, width, candidates), got)
    return got


IDENTITY = [(0, 0, 0)]


# -- padded crop, translate ---------------------------------------------------------------------
H, W = 12, 14  # not square, so rows and columns cannot be confused


@pytest.fixture(scope="module")
def rect(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("dist") / "rect.beton", *coded_uint8(N, H, W))


@pytest.fixture(scope="module")
def square(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("dist") / "square.beton", *coded_uint8(N, H, H))


def check_offsets(
    got: np.ndarray, y_lo: int, y_pmf: np.ndarray, x_lo: int, x_pmf: np.ndarray
) -> None:
    """Region offsets ``(y0, x0)``: each within its range, reaching both ends, distributed as
    its pmf, and the two independent (their joint law is the product)."""
    cells = []
    for name, values, lo, pmf in (("y0", got[:, 3], y_lo, y_pmf), ("x0", got[:, 4], x_lo, x_pmf)):
        counts = uniform_counts(values, lo, lo + len(pmf) - 1)
        assert counts[0] > 0 and counts[-1] > 0, f"{name} never reaches an end: {counts}"
        p = chi2_p(counts, pmf)
        assert p > ALPHA, f"{name} offsets from {lo}: {counts.tolist()}, p={p:.3g}"
        cells.append(values - lo)
    joint = np.bincount(cells[0] * len(x_pmf) + cells[1], minlength=len(y_pmf) * len(x_pmf))
    p = chi2_p(joint, np.outer(y_pmf, x_pmf).ravel())
    assert p > ALPHA, f"(y0, x0) not independent: p={p:.3g}"


def flat(lo: int, hi: int) -> np.ndarray:
    return np.full(hi - lo + 1, 1 / (hi - lo + 1))


def test_padded_crop_offsets_uniform_over_the_whole_range(rect: Path) -> None:
    """Offsets uniform over all of [-pad, size + pad - out] (padding shows as FILL)."""
    oh, ow, pad = 8, 9, 3
    aug = PairAugment(crop=(oh, ow), crop_padding=pad, pad_mode="constant", fill=FILL)
    got = recover_pair(*load(rect, aug), H, W, IDENTITY)
    check_offsets(got, -pad, flat(-pad, H + pad - oh), -pad, flat(-pad, W + pad - ow))


@pytest.mark.parametrize("crop", [None, (8, 8)], ids=["translate", "crop+translate"])
def test_translate_within_and_covering_its_bounds(rect: Path, crop) -> None:
    """Offset = uniform crop position in [0, size - out] + uniform shift in [-d, d]."""
    dy, dx = 3, 2
    aug = PairAugment(crop=crop, translate=(dy, dx), fill=FILL)
    got = recover_pair(*load(rect, aug), H, W, IDENTITY)
    oh, ow = crop or (H, W)
    y_pmf = np.convolve(flat(0, H - oh), flat(-dy, dy))
    x_pmf = np.convolve(flat(0, W - ow), flat(-dx, dx))
    check_offsets(got, -dy, y_pmf, -dx, x_pmf)


# -- flips, rot90 -------------------------------------------------------------------------------
def test_flip_rates_and_independence(rect: Path) -> None:
    ph, pv = 0.3, 0.6
    got = recover_pair(
        *load(rect, PairAugment(hflip=ph, vflip=pv)),
        H,
        W,
        [(h, v, 0) for h in (0, 1) for v in (0, 1)],
    )
    n = len(got)
    for name, flips, p in (("hflip", got[:, 0], ph), ("vflip", got[:, 1], pv)):
        z = binomial_z(int(flips.sum()), n, p)
        assert abs(z) < 4.5, f"{name}: {flips.sum()} of {n} at p={p}: z={z:.2f}"
    cells = np.bincount(2 * got[:, 0] + got[:, 1], minlength=4)
    probs = [(1 - ph) * (1 - pv), (1 - ph) * pv, ph * (1 - pv), ph * pv]
    p = chi2_p(cells, np.array(probs))
    assert p > ALPHA, f"(hflip, vflip) cells {cells.tolist()}, p={p:.3g}"


def test_rot90_uniform_over_four_turns_and_the_dihedral_group(square: Path) -> None:
    aug = PairAugment(rot90=True, hflip=0.5)
    got = recover_pair(*load(square, aug), H, H, [(h, 0, k) for h in (0, 1) for k in range(4)])
    turns = np.bincount(got[:, 2], minlength=4)
    assert len(turns) == 4
    p = chi2_p(turns, np.full(4, 0.25))
    assert p > ALPHA, f"quarter turns {turns.tolist()}, p={p:.3g}"
    # Flip then rotate: the 8 (hflip, turns) pairs are the 8 distinct symmetries of a square.
    elements = np.bincount(4 * got[:, 0] + got[:, 2], minlength=8)
    p = chi2_p(elements, np.full(8, 1 / 8))
    assert p > ALPHA, f"dihedral elements {elements.tolist()}, p={p:.3g}"


# -- random resized crop ------------------------------------------------------------------------
RH, RW, ROH, ROW = 16, 20, 8, 10  # source and output sizes of the resized crop


def torchvision_boxes(
    n: int,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    rng: np.random.Generator,
) -> np.ndarray:
    """``n`` draws of ``(i, j, h, w)`` from torchvision's ``RandomResizedCrop.get_params``,
    in numpy: 10 attempts (area uniform in scale, log aspect uniform in log ratio), then the
    central crop at the nearest allowed ratio."""
    area = height * width
    target = area * rng.uniform(scale[0], scale[1], (n, 10))
    aspect = np.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1]), (n, 10)))
    w = np.rint(np.sqrt(target * aspect)).astype(np.int64)
    h = np.rint(np.sqrt(target / aspect)).astype(np.int64)
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.argmax(axis=1)
    rows = np.arange(n)
    bh, bw = h[rows, first], w[rows, first]
    in_ratio = width / height
    if in_ratio < min(ratio):
        fh, fw = round(width / min(ratio)), width
    elif in_ratio > max(ratio):
        fh, fw = height, round(height * max(ratio))
    else:
        fh, fw = height, width
    none = ~fits.any(axis=1)
    bh[none], bw[none] = fh, fw
    i = rng.integers(0, height - bh + 1)
    j = rng.integers(0, width - bw + 1)
    i[none], j[none] = (height - fh) // 2, (width - fw) // 2
    return np.stack([i, j, bh, bw], axis=1)


def coded_float(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 CHW: channel 0 = row, 1 = column. Bilinear sampling of a linear ramp is
    the ramp at the sampled point, so each output row/column gives the box exactly."""
    a = np.empty((n, 2, RH, RW), dtype=np.float32)
    a[:, 0] = np.arange(RH, dtype=np.float32)[:, None]
    a[:, 1] = np.arange(RW, dtype=np.float32)[None, :]
    return a, 100.0 - a, np.arange(n, dtype=np.int64)


def recover_box(out: np.ndarray) -> np.ndarray:
    """Per image ``(i, j, h, w)``: the output samples source row ``i + (y + 0.5) h / oh - 0.5``
    (clipped to the image): a line fitted to the unclipped rows gives ``h`` and ``i``."""
    boxes = np.empty((len(out), 4), dtype=np.int64)
    for axis, size, n_out in ((0, RH, ROH), (1, RW, ROW)):
        ramp = out[:, 0, :, 0] if axis == 0 else out[:, 1, 0, :]
        pos = np.arange(n_out) + 0.5
        for k, v in enumerate(ramp.astype(np.float64)):
            use = (v > 1e-4) & (v < size - 1 - 1e-4)
            assert use.sum() >= 2, v
            slope, icept = np.polyfit(pos[use], v[use], 1)
            length, start = slope * n_out, icept + 0.5
            assert abs(length - round(length)) < 1e-3 and abs(start - round(start)) < 1e-3
            boxes[k, axis], boxes[k, 2 + axis] = round(start), round(length)
    return boxes


@pytest.fixture(scope="module")
def ramps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("dist") / "ramps.beton", *coded_float(N))


def load_boxes(path: Path, aug: PairAugment) -> np.ndarray:
    a, b, _ = load(path, aug)
    boxes = recover_box(a)
    np.testing.assert_array_equal(recover_box(100.0 - b), boxes)  # B: the same box
    return boxes


def binned(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.bincount(np.searchsorted(edges, values, side="right"), minlength=len(edges) + 1)


@pytest.mark.parametrize(
    ("scale", "ratio"),
    [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 1.0), (1 / 4, 4.0))],
    ids=["default", "often-rejected"],
)
def test_resized_crop_follows_torchvision(ramps: Path, scale, ratio) -> None:
    aug = PairAugment(resized_crop=(ROH, ROW), crop_scale=scale, crop_ratio=ratio)
    got = load_boxes(ramps, aug)
    sim = torchvision_boxes(400_000, RH, RW, scale, ratio, np.random.default_rng(SEED))
    i, j, h, w = got.T
    assert (h >= 1).all() and (i >= 0).all() and (i + h <= RH).all()
    assert (w >= 1).all() and (j >= 0).all() and (j + w <= RW).all()
    # The box size: the joint law of (h, w), and the two quantities the op is defined by.
    cells = {"(h, w)": (h * 64 + w, sim[:, 2] * 64 + sim[:, 3])}
    area, sim_area = h * w / (RH * RW), sim[:, 2] * sim[:, 3] / (RH * RW)
    log_ratio, sim_log_ratio = np.log(w / h), np.log(sim[:, 3] / sim[:, 2])
    for name, (obs, ref) in cells.items():
        keys, ref_counts = np.unique(ref, return_counts=True)
        rare = ref_counts * len(obs) / len(ref) < 5
        pos = np.searchsorted(keys, obs)
        known = (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == obs)
        obs_counts = np.bincount(pos[known], minlength=len(keys))
        r = np.append(obs_counts[~rare], obs_counts[rare].sum() + (~known).sum())
        s = np.append(ref_counts[~rare], ref_counts[rare].sum())
        p = chi2_two_sample_p(r, s)
        assert p > ALPHA, f"{name}: p={p:.3g}"
    for name, obs, ref in (
        ("area fraction", area, sim_area),
        ("log aspect", log_ratio, sim_log_ratio),
    ):
        edges = np.unique(np.quantile(ref, np.linspace(0, 1, 13)[1:-1]))
        p = chi2_two_sample_p(binned(obs, edges), binned(ref, edges))
        assert p > ALPHA, f"{name}: {binned(obs, edges).tolist()}, p={p:.3g}"
    # Given the size, the position is uniform: randomised PIT of i over [0, RH - h].
    rng = np.random.default_rng(SEED + 1)
    for name, start, room in (("i", i, RH - h), ("j", j, RW - w)):
        p = ks_uniform_p((start + rng.random(len(start))) / (room + 1))
        assert p > ALPHA, f"offset {name}: p={p:.3g}"


@pytest.mark.parametrize(
    ("ratio", "box"),
    [((4.5, 5.0), (6, 0, 4, 20)), ((0.1, 0.2), (0, 8, 16, 3))],
    ids=["too-wide", "too-tall"],
)
def test_resized_crop_falls_back_to_the_central_crop(ramps: Path, ratio, box) -> None:
    """No attempt can fit: torchvision's fallback, the central crop at the nearest ratio
    (``w = W, h = round(W / min(ratio))`` or ``h = H, w = round(H * max(ratio))``)."""
    aug = PairAugment(resized_crop=(ROH, ROW), crop_scale=(0.5, 1.0), crop_ratio=ratio)
    got = load_boxes(ramps, aug)
    expect = torchvision_boxes(10, RH, RW, (0.5, 1.0), ratio, np.random.default_rng(0))
    assert (expect == box).all()
    assert (got == np.array(box)).all(), np.unique(got, axis=0)


def test_statistics_helpers_match_known_values() -> None:
    """The hand-written tails against textbook values, so the tests above can trust them."""
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, abs=1e-4)
    assert chi2_sf(5.991, 2) == pytest.approx(0.05, abs=1e-4)
    assert chi2_sf(7.815, 3) == pytest.approx(0.05, abs=1e-4)
    assert chi2_sf(23.209, 10) == pytest.approx(0.01, abs=1e-4)
    assert chi2_sf(11.070, 5) == pytest.approx(0.05, abs=1e-4)
    rng = np.random.default_rng(0)
    assert ks_uniform_p(rng.random(5000)) > 0.01
    assert ks_uniform_p(rng.random(5000) ** 1.1) < 1e-6
