"""The vector steps of the resize (kernels/lanes.py): the horizontal blend (the permute
and the scalar-load kinds give the blend of its definition, bit for bit alike), the
widened row blend and the output cast."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest

from ffcv_pairs.kernels.lanes import LANES, MAX_SPAN, PERMUTE, make_blend8, rows8, store8

KINDS = [False, True] if PERMUTE else [False]


def _caller(blend):
    @nb.njit(fastmath={"contract"})
    def run(src, ks, starts, offsets, weights, dst):
        for blk in range(starts.shape[0] // 2):
            blend(src, dst, ks, starts, offsets, blk * LANES, weights)

    return run


def _case(seed: int, planes: int, blocks: int):
    rng = np.random.default_rng(seed)
    width = 4 * LANES * blocks
    srcs = rng.normal(0, 100, (planes, width + 2 * LANES)).astype(np.float32)
    starts = rng.integers(0, width, 2 * blocks).astype(np.int64)
    offsets = rng.integers(0, MAX_SPAN + 1, LANES * blocks).astype(np.int32)
    weights = rng.random(LANES * blocks).astype(np.float32)
    return srcs, starts, offsets, weights


def _definition(srcs, starts, offsets, weights):
    """float64: a + (b - a) * w, taps from the window of each half block."""
    s = np.repeat(starts, LANES // 2) + offsets
    return [src[s] + (src[s + 1].astype(np.float64) - src[s]) * weights for src in srcs]


@pytest.mark.parametrize("permute", KINDS)
@pytest.mark.parametrize("planes", [1, 3])
def test_blend8_is_the_linear_blend_of_its_taps(permute: bool, planes: int) -> None:
    srcs, starts, offsets, weights = _case(planes, planes, 5)
    dsts = np.full((planes, LANES * 5), np.nan, np.float32)
    _caller(make_blend8(permute))(srcs, tuple(range(planes)), starts, offsets, weights, dsts)
    for got, want in zip(dsts, _definition(srcs, starts, offsets, weights), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


@pytest.mark.skipif(not PERMUTE, reason="the host has no AVX: only the scalar-load kind")
def test_permute_and_scalar_loads_agree_bit_for_bit() -> None:
    srcs, starts, offsets, weights = _case(7, 3, 40)
    outs = []
    for permute in (True, False):
        dsts = np.empty((3, LANES * 40), np.float32)
        _caller(make_blend8(permute))(srcs, (2, 0, 1), starts, offsets, weights, dsts)
        outs.append(dsts.tobytes())
    assert outs[0] == outs[1]


@nb.njit(fastmath={"contract"})
def _rows(src, i0, i1, weight, half, out):
    n = out.shape[1]
    for j in [*range(0, n - LANES, 3), n - LANES]:  # overlapping steps, as the resize's last
        rows8(src, i0 + j, i1 + j, weight, half, out, n + j)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32])
def test_rows8_widens_and_blends_two_rows(dtype: type) -> None:
    rng = np.random.default_rng(3)
    src = rng.integers(0, 256, 200).astype(dtype)
    out = np.full((2, 40), np.nan, np.float32)
    _rows(src, 7, 131, np.float32(0.3), np.float32(0.5), out)
    a, b = src[7:47].astype(np.float64), src[131:171].astype(np.float64)
    np.testing.assert_allclose(out[1], a + (b - a) * 0.3 + 0.5, rtol=0, atol=1e-4)
    assert np.isnan(out[0]).all()  # the offset is into the whole array: row 1 only


@nb.njit
def _store(line, dst):
    for j in range(0, line.shape[0] - LANES + 1, LANES):
        store8(line, j, dst, 2 + j)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_store8_casts_a_line_to_the_output_dtype(dtype: type) -> None:
    line = np.linspace(0.0, 255.99, 4 * LANES, dtype=np.float32)
    dst = np.zeros(4 * LANES + 4, dtype)
    _store(line, dst)
    want = line.astype(dtype)  # integers: truncation, as numpy casts
    np.testing.assert_array_equal(dst[2:-2], want)
    assert (dst[:2] == 0).all() and (dst[-2:] == 0).all()
