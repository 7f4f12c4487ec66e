"""A numpy stand-in of the bilinear warp: the bytes of :func:`~.warp.warp_bilinear`, with
nothing to compile.

The warp's serial kernel costs about 7 s of one core on an empty kernel cache (its parallel
one more, in the background), and every pipeline with a rotation, an affine, a perspective,
a scale jitter, a resized crop or an elastic field waited for it before its first batch.
:class:`~.stand_in.ParallelSoon` serves those first batches from here while the kernels
compile. It is the definition of :mod:`.warp`, an array at a time, taking the same steps as
the kernel's paths:

* each point ``((m01 fy + m02) + m00 fx) / w`` (the definition's order of IEEE operations,
  no fused multiply-add: the kernel is compiled without ``fastmath``, so numba contracts
  nothing); an affine row's path in the kernel (:func:`~.warp._taps`) computes the same
  numbers, its ``w`` being exactly 1;
* points rounded to the fixed point of ``2**-20`` pixel, taps mapped by the padding mode
  (the fill under constant padding), and the blend in integers for uint8 (exact, by weights
  of ``2**-11``: the blend of the kernel's paths, rounded half up) or in doubles, in the
  kernel's order, for float32 (see :mod:`.warp_points`).

A whole-pixel move (the kernel copies it) gives the same bytes here: its weights are 1 and 0.
"""

from __future__ import annotations

import numpy as np

from .numpy_ops import border_indices
from .warp_points import BITS, CUT, FAR, HALF_BLEND, ONE, SCALE, WEIGHT_BITS

__all__ = ["warp_mapped_stand_in", "warp_stand_in"]


def _points(m: np.ndarray, disp: np.ndarray, i: int, oh: int, ow: int):
    """``(X, Y, inside)``: every output pixel's source point in fixed point (int64
    ``(oh, ow)``), and whether it has one (not behind the horizon, not absurdly far)."""
    y = np.arange(oh, dtype=np.float64)[:, None]
    x = np.arange(ow, dtype=np.float64)[None, :]
    # one formula for every row: where the kernel takes an affine row's path (no
    # displacement, w = (0 y + 1) + 0 x = 1, every point within FAR) it reads these points
    fx = x + (disp[i, :, :, 0] if disp.shape[0] > 0 else 0.0)
    fy = y + (disp[i, :, :, 1] if disp.shape[0] > 0 else 0.0)
    w = m[2, 1] * fy + m[2, 2] + m[2, 0] * fx
    front = w > 0.0
    den = np.where(front, w, 1.0)
    sx = (m[0, 1] * fy + m[0, 2] + m[0, 0] * fx) / den
    sy = (m[1, 1] * fy + m[1, 2] + m[1, 0] * fx) / den
    inside = front & (abs(sx) < FAR) & (abs(sy) < FAR)
    sx, sy = np.where(inside, sx, 0.0), np.where(inside, sy, 0.0)
    fixed_x = np.floor(sx * SCALE + 0.5).astype(np.int64)
    fixed_y = np.floor(sy * SCALE + 0.5).astype(np.int64)
    return fixed_x, fixed_y, inside


def _one(image: np.ndarray, out: np.ndarray, m, disp, i, mode: int, fill: float, rounding):
    """Sample ``i``: ``image`` ``(planes, height, width, pixel)`` into ``out``."""
    planes, height, width, pixel = image.shape
    oh, ow = out.shape[1], out.shape[2]
    fixed_x, fixed_y, inside = _points(m, disp, i, oh, ow)
    x0, y0 = fixed_x >> BITS, fixed_y >> BITS
    ax, ay = fixed_x & (ONE - 1), fixed_y & (ONE - 1)
    work = np.int64 if rounding else np.float64
    level = work(int(fill)) if rounding else work(fill)  # a fill tap (a store cuts it)

    flat = image.reshape(planes, height * width, pixel)
    r0, r1 = border_indices(y0, height, mode), border_indices(y0 + 1, height, mode)
    c0, c1 = border_indices(x0, width, mode), border_indices(x0 + 1, width, mode)

    def tap(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        lost = (rows < 0) | (cols < 0)
        got = np.take(flat, np.where(lost, 0, rows * width + cols), axis=1).astype(work)
        return np.where(lost[None, :, :, None], level, got) if lost.any() else got

    v00, v01, v10, v11 = tap(r0, c0), tap(r0, c1), tap(r1, c0), tap(r1, c1)
    ax, ay = ax[None, :, :, None], ay[None, :, :, None]
    if rounding:  # the weights of .warp_points.weight
        wx, wy = ax >> CUT, ay >> CUT
        top = (v00 << WEIGHT_BITS) + wx * (v01 - v00)
        low = (v10 << WEIGHT_BITS) + wx * (v11 - v10)
        value = ((top << WEIGHT_BITS) + wy * (low - top) + HALF_BLEND) >> (2 * WEIGHT_BITS)
    else:
        fx, fy = ax / SCALE, ay / SCALE
        top = (1.0 - fx) * v00 + fx * v01
        value = (1.0 - fy) * top + fy * ((1.0 - fx) * v10 + fx * v11)
    value = np.where(inside[None, :, :, None], value, fill)
    out[...] = value.astype(out.dtype) if rounding else value


def warp_stand_in(src, dst, mats, disp, mode, fill, rounding) -> None:
    """:func:`~.warp.warp_bilinear` in numpy (its arguments, its bytes)."""
    for i in range(len(src)):
        _one(src[i], dst[i], mats[i], disp, i, int(mode), float(fill), bool(rounding))


def warp_mapped_stand_in(mm, rows, ptr, shape, dst, mats, disp, mode, fill) -> None:
    """:func:`~.warp.warp_mapped` in numpy (its arguments, its bytes): the images gathered
    from where they are stored, then :func:`warp_stand_in`."""
    nbytes = int(np.prod(shape))
    starts = np.asarray(ptr)[np.asarray(rows)].astype(np.int64)
    src = np.stack([np.asarray(mm[s : s + nbytes]) for s in starts]) if len(starts) else None
    if src is not None:
        warp_stand_in(src.reshape(len(starts), *shape), dst, mats, disp, mode, fill, True)
