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

``sx`` and ``sy`` are rounded to a multiple of ``2**-20`` pixel first (see ``_BITS``); a uint8
blend is then exact, in integers.

One compile per dtype family (uint8 and float32 for :func:`warp_bilinear`, bytes for
:func:`warp_nearest`), each a small ``cache=True`` function, compiled only when a pipeline
uses the matrix geometry; each has a serial twin that serves while the parallel one compiles
in the background (:class:`~ffcv_pairs.kernels.stand_in.ParallelSoon`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

from .geometry import border

__all__ = [
    "Strides",
    "warp_bilinear",
    "warp_bilinear_serial",
    "warp_nearest",
    "warp_nearest_serial",
]

_FAR = 1e9  # a source coordinate beyond this reads the fill
#: Source coordinates are rounded to multiples of 2**-_BITS of a pixel (fixed point): the
#: bilinear weights are whole multiples of 2**-_BITS, so a uint8 blend is exact in integers,
#: and a point that is a half in exact arithmetic (14.5, computed as 14.499999999999998) is a
#: half in both samplers: a ramp image's blend rounds to exactly the pixel nearest sampling
#: reads, so a mask lands where its image's pixel does.
_BITS = 20
_ONE = 1 << _BITS
_SCALE = float(_ONE)
_HALF_BLEND = 1 << (2 * _BITS - 1)  # 1/2 of a blend of weights in 2**-(2 * _BITS)


@nb.njit(cache=True, nogil=True, inline="always")
def _fixed(sx, sy):  # pragma: no cover - JIT
    """``(X, Y, inside)``: ``X = floor(sx * 2**_BITS + 1/2)``; ``inside`` False for a point
    absurdly far (it reads the fill)."""
    if not (abs(sx) < _FAR and abs(sy) < _FAR):
        return np.int64(0), np.int64(0), False
    return np.int64(math.floor(sx * _SCALE + 0.5)), np.int64(math.floor(sy * _SCALE + 0.5)), True


@nb.njit(cache=True, nogil=True, inline="always")
def _source(m, disp, i, y, x):  # pragma: no cover - JIT
    """Where output pixel ``(y, x)`` of sample ``i`` reads, in fixed point (:func:`_fixed`)."""
    fx, fy = float(x), float(y)
    if disp.shape[0] > 0:
        fx += disp[i, y, x, 0]
        fy += disp[i, y, x, 1]
    w = m[2, 0] * fx + m[2, 1] * fy + m[2, 2]
    if not w > 0.0:  # behind the horizon
        return np.int64(0), np.int64(0), False
    sx = (m[0, 0] * fx + m[0, 1] * fy + m[0, 2]) / w
    return _fixed(sx, (m[1, 0] * fx + m[1, 1] * fy + m[1, 2]) / w)


@nb.njit(cache=True, nogil=True, inline="always")
def _row(m, disp, y, ow):  # pragma: no cover - JIT
    """``(near, bx, by)``: ``near`` when output row ``y`` maps affinely (no perspective, no
    displacement) and all of it within ``_FAR``: then pixel ``x`` reads ``(bx + m00 * x, by +
    m10 * x)``, two multiply-adds (the common case); else :func:`_source` per pixel."""
    bx, by = m[0, 1] * y + m[0, 2], m[1, 1] * y + m[1, 2]
    affine = disp.shape[0] == 0 and m[2, 0] == 0.0 and m[2, 1] == 0.0 and m[2, 2] == 1.0
    ex, ey = bx + m[0, 0] * (ow - 1), by + m[1, 0] * (ow - 1)
    near = max(abs(bx), abs(ex)) < _FAR and max(abs(by), abs(ey)) < _FAR
    return affine and near, bx, by


@nb.njit(cache=True, nogil=True, inline="always")
def _mix(v00, v01, v10, v11, ax, ay, rounding):  # pragma: no cover - JIT
    """The blend of four values, weights from ``ax``, ``ay`` (multiples of 2**-_BITS):
    integers (exact, rounded half up) when ``rounding``, else floats."""
    if rounding:
        top = (_ONE - ax) * np.int64(v00) + ax * np.int64(v01)
        low = (_ONE - ax) * np.int64(v10) + ax * np.int64(v11)
        return float(((_ONE - ay) * top + ay * low + _HALF_BLEND) >> (2 * _BITS))
    fx, fy = ax / _SCALE, ay / _SCALE
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


@nb.njit(cache=True, nogil=True, inline="always")
def _inside(s, d, at, out, st, ax, ay, rounding):  # pragma: no cover - JIT
    """One output pixel whose four taps (from ``s[at]``) are all inside the image."""
    wx, wy, row, px = _ONE - ax, _ONE - ay, st.row_in, st.pixel
    if rounding and px == 1:  # uint8 planes (CHW, 2-d): the loop the compiler does best
        for k in range(st.planes):
            p = k * st.plane_in + at
            top = wx * np.int64(s[p]) + ax * np.int64(s[p + 1])
            low = wx * np.int64(s[p + row]) + ax * np.int64(s[p + row + 1])
            d[k * st.plane_out + out] = (wy * top + ay * low + _HALF_BLEND) >> (2 * _BITS)
        return
    for k in range(st.planes):
        p, q = k * st.plane_in + at, k * st.plane_out + out
        for c in range(px):
            if rounding:  # uint8: exact integer blend, rounded half up
                top = wx * np.int64(s[p + c]) + ax * np.int64(s[p + c + px])
                low = wx * np.int64(s[p + c + row]) + ax * np.int64(s[p + c + row + px])
                d[q + c] = (wy * top + ay * low + _HALF_BLEND) >> (2 * _BITS)
            else:
                d[q + c] = _mix(
                    s[p + c], s[p + c + px], s[p + c + row], s[p + c + row + px], ax, ay, False
                )


@nb.njit(cache=True, nogil=True)  # out of line: border pixels are few, and it compiles once
def _edge(
    s, d, x0, y0, out, st, height, width, mode, fill, ax, ay, rounding
):  # pragma: no cover - JIT
    """One output pixel with a tap outside the image (``height`` by ``width``): taps mapped by
    the padding mode, or the fill."""
    c0, c1 = border(x0, width, mode), border(x0 + 1, width, mode)
    r0, r1 = border(y0, height, mode), border(y0 + 1, height, mode)
    row, px = st.row_in, st.pixel
    for k in range(st.planes):
        for c in range(px):
            base = k * st.plane_in + c
            v00 = fill if r0 < 0 or c0 < 0 else float(s[base + r0 * row + c0 * px])
            v01 = fill if r0 < 0 or c1 < 0 else float(s[base + r0 * row + c1 * px])
            v10 = fill if r1 < 0 or c0 < 0 else float(s[base + r1 * row + c0 * px])
            v11 = fill if r1 < 0 or c1 < 0 else float(s[base + r1 * row + c1 * px])
            d[k * st.plane_out + out + c] = _mix(v00, v01, v10, v11, ax, ay, rounding)


@nb.njit(cache=True, nogil=True)
def _bilinear_one(src, dst, m, disp, i, mode, fill, rounding):  # pragma: no cover - JIT
    planes, height, width, pixel = src.shape
    oh, ow = dst.shape[1], dst.shape[2]
    s, d = src.reshape(-1), dst.reshape(-1)  # C-contiguous: flat views
    st = Strides(planes, pixel, width * pixel, height * width * pixel, oh * ow * pixel)
    for y in range(oh):
        near, bx, by = _row(m, disp, y, ow)
        for x in range(ow):
            if near:
                sx = np.int64(math.floor((bx + m[0, 0] * x) * _SCALE + 0.5))
                sy, inside = np.int64(math.floor((by + m[1, 0] * x) * _SCALE + 0.5)), True
            else:
                sx, sy, inside = _source(m, disp, i, y, x)
            out = (y * ow + x) * pixel
            x0, y0 = sx >> _BITS, sy >> _BITS
            ax, ay = sx & (_ONE - 1), sy & (_ONE - 1)
            if not inside:
                for k in range(planes):
                    for c in range(pixel):
                        d[k * st.plane_out + out + c] = fill
            elif x0 >= 0 and x0 + 1 < width and y0 >= 0 and y0 + 1 < height:
                _inside(s, d, y0 * st.row_in + x0 * pixel, out, st, ax, ay, rounding)
            else:
                _edge(s, d, x0, y0, out, st, height, width, mode, fill, ax, ay, rounding)


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
        _bilinear_one(src[i], dst[i], mats[i], disp, np.int64(i), mode, fill, rounding)


@nb.njit(cache=True, nogil=True)
def warp_bilinear_serial(src, dst, mats, disp, mode, fill, rounding):  # pragma: no cover - JIT
    """:func:`warp_bilinear` on one thread: its twin while it compiles (the same bytes)."""
    for i in range(len(src)):
        _bilinear_one(src[i], dst[i], mats[i], disp, np.int64(i), mode, fill, rounding)


@nb.njit(cache=True, nogil=True)
def _nearest_one(src, dst, m, disp, i, mode, fill):  # pragma: no cover - JIT
    planes, height, width, nbytes = src.shape
    oh, ow = dst.shape[1], dst.shape[2]
    for y in range(oh):
        for x in range(ow):
            sx, sy, inside = _source(m, disp, i, y, x)
            r, c = np.int64(-1), np.int64(-1)
            if inside:
                r = border((sy + (_ONE >> 1)) >> _BITS, height, mode)
                c = border((sx + (_ONE >> 1)) >> _BITS, width, mode)
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
