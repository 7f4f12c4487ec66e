"""The vector steps of the resize (kernels/lanes.py): the horizontal blend, the widened row
blend and the output cast. Every kind (the permute and the scalar-load intrinsics, and the
plain twin) gives the value of its definition, and the kinds agree bit for bit, over
seeded cases: rows of 8 to 64 values covered the way the resize covers them (steps of 8,
the last one overlapping), unaligned offsets, and a last step that ends exactly at the end
of its buffer, with guard values after it that must stay as they were."""

from __future__ import annotations

import functools

import numba as nb
import numpy as np
import pytest

from ffcv_pairs.kernels import lanes
from ffcv_pairs.kernels.lanes import LANES, MAX_SPAN, PERMUTE, make_blend8

BLENDS = {
    "scalar-loads": make_blend8(False),
    "plain": lanes.blend8_plain,
    **({"permute": make_blend8(True)} if PERMUTE else {}),
}
KINDS = ["intrinsic", "plain"]
GUARD = 8


@functools.cache
def _caller(kind: str):
    blend = BLENDS[kind]

    @nb.njit(fastmath={"contract"})
    def run(src, ks, starts, offsets, weights, dst):  # pragma: no cover - JIT
        for blk in range(starts.shape[0] // 2):
            blend(src, dst, ks, starts, offsets, blk * LANES, weights)

    return run


def _case(seed: int, planes: int, blocks: int):
    rng = np.random.default_rng(seed)
    width = 4 * LANES * blocks
    srcs = rng.normal(0, 100, (planes, width + 2 * LANES)).astype(np.float32)
    starts = rng.integers(0, width, 2 * blocks).astype(np.int64)
    starts[-1] = width + LANES  # the last window ends exactly at the end of the rows
    offsets = rng.integers(0, MAX_SPAN + 1, LANES * blocks).astype(np.int32)
    offsets[:LANES] = [0, MAX_SPAN, 0, MAX_SPAN, MAX_SPAN, 0, MAX_SPAN, 0]
    weights = rng.random(LANES * blocks).astype(np.float32)
    weights[:4] = [0.0, 1.0, 0.5, np.float32(1 - 2**-24)]
    return srcs, starts, offsets, weights


def _definition(srcs, starts, offsets, weights):
    """float64: a + (b - a) * w, taps from the window of each half block."""
    s = np.repeat(starts, LANES // 2) + offsets
    return [src[s] + (src[s + 1].astype(np.float64) - src[s]) * weights for src in srcs]


def _blended(kind: str, seed: int, ks: tuple[int, ...], blocks: int) -> np.ndarray:
    srcs, starts, offsets, weights = _case(seed, 3, blocks)
    dsts = np.full((3, LANES * blocks + GUARD), np.nan, np.float32)
    dsts[:, -GUARD:] = 7.0
    _caller(kind)(srcs, ks, starts, offsets, weights, dsts)
    return dsts


@pytest.mark.parametrize("kind", list(BLENDS))
@pytest.mark.parametrize("ks", [(0,), (0, 1, 2), (2, 0, 1)])
def test_blend8_is_the_linear_blend_of_its_taps(kind: str, ks: tuple[int, ...]) -> None:
    srcs, starts, offsets, weights = _case(len(ks), 3, 5)
    dsts = _blended(kind, len(ks), ks, 5)
    want = _definition(srcs, starts, offsets, weights)
    for k in range(3):
        if k in ks:
            np.testing.assert_allclose(dsts[k, :-GUARD], want[k], rtol=1e-5, atol=1e-3)
        else:
            assert np.isnan(dsts[k, :-GUARD]).all()
    assert (dsts[:, -GUARD:] == 7.0).all()


@pytest.mark.parametrize("kind", [k for k in BLENDS if k != "plain"])
@pytest.mark.parametrize("ks", [(2, 0, 1), (1, 2, 2)])
def test_blend8_intrinsics_and_twin_agree_bit_for_bit(kind: str, ks: tuple[int, ...]) -> None:
    for seed in (7, 8):
        got, plain = (_blended(k, seed, ks, 40) for k in (kind, "plain"))
        assert got.tobytes() == plain.tobytes()


@functools.cache
def _rows(kind: str):
    rows8 = getattr(lanes, f"rows8_{kind}")

    @nb.njit(fastmath={"contract"})
    def run(src, i0, i1, weight, half, out, o, n):  # pragma: no cover - JIT
        """A row of n >= 8 values as the resize covers it: steps of 8, the last overlapping."""
        for j in range(0, n - LANES, LANES):
            rows8(src, i0 + j, i1 + j, weight, half, out, o + j)
        rows8(src, i0 + n - LANES, i1 + n - LANES, weight, half, out, o + n - LANES)

    return run


def _rows_case(kind: str, dtype: type, n: int, seed: int):
    """Two rows of ``n`` values at unaligned offsets, blended into row 1 of ``out``, the
    last value at the end of its data; ``out``'s row 0 and its guard must stay NaN."""
    rng = np.random.default_rng(seed)
    src = (rng.integers(0, 256, 200) - (128 if np.dtype(dtype).kind == "i" else 0)).astype(dtype)
    i0, i1 = int(rng.integers(0, 200 - n)), 200 - n
    out = np.full((2, 64 + GUARD), np.nan, np.float32)
    o = out.shape[1] + 64 - n  # ends at out[1, 63]: GUARD NaN values after it
    weight, half = np.float32(rng.random()), np.float32(0.5 if seed % 2 else 0.0)
    _rows(kind)(src, i0, i1, weight, half, out, o, n)
    a, b = src[i0 : i0 + n].astype(np.float64), src[i1 : i1 + n].astype(np.float64)
    return out, a + (b - a) * np.float64(weight) + half, o - out.shape[1]


ROW_DTYPES = [np.uint8, np.int16, np.uint16, np.int64, np.float32, np.float64]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ROW_DTYPES)
def test_rows8_widens_and_blends_two_rows(kind: str, dtype: type) -> None:
    for n in (8, 9, 15, 16, 17, 40, 63, 64):
        out, want, at = _rows_case(kind, dtype, n, seed=n)
        np.testing.assert_allclose(out[1, at : at + n], want, rtol=0, atol=1e-4)
        assert np.isnan(out[0]).all() and np.isnan(out[1, :at]).all()
        assert np.isnan(out[1, at + n :]).all()  # the guard: nothing past the row


@pytest.mark.parametrize("dtype", ROW_DTYPES)
def test_rows8_intrinsic_and_twin_agree_bit_for_bit(dtype: type) -> None:
    for n in range(LANES, 65):
        for seed in (n, n + 100):
            got, _, _ = _rows_case("intrinsic", dtype, n, seed)
            plain, _, _ = _rows_case("plain", dtype, n, seed)
            assert got.tobytes() == plain.tobytes(), (n, seed)


@functools.cache
def _store(kind: str):
    store8 = getattr(lanes, f"store8_{kind}")

    @nb.njit
    def run(line, i, dst, d, n):  # pragma: no cover - JIT
        for j in range(0, n - LANES, LANES):
            store8(line, i + j, dst, d + j)
        store8(line, i + n - LANES, dst, d + n - LANES)

    return run


STORE_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float32, np.float64]


