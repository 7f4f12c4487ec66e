"""Nearest sampling of the matrix geometry (:func:`~.warp_points.source_point` is the point
each output pixel reads): the pixel at ``(floor(sx + 1/2), floor(sy + 1/2))``, mapped by the
padding mode, copied as bytes (any dtype: a dense mask), or the fill. One compile, a small
``cache=True`` function with a serial twin.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .geometry import border
from .warp_points import BITS, ONE, source_point

__all__ = ["warp_nearest", "warp_nearest_serial"]


@nb.njit(cache=True, nogil=True)
def _nearest_one(src, dst, m, disp, i, mode, fill):  # pragma: no cover - JIT
    planes, height, width, nbytes = src.shape
    oh, ow = dst.shape[1], dst.shape[2]
    for y in range(oh):
        for x in range(ow):
            sx, sy, inside = source_point(m, disp, i, y, x)
            r, c = np.int64(-1), np.int64(-1)
            if inside:
                r = border((sy + (ONE >> 1)) >> BITS, height, mode)
                c = border((sx + (ONE >> 1)) >> BITS, width, mode)
            for k in range(planes):
                for b in range(nbytes):
                    dst[k, y, x, b] = fill[b] if r < 0 or c < 0 else src[k, r, c, b]


@nb.njit(cache=True, parallel=True, nogil=True)
def warp_nearest(src, dst, mats, disp, mode, fill):  # pragma: no cover - JIT
    """Warp every sample of a batch by nearest sampling, as bytes.

    Args:
        src: uint8 ``(n, planes, height, width, pixel bytes)``.
        dst: uint8 ``(n, planes, oh, ow, pixel bytes)``, written.
        mats, disp, mode: As :func:`warp_bilinear`.
        fill: uint8 ``(pixel bytes,)``: one pixel of the fill (``PAD_CONSTANT``).
    """
    for i in nb.prange(len(src)):
        _nearest_one(src[i], dst[i], mats[i], disp, np.int64(i), mode, fill)


@nb.njit(cache=True, nogil=True)
def warp_nearest_serial(src, dst, mats, disp, mode, fill):  # pragma: no cover - JIT
    """:func:`warp_nearest` on one thread: its twin while it compiles (the same bytes)."""
    for i in range(len(src)):
        _nearest_one(src[i], dst[i], mats[i], disp, np.int64(i), mode, fill)
