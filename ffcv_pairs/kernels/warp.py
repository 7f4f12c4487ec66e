"""One 3x3 matrix per sample, applied: the sampler of the matrix geometry
(:mod:`ffcv_pairs.augment.warp_draws` draws the matrices).

**Definition.** Pixel centres sit at whole coordinates. Output pixel ``(y, x)``, moved by the
sample's displacement ``(dx, dy)`` when there is one (the elastic op; none otherwise), reads
the source at ``(sx, sy) = (u / w, v / w)`` with ``(u, v, w) = M @ (x + dx, y + dy, 1)``:

* :func:`warp_bilinear` blends the four pixels around ``(sx, sy)``, weights ``(1 - ax)(1 - ay)``
  and so on (``ax = sx - floor(sx)``); a tap outside the image is mapped by the padding mode
  (:func:`~ffcv_pairs.kernels.geometry.border`), or is the fill under constant padding (so
  the fill blends in at the image's edge, as torchvision's ``fill`` and kornia's
  ``padding_mode="zeros"`` do). A uint8 result is ``floor(v + 1/2)`` clamped to 0..255; a
  float one is the float64 blend cast. ``w <= 0`` (a point behind the perspective's horizon)
  reads the fill.
* :func:`warp_nearest` copies the pixel at ``(floor(sx + 1/2), floor(sy + 1/2))``, mapped by
  the padding mode, as bytes (any dtype: a dense mask), or the fill.

``sx`` and ``sy`` are rounded to a multiple of ``2**-20`` pixel first (see ``_STEPS``).

One compile per dtype family (uint8 and float32 for :func:`warp_bilinear`, bytes for
:func:`warp_nearest`), each a small ``cache=True`` function, compiled only when a pipeline
uses the matrix geometry.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .geometry import border

__all__ = ["warp_bilinear", "warp_nearest"]

_FAR = 1e9  # a source coordinate beyond this reads the fill
#: Source coordinates are rounded to multiples of 1 / _STEPS of a pixel: then the bilinear
#: weights and their blend of uint8 values are exact in float64, and a point that is a half in
#: exact arithmetic (14.5, computed as 14.499999999999998) is a half in both samplers: a ramp
#: image's blend rounds to exactly the pixel nearest sampling reads, so a mask lands where its
#: image's pixel does.
_STEPS = float(1 << 20)


@nb.njit(cache=True, nogil=True, inline="always")
def _source(m, disp, i, y, x):  # pragma: no cover - JIT
    """Where output pixel ``(y, x)`` of sample ``i`` reads: ``(sx, sy, inside)``; ``inside``
    False for a point behind the horizon or absurdly far."""
    fx, fy = float(x), float(y)
    if disp.shape[0] > 0:
        fx += disp[i, y, x, 0]
        fy += disp[i, y, x, 1]
    w = m[2, 0] * fx + m[2, 1] * fy + m[2, 2]
    if not w > 0.0:
        return 0.0, 0.0, False
    sx = (m[0, 0] * fx + m[0, 1] * fy + m[0, 2]) / w
    sy = (m[1, 0] * fx + m[1, 1] * fy + m[1, 2]) / w
    if not (abs(sx) < _FAR and abs(sy) < _FAR):
        return 0.0, 0.0, False
    return math.floor(sx * _STEPS + 0.5) / _STEPS, math.floor(sy * _STEPS + 0.5) / _STEPS, True


@nb.njit(cache=True, nogil=True)
def _bilinear_one(src, dst, m, disp, i, mode, fill, rounding):  # pragma: no cover - JIT
    planes, height, width, pixel = src.shape
    oh, ow = dst.shape[1], dst.shape[2]
    for y in range(oh):
        for x in range(ow):
            sx, sy, inside = _source(m, disp, i, y, x)
            if not inside:
                for k in range(planes):
                    for c in range(pixel):
                        dst[k, y, x, c] = fill
                continue
            fx, fy = math.floor(sx), math.floor(sy)
            ax, ay = sx - fx, sy - fy
            x0, y0 = np.int64(fx), np.int64(fy)
            c0, c1 = border(x0, width, mode), border(x0 + 1, width, mode)
            r0, r1 = border(y0, height, mode), border(y0 + 1, height, mode)
            w00, w01 = (1.0 - ay) * (1.0 - ax), (1.0 - ay) * ax
            w10, w11 = ay * (1.0 - ax), ay * ax
            for k in range(planes):
                for c in range(pixel):
                    v00 = fill if r0 < 0 or c0 < 0 else float(src[k, r0, c0, c])
                    v01 = fill if r0 < 0 or c1 < 0 else float(src[k, r0, c1, c])
                    v10 = fill if r1 < 0 or c0 < 0 else float(src[k, r1, c0, c])
                    v11 = fill if r1 < 0 or c1 < 0 else float(src[k, r1, c1, c])
                    v = w00 * v00 + w01 * v01 + w10 * v10 + w11 * v11
                    if rounding:
                        v = min(max(math.floor(v + 0.5), 0.0), 255.0)
                    dst[k, y, x, c] = v


@nb.njit(cache=True, parallel=True, nogil=True)
def warp_bilinear(src, dst, mats, disp, mode, fill, rounding):  # pragma: no cover - JIT
    """Warp every sample of a batch, bilinearly (see the module docstring).

    Args:
        src: ``(n, planes, height, width, pixel)`` uint8 or float32, C-contiguous.
        dst: ``(n, planes, oh, ow, pixel)``, the same dtype, written.
        mats: float64 ``(n, 3, 3)``: each sample's output -> source matrix.
        disp: float64 ``(n, oh, ow, 2)`` displacements ``(dx, dy)`` in output pixels, or
            ``(0, oh, ow, 2)`` for none.
        mode: ``PAD_CONSTANT``, ``PAD_REFLECT`` or ``PAD_EDGE``.
        fill: The constant padding's value.
        rounding: An integer result (uint8): round half up and clamp to 0..255.
    """
    for i in nb.prange(len(src)):
        _bilinear_one(src[i], dst[i], mats[i], disp, i, mode, fill, rounding)


@nb.njit(cache=True, nogil=True)
def _nearest_one(src, dst, m, disp, i, mode, fill):  # pragma: no cover - JIT
    planes, height, width, nbytes = src.shape
    oh, ow = dst.shape[1], dst.shape[2]
    for y in range(oh):
        for x in range(ow):
            sx, sy, inside = _source(m, disp, i, y, x)
            r, c = np.int64(-1), np.int64(-1)
            if inside:
                r = border(np.int64(math.floor(sy + 0.5)), height, mode)
                c = border(np.int64(math.floor(sx + 0.5)), width, mode)
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
        _nearest_one(src[i], dst[i], mats[i], disp, i, mode, fill)
