"""Where a warp's output pixel reads, and its bilinear blend, in numbers: the fixed point of
the matrix geometry, shared by the bilinear sampler (:mod:`.warp`, its lanes
:mod:`.warp_lanes` and :mod:`.warp_quads`, its edges :mod:`.warp_edges`), the nearest sampler
(:mod:`.warp_nearest`) and the numpy stand-in (:mod:`.numpy_warp`).

**Points.** A source point is rounded to a multiple of ``2**-BITS`` pixel (:func:`fixed_point`):
a point that is a half in exact arithmetic (14.5, computed as 14.499999999999998) is a half
in every sampler, so a ramp image's blend rounds to exactly the pixel the nearest sampler
reads, and a mask lands where its image's pixel does. Every entry of ``M @ (fx, fy, 1)`` is
computed in doubles as ``(m01 fy + m02) + m00 fx`` (IEEE operations in that order, no fused
multiply-add): a row's ``m01 y + m02`` is one number for all its pixels, so every path
computes the same point, to the last bit.

**Weights.** A uint8 blend weighs its taps by the point's fraction cut to ``WEIGHT_BITS``
bits (:func:`weight`, a multiple of ``2**-11`` pixel: OpenCV's ``warpAffine`` takes
``2**-5``): the blend is exact in 32-bit integers, ``(top << 11) + ay (low - top)`` below
``2**31``, rounded half up, so sixteen pixels fit one 512-bit vector. A half stays a half
(``2**19 >> 9`` is ``2**10``), and a point just under a half stays under it. A float blend
weighs by the whole ``2**-BITS`` fraction.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

__all__ = [
    "BITS",
    "CUT",
    "FAR",
    "HALF_BLEND",
    "ONE",
    "SCALE",
    "WEIGHT_BITS",
    "WEIGHT_ONE",
    "Strides",
    "affine_row",
    "blend_bytes",
    "fixed",
    "fixed_point",
    "mix",
    "source_point",
    "weight",
]

FAR = 1e9  # a source coordinate beyond this reads the fill
#: Source coordinates are multiples of ``2**-BITS`` of a pixel (fixed point).
BITS = 20
ONE = 1 << BITS
SCALE = float(ONE)
#: A uint8 blend's weights are multiples of ``2**-WEIGHT_BITS``: a point's fraction cut by
#: ``CUT`` bits.
WEIGHT_BITS = 11
WEIGHT_ONE = 1 << WEIGHT_BITS
CUT = BITS - WEIGHT_BITS
HALF_BLEND = 1 << (2 * WEIGHT_BITS - 1)  # 1/2 of a uint8 blend in 2**-(2 * WEIGHT_BITS)


@nb.njit(cache=True, nogil=True, inline="always")
def weight(fixed):  # pragma: no cover - JIT
    """A uint8 blend's weight of the tap after a fixed-point coordinate's floor: its fraction
    cut to ``WEIGHT_BITS`` bits, in ``0 .. WEIGHT_ONE - 1``."""
    return (fixed & (ONE - 1)) >> CUT


@nb.njit(cache=True, nogil=True, inline="always")
def fixed(v):  # pragma: no cover - JIT
    """A source coordinate in fixed point: ``floor(v * 2**BITS + 1/2)``, an int64."""
    return np.int64(math.floor(v * SCALE + 0.5))


@nb.njit(cache=True, nogil=True, inline="always")
def fixed_point(sx, sy):  # pragma: no cover - JIT
    """``(X, Y, inside)``: ``X = fixed(sx)``; ``inside`` False for a point absurdly far (it
    reads the fill)."""
    if not (abs(sx) < FAR and abs(sy) < FAR):
        return np.int64(0), np.int64(0), False
    return fixed(sx), fixed(sy), True


@nb.njit(cache=True, nogil=True, inline="always")
def source_point(m, disp, i, y, x):  # pragma: no cover - JIT
    """Where output pixel ``(y, x)`` of sample ``i`` reads, in fixed point (:func:`fixed_point`),
    moved by the sample's displacement ``disp[i, y, x]`` when ``disp`` has samples."""
    fx, fy = float(x), float(y)
    if disp.shape[0] > 0:
        fx += disp[i, y, x, 0]
        fy += disp[i, y, x, 1]
    w = m[2, 1] * fy + m[2, 2] + m[2, 0] * fx  # the definition's order (module docstring)
    if not w > 0.0:  # behind the horizon
        return np.int64(0), np.int64(0), False
    sx = (m[0, 1] * fy + m[0, 2] + m[0, 0] * fx) / w
    return fixed_point(sx, (m[1, 1] * fy + m[1, 2] + m[1, 0] * fx) / w)


@nb.njit(cache=True, nogil=True, inline="always")
def affine_row(m, disp, y, ow):  # pragma: no cover - JIT
    """``(near, bx, by)``: ``near`` when output row ``y`` maps affinely (no perspective, no
    displacement) and all of it within ``FAR``: then pixel ``x`` reads ``(bx + m00 * x, by +
    m10 * x)``, two multiply-adds (the common case); else :func:`source_point` per pixel."""
    bx, by = m[0, 1] * y + m[0, 2], m[1, 1] * y + m[1, 2]
    affine = disp.shape[0] == 0 and m[2, 0] == 0.0 and m[2, 1] == 0.0 and m[2, 2] == 1.0
    ex, ey = bx + m[0, 0] * (ow - 1), by + m[1, 0] * (ow - 1)
    near = max(abs(bx), abs(ex)) < FAR and max(abs(by), abs(ey)) < FAR
    return affine and near, bx, by


@nb.njit(cache=True, nogil=True, inline="always")
def blend_bytes(v00, v01, v10, v11, ax, ay):  # pragma: no cover - JIT
    """The uint8 blend of four values by the fractions ``ax``, ``ay`` (fixed point, ``0 ..
    ONE - 1``), weighed by :func:`weight`: exact in integers, rounded half up (an int64;
    ``(1 - a) p + a q`` as ``p + a (q - p)``)."""
    wx, wy = weight(ax), weight(ay)
    top = (np.int64(v00) << WEIGHT_BITS) + wx * (np.int64(v01) - np.int64(v00))
    low = (np.int64(v10) << WEIGHT_BITS) + wx * (np.int64(v11) - np.int64(v10))
    return ((top << WEIGHT_BITS) + wy * (low - top) + HALF_BLEND) >> (2 * WEIGHT_BITS)


@nb.njit(cache=True, nogil=True, inline="always")
def mix(v00, v01, v10, v11, ax, ay, rounding):  # pragma: no cover - JIT
    """The blend of four values by the fractions ``ax``, ``ay`` (fixed point, ``0 .. ONE -
    1``): :func:`blend_bytes` when ``rounding``, else in doubles by the whole fractions."""
    if rounding:
        return float(blend_bytes(v00, v01, v10, v11, ax, ay))
    fx, fy = ax / SCALE, ay / SCALE
    top = (1.0 - fx) * float(v00) + fx * float(v01)
    return (1.0 - fy) * top + fy * ((1.0 - fx) * float(v10) + fx * float(v11))


class Strides(NamedTuple):
    """Flat offsets of one sample: ``planes`` and ``pixel`` (values per pixel of a plane),
    a source row's and plane's length, and an output plane's."""

    planes: int
    pixel: int
    row_in: int
    plane_in: int
    plane_out: int
