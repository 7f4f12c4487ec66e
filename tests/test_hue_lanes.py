"""The hue of sixteen pixels a step (kernels/hue_lanes.py): the intrinsic (``<16 x float>``
vectors) and its plain twin give the same bits as :func:`hue_pixel`, the definition, over
seeded colours, every tie of six levels (largest or smallest shared, greys, black, white),
values outside ``[0, 1]`` and non-finite ones, shifted both ways by up to half a turn."""

from __future__ import annotations

import functools
import itertools

import numba as nb
import numpy as np
import pytest

from ffcv_pairs.kernels import hue_lanes

KINDS = ["intrinsic", "plain"]
SHIFTS = [-0.5, -0.3, -0.05, 0.0, 0.05, 0.25, 0.5]


@functools.cache
def _runner(kind: str):
    step = getattr(hue_lanes, f"hue16_{kind}")

    @nb.njit
    def run(r, g, b, turn):  # pragma: no cover - JIT
        for j in range(0, r.shape[0], hue_lanes.HUE_LANES):
            step(r, g, b, j, turn)

    return run


def _pixels(seed: int) -> np.ndarray:
    """(3, n) float32, n a multiple of 16: random colours, the 216 ties of six levels, values
    outside [0, 1], and a few non-finite ones."""
    rng = np.random.default_rng(seed)
    levels = np.array([0, 1, 77, 128, 254, 255], np.float32) / np.float32(255)
    ties = np.array(list(itertools.product(levels, repeat=3)), np.float32).T
    wide = rng.uniform(-0.5, 1.5, (3, 200)).astype(np.float32)
    odd = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.5, 0.0], np.float32), (3, 40))
    rand = rng.random((3, 4096)).astype(np.float32)
    out = np.concatenate([rand, ties, wide, odd], axis=1)
    return np.ascontiguousarray(out[:, : out.shape[1] // 16 * 16])


def _shifted(kind: str, pixels: np.ndarray, shift: float) -> np.ndarray:
    r, g, b = (np.ascontiguousarray(c) for c in pixels.copy())
    _runner(kind)(r, g, b, np.float32(6.0 * shift))
    return np.stack([r, g, b])


def _same(a: np.ndarray, b: np.ndarray) -> None:
    """Bit equal where a number, NaN where NaN (a NaN's payload may follow operand order)."""
    nan = np.isnan(a)
    assert (nan == np.isnan(b)).all()
    assert a[~nan].tobytes() == b[~nan].tobytes()


@pytest.mark.parametrize("shift", SHIFTS)
def test_hue16_intrinsic_equals_its_twin(shift: float) -> None:
    pixels = _pixels(seed=11)
    _same(_shifted("intrinsic", pixels, shift), _shifted("plain", pixels, shift))


@pytest.mark.parametrize("kind", KINDS)
def test_hue16_is_hue_pixel_on_each_pixel(kind: str) -> None:
    pixels = _pixels(seed=12)[:, :1024]
    for shift in (-0.4, 0.05):
        got = _shifted(kind, pixels, shift)
        turn = np.float32(6.0 * shift)
        want = np.array([hue_lanes.hue_pixel(*px, turn) for px in pixels.T], np.float32).T
        _same(got, want)


@functools.cache
def _summer(kind: str):
    step = getattr(hue_lanes, f"lane_sums_{kind}")

    @nb.njit
    def run(row, a, chunks, acc):  # pragma: no cover - JIT
        step(row, a, chunks, acc)

    return run


@pytest.mark.parametrize("kind", KINDS)
def test_lane_sums_add_each_lane_in_order(kind: str) -> None:
    """Each of the 64 running sums of both kinds: its values in order, widened to float64
    and added one at a time (a start ``a`` off the row's start, sums that do not start at
    zero, values whose float64 sums round, and none: ``chunks`` 0 keeps ``acc``)."""
    rng = np.random.default_rng(13)
    row = (rng.random(64 * 40 + 7) * 10.0 ** rng.integers(-9, 3, 64 * 40 + 7)).astype(np.float32)
    start = rng.random(hue_lanes.SUM_LANES) * 1e3
    for a, chunks in ((0, 40), (7, 39), (5, 0), (3, 1)):
        acc = start.copy()
        _summer(kind)(row, a, chunks, acc)
        want = start.copy()
        for i in range(chunks):
            for k in range(hue_lanes.SUM_LANES):
                want[k] += np.float64(row[a + 64 * i + k])
        assert acc.tobytes() == want.tobytes(), (a, chunks)


@functools.cache
def _stager(kind: str):
    step = getattr(hue_lanes, f"parts64_{kind}")

    @nb.njit
    def run(r, g, b, stages):  # pragma: no cover - JIT
        for j in range(0, r.shape[0], hue_lanes.PARTS_LANES):
            step(r, g, b, j, stages)

    return run


def _tables(seed: int) -> list[np.ndarray]:
    """Stage tables: every code in every place, one to four stages, factors on both sides of
    1 (and 0, 1), contrast values, hue turns up to half a turn either way."""
    rng = np.random.default_rng(seed)
    tables = []
    for n in range(60):
        table = np.zeros((4, 4), np.float32)
        table[:, 0] = hue_lanes.SKIP
        for k in range(1 + n % 4):
            code = (n + 3 * k) % hue_lanes.SKIP
            factor = rng.choice([0.0, 1.0, rng.uniform(0, 2)])
            value = {hue_lanes.HUE: 6 * rng.uniform(-0.5, 0.5)}.get(code, 1 - factor)
            if code in (hue_lanes.C_TOP, hue_lanes.C_CLAMP):
                value = (1 - factor) * rng.random()
            table[k, :3] = code, factor, value
        tables.append(table)
    return tables


def _staged(kind: str, pixels: np.ndarray, table: np.ndarray) -> np.ndarray:
    r, g, b = (np.ascontiguousarray(c) for c in pixels.copy())
    _stager(kind)(r, g, b, table)
    return np.stack([r, g, b])


def test_parts64_intrinsic_equals_its_twin() -> None:
    """The stages in registers and the twin, a pixel at a time: the same bits on seeded
    colours, the ties of six levels, values outside ``[0, 1]`` and non-finite ones."""
    pixels = _pixels(seed=14)
    pixels = pixels[:, : pixels.shape[1] // 64 * 64]
    for table in _tables(seed=15):
        _same(_staged("intrinsic", pixels, table), _staged("plain", pixels, table))


def test_parts64_is_each_part_in_order() -> None:
    """The twin is the parts' definitions in the table's order: brightness, contrast and
    saturation as numpy computes them in float32 (clamped, or only up to 1), the hue
    :func:`hue_pixel`'s; the first end code ends the stages."""
    pixels = np.random.default_rng(16).random((3, 128)).astype(np.float32)
    f32, gray = np.float32, (np.float32(0.2989), np.float32(0.587), np.float32(0.114))
    for table in _tables(seed=17)[:24]:
        want = pixels.copy()
        for code, factor, value, _ in table:
            f, v = f32(factor), f32(value)
            if code == hue_lanes.SKIP:
                break
            if code == hue_lanes.HUE:
                want = np.array([hue_lanes.hue_pixel(*px, v) for px in want.T], np.float32).T
                continue
            if code >= hue_lanes.S_TOP:
                want = f * want + v * (gray[0] * want[0] + gray[1] * want[1] + gray[2] * want[2])
            else:
                want = f * want + v if code >= hue_lanes.C_TOP else f * want
            if code in (hue_lanes.B_CLAMP, hue_lanes.C_CLAMP, hue_lanes.S_CLAMP):
                want = np.maximum(want, f32(0))
            if code != hue_lanes.B_NONE:
                want = np.minimum(want, f32(1))
        _same(_staged("plain", pixels, table), want)
