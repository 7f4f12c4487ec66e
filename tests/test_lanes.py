"""The vector horizontal blend of the resize (kernels/lanes.py): the permute and the
scalar-load kinds give the blend of their definition, bit for bit alike."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest

from ffcv_pairs.kernels.lanes import LANES, MAX_SPAN, PERMUTE, make_blend8

KINDS = [False, True] if PERMUTE else [False]


def _caller(blend):
    @nb.njit(fastmath={"contract"})
    def run(srcs, starts, offsets, weights, dsts):
        for blk in range(starts.shape[0] // 2):
            blend(srcs, starts, offsets, blk * LANES, weights, dsts, blk * LANES)

    return run


def _case(seed: int, planes: int, blocks: int):
    rng = np.random.default_rng(seed)
    width = 4 * LANES * blocks
    srcs = tuple(rng.normal(0, 100, width + 2 * LANES).astype(np.float32) for _ in range(planes))
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
    dsts = tuple(np.full(LANES * 5, np.nan, np.float32) for _ in range(planes))
    _caller(make_blend8(permute))(srcs, starts, offsets, weights, dsts)
    for got, want in zip(dsts, _definition(srcs, starts, offsets, weights), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


@pytest.mark.skipif(not PERMUTE, reason="the host has no AVX: only the scalar-load kind")
def test_permute_and_scalar_loads_agree_bit_for_bit() -> None:
    srcs, starts, offsets, weights = _case(7, 3, 40)
    outs = []
    for permute in (True, False):
        dsts = tuple(np.empty(LANES * 40, np.float32) for _ in range(3))
        _caller(make_blend8(permute))(srcs, starts, offsets, weights, dsts)
        outs.append(np.concatenate(dsts))
    assert outs[0].tobytes() == outs[1].tobytes()