def _store_case(kind: str, dtype: type, n: int, seed: int):
    """``n`` values of a 2-D line (row 1, unaligned) into the last ``n`` of ``dst``'s data,
    guard values after it."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    lo, hi = (0.0, 255.99) if dt.kind == "u" else (-128.0, 127.99)
    line = rng.uniform(lo, hi, (2, 80)).astype(np.float32)
    line[1, :4] = [lo, hi, 0.0, np.float32(0.5)]
    i = line.shape[1] + int(rng.integers(0, 80 - n + 1))
    dst = np.zeros(100 + GUARD, dtype)
    d = 100 - n
    _store(kind)(line, i, dst, d, n)
    flat = line.reshape(-1)
    return dst, flat[i : i + n].astype(dtype), d


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", STORE_DTYPES)
def test_store8_casts_a_line_to_the_output_dtype(kind: str, dtype: type) -> None:
    for n in (8, 9, 16, 23, 64):
        dst, want, d = _store_case(kind, dtype, n, seed=n)
        np.testing.assert_array_equal(dst[d : d + n], want)  # integers: truncation, as numpy
        assert (dst[:d] == 0).all() and (dst[d + n :] == 0).all()


@pytest.mark.parametrize("dtype", STORE_DTYPES)
def test_store8_intrinsic_and_twin_agree_bit_for_bit(dtype: type) -> None:
    for n in range(LANES, 65):
        got, _, _ = _store_case("intrinsic", dtype, n, seed=n)
        plain, _, _ = _store_case("plain", dtype, n, seed=n)
        assert got.tobytes() == plain.tobytes(), n
