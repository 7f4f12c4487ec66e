"""One 3x3 matrix per sample, applied: the sampler of the matrix geometry
(:mod:`ffcv_pairs.augment.warp_draws` draws the matrices).

**Definition.** Pixel centres sit at whole coordinates. Output pixel ``(y, x)``, moved by the
sample's displacement ``(dx, dy)`` when there is one (the elastic op; none otherwise), reads
the source at ``(sx, sy) = (u / w, v / w)`` with ``(u, v, w) = M @ (x + dx, y + dy, 1)``,
each entry in doubles as ``(m01 fy + m02) + m00 fx`` (``fx = x + dx``, ``fy = y + dy``; IEEE
operations in that order, no fused multiply-add: a row's ``m01 y + m02`` is one number for
all its pixels, so every path, the nearest sampler and the numpy stand-in compute the same
point, to the last bit):

* :func:`warp_bilinear` blends the four pixels around ``(sx, sy)``, weights ``(1 - ax)(1 - ay)``
  and so on (``ax = sx - floor(sx)``); a tap outside the image is mapped by the padding mode
  (:func:`~ffcv_pairs.kernels.geometry.border`), or is the fill under constant padding (so
  the fill blends in at the image's edge, as torchvision's ``fill`` and kornia's
  ``padding_mode="zeros"`` do). A uint8 result is ``floor(v + 1/2)`` clamped to 0..255; a
  float one is the float64 blend cast. ``w <= 0`` (a point behind the perspective's horizon)
  reads the fill.
* :func:`~.warp_nearest.warp_nearest` copies the pixel at ``(floor(sx + 1/2),
  floor(sy + 1/2))``, mapped by the padding mode, as bytes (any dtype: a dense mask), or the
  fill.

``sx`` and ``sy`` are rounded to a multiple of ``2**-20`` pixel first (see ``_BITS``); a uint8
blend is then exact, in integers.

**Paths** (each gives the bytes the definition gives: ``tests/test_warp_paths.py``). A row at
a time: its source points first, in one branch-free loop that vectorises (an affine row's
eight pixels a step, :func:`~ffcv_pairs.kernels.warp_lanes.taps8`; else a division a pixel),
with a flag per pixel: all four taps inside or not;
then one blend of the span from the row's first such pixel to its last, as if every pixel's
four taps were inside (uint8 planes eight pixels a step,
:func:`~ffcv_pairs.kernels.warp_lanes.blend8_gather`); then the pixels whose taps are not
(few; a run of them whose taps are all the constant fill is one byte fill a plane). A uint8
sample whose matrix moves whole pixels (flips, quarter turns, transpose, d4, whole shifts,
``pad_if_needed``, crops: affine, six whole entries) is copied: its blend weights are 1 and 0.
uint8 planes whose matrix scales and shifts each axis apart (a resized crop, flips: affine,
``m01 = m10 = 0``) find their points along x once for all rows (:func:`_axis_taps`): a row
is then its one ``y``, no point computed a pixel.

One compile per dtype family (uint8 and float32 for :func:`warp_bilinear`, bytes for
:func:`~.warp_nearest.warp_nearest`), each a small ``cache=True`` function, compiled only
when a pipeline uses the matrix geometry; each has a serial twin that serves while the
parallel one compiles in the background (:class:`~ffcv_pairs.kernels.stand_in.ParallelSoon`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

from .bytemoves import fill_bytes
from .geometry import PAD_CONSTANT, border
from .warp_copy import copy_whole_pixels, whole_pixels
from .warp_lanes import GATHER_LANES, blend8_gather, taps8

__all__ = [
    "Strides",
    "warp_bilinear",
    "warp_bilinear_serial",
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
    w = m[2, 1] * fy + m[2, 2] + m[2, 0] * fx  # the definition's order (module docstring)
    if not w > 0.0:  # behind the horizon
        return np.int64(0), np.int64(0), False
    sx = (m[0, 1] * fy + m[0, 2] + m[0, 0] * fx) / w
    return _fixed(sx, (m[1, 1] * fy + m[1, 2] + m[1, 0] * fx) / w)


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


@nb.njit(cache=True, nogil=True, inline="always")
def _store(x, sx, sy, inside, width, height, row, px, xs, ys, at, ok):  # pragma: no cover - JIT
    """Store pixel ``x``'s point and the offset of its top-left tap (``at``: 0 where not
    all four taps are inside); ``ok[x]``: 3 where all four are, 2 for a point with a tap
    outside, 0 for none. Returns 1 for a pixel not all inside, else 0. No branch, no store
    that depends on an earlier pixel (unsigned compares): a row's loop vectorises."""
    u = np.uint64
    x0, y0 = sx >> _BITS, sy >> _BITS
    good = np.int64(inside) & np.int64(u(x0) < u(width - 1)) & np.int64(u(y0) < u(height - 1))
    xs[x], ys[x] = sx, sy
    at[x] = (y0 * row + x0 * px) * good
    ok[x] = good + 2 * np.int64(inside)
    return 1 - good


@nb.njit(cache=True, nogil=True, inline="always")
def _point(m, fx, fy, x, width, height, row, px, xs, ys, at, ok):  # pragma: no cover - JIT
    """:func:`_source` of the point ``(fx, fy)`` without branches, stored by :func:`_store`."""
    w = m[2, 1] * fy + m[2, 2] + m[2, 0] * fx  # the definition's order (module docstring)
    front = w > 0.0  # else behind the horizon (and no division by zero)
    sx = (m[0, 1] * fy + m[0, 2] + m[0, 0] * fx) / (w if front else 1.0)
    sy = (m[1, 1] * fy + m[1, 2] + m[1, 0] * fx) / (w if front else 1.0)
    inside = front & (abs(sx) < _FAR) & (abs(sy) < _FAR)
    gx = np.int64(math.floor((sx if inside else 0.0) * _SCALE + 0.5))
    hy = np.int64(math.floor((sy if inside else 0.0) * _SCALE + 0.5))
    return _store(x, gx, hy, inside, width, height, row, px, xs, ys, at, ok)


@nb.njit(cache=True, nogil=True)
def _taps(
    m, disp, shifts, i, y, ow, width, height, row, px, xs, ys, at, ok
):  # pragma: no cover - JIT
    """Output row ``y``'s source points in fixed point (``xs``, ``ys``), the offset of each
    one's top-left tap and which have all four taps inside (:func:`_store`). Returns how many
    have not. One branch-free loop per kind of row: affine, or any other (``shifts``: ``disp``
    flat, or ``2 * ow`` zeros where it is empty: ``x + 0.0`` is ``x``)."""
    near, bx, by = _row(m, disp, y, ow)
    bad = 0
    if near:  # the common case: two multiply-adds a pixel
        m00, m10, first = m[0, 0], m[1, 0], ow - ow % GATHER_LANES
        for x in range(0, first, GATHER_LANES):  # eight a step (taps8), then the rest
            bad += taps8(bx, by, m00, m10, width, height, row, px, xs, ys, at, ok, x)
        for x in range(first, ow):
            sx = np.int64(math.floor((bx + m00 * x) * _SCALE + 0.5))
            sy = np.int64(math.floor((by + m10 * x) * _SCALE + 0.5))
            bad += _store(x, sx, sy, True, width, height, row, px, xs, ys, at, ok)
    else:  # flat, unsigned reads of the row's displacements
        u, first = np.uint64, (i * disp.shape[1] + y) * ow * 2 if disp.shape[0] > 0 else 0
        for x in range(ow):
            dx, dy = shifts[u(first + 2 * x)], shifts[u(first + 2 * x + 1)]
            bad += _point(m, x + dx, y + dy, x, width, height, row, px, xs, ys, at, ok)
    return bad


@nb.njit(cache=True, nogil=True, inline="always")
def _listed(ok, ow, edge, lo=0, hi=0, bad=-1):  # pragma: no cover - JIT
    """The pixels of a row not all inside (``ok`` of :func:`_store`) in ``edge``: ``x``, or
    ``-1 - x`` for one with no point. Returns how many. When the row's ``bad`` such pixels
    are all outside ``lo:hi`` (its first pixel all inside to its last: an affine row's),
    those outside are the list, and the span is not looked at."""
    e, whole = 0, bad == ow - (hi - lo)
    for x in range(ow):
        if whole and x == lo:
            break
        if ok[x] != 3:
            edge[e] = x if ok[x] == 2 else -1 - x
            e += 1
    for x in range(hi if whole else ow, ow):
        edge[e] = x if ok[x] == 2 else -1 - x
        e += 1
    return e


@nb.njit(cache=True, nogil=True, inline="always")
def _blend_row(
    s, d, s8, d8, q0, st, xs, ys, at, lo, hi, ow, rounding, base=0
):  # pragma: no cover - JIT
    """The pixels ``lo:hi`` of an output row (from ``q0``; those outside have a tap outside)
    blended from their four taps at ``base + at`` in each plane: right where all four are
    inside (:func:`_taps`), to be overwritten elsewhere. uint8 planes (``s8``, ``d8``: the
    same bytes as ``s``, ``d``) go eight pixels a step (:func:`~.warp_lanes.blend8_gather`,
    the last step overlapping the one before); else indices are cast to unsigned (all are
    >= 0): numba then skips its negative-index wrap."""
    row, px, mask, u = st.row_in, st.pixel, _ONE - 1, np.uint64
    if rounding and px == 1 and ow >= GATHER_LANES:
        start = min(lo, ow - GATHER_LANES)
        stop = max(hi, start + GATHER_LANES)
        for k in range(st.planes):
            t0, q = base + k * st.plane_in, k * st.plane_out + q0
            for x in range(start, stop, GATHER_LANES):
                x = min(x, stop - GATHER_LANES)
                blend8_gather(s8, d8, t0, q + x, row, xs, ys, at, x)
        return
    for x in range(lo, hi):  # interleaved pixels, float32, rows under eight pixels
        ax, ay = xs[x] & mask, ys[x] & mask
        wx, wy = _ONE - ax, _ONE - ay
        for k in range(st.planes):
            p, q = base + k * st.plane_in + at[x], k * st.plane_out + q0 + x * px
            for c in range(px):
                t = p + c
                if rounding:  # uint8: exact integer blend, rounded half up
                    top = wx * np.int64(s[u(t)]) + ax * np.int64(s[u(t + px)])
                    low = wx * np.int64(s[u(t + row)]) + ax * np.int64(s[u(t + row + px)])
                    d[u(q + c)] = (wy * top + ay * low + _HALF_BLEND) >> (2 * _BITS)
                else:
                    d[u(q + c)] = _mix(
                        s[u(t)], s[u(t + px)], s[u(t + row)], s[u(t + row + px)], ax, ay, False
                    )


@nb.njit(cache=True, nogil=True, inline="always")
def _lost(xs, ys, x, mode, height, width):  # pragma: no cover - JIT
    """Whether all four taps of pixel ``x``'s point are the fill (constant padding)."""
    x0, y0 = xs[x] >> _BITS, ys[x] >> _BITS
    return mode == PAD_CONSTANT and (x0 < -1 or x0 >= width or y0 < -1 or y0 >= height)


@nb.njit(cache=True, nogil=True, inline="always")
def _edge_row(
    s, d, d8, y, st, xs, ys, edge, e, ow, height, width, mode, fill, rounding
):  # pragma: no cover - JIT
    """Output row ``y``'s pixels listed in ``edge[:e]`` (:func:`_listed`). Under uint8
    planes a run of pixels whose taps are all the fill is one byte fill a plane (their blend
    is the fill's integer part, whatever the weights)."""
    level, runs, j = np.uint8(_mix(fill, fill, fill, fill, 0, 0, True)), st.pixel == 1, 0
    runs = runs and rounding
    while j < e:
        x = edge[j] if edge[j] >= 0 else -1 - edge[j]
        if runs and edge[j] >= 0 and _lost(xs, ys, x, mode, height, width):
            end = j + 1
            while (
                end < e
                and edge[end] == x + end - j
                and _lost(xs, ys, x + end - j, mode, height, width)
            ):
                end += 1
            for k in range(st.planes):
                fill_bytes(d8, k * st.plane_out + y * ow + x, level, end - j)
            j = end
            continue
        out = (y * ow + x) * st.pixel
        x0, y0, ax, ay = xs[x] >> _BITS, ys[x] >> _BITS, xs[x] & (_ONE - 1), ys[x] & (_ONE - 1)
        if edge[j] < 0 or _lost(xs, ys, x, mode, height, width):  # no point, or all fill
            v = fill if edge[j] < 0 else _mix(fill, fill, fill, fill, ax, ay, rounding)
            for k in range(st.planes):
                for c in range(st.pixel):
                    d[k * st.plane_out + out + c] = v
        else:
            _edge(s, d, x0, y0, out, st, height, width, mode, fill, ax, ay, rounding)
        j += 1


@nb.njit(cache=True, nogil=True, inline="always")
def _axis_taps(m, disp, oh, ow, width, xs, at, edge):  # pragma: no cover - JIT
    """``(lo, hi, e)`` of a matrix that scales and shifts each axis apart (affine, ``m01 =
    m10 = 0``, no displacement, every row ``_row``'s ``near``), else ``e = -1``. Its rows'
    points along x are one another's (``m01 y`` is a zero): ``xs`` once, ``at`` the top-left
    tap's column (0 for a point with a tap outside: those ``e`` are listed in ``edge``),
    ``lo:hi`` from the first point inside to the last."""
    affine, bx, _ = _row(m, disp, 0, ow)  # row 0 near: its y, and x (every row's)
    ey = m[1, 1] * (oh - 1) + m[1, 2]  # by rises or falls with y: its ends bound it
    if not (affine and m[0, 1] == 0.0 and m[1, 0] == 0.0 and abs(ey) < _FAR):
        return 0, 0, -1
    lo, hi, e, m00 = ow, 0, 0, m[0, 0]
    for x in range(ow):
        xs[x] = np.int64(math.floor((bx + m00 * x) * _SCALE + 0.5))
        at[x] = xs[x] >> _BITS
        if np.uint64(at[x]) < np.uint64(width - 1):
            lo, hi = min(lo, x), x + 1
        else:
            at[x], edge[e], e = 0, x, e + 1
    return lo, hi, e


@nb.njit(cache=True, nogil=True)
def _bilinear_one(src, dst, m, disp, i, mode, fill, rounding):  # pragma: no cover - JIT
    planes, height, width, pixel = src.shape
    oh, ow = dst.shape[1], dst.shape[2]
    s, d = src.reshape(-1), dst.reshape(-1)  # C-contiguous: flat views
    st = Strides(planes, pixel, width * pixel, height * width * pixel, oh * ow * pixel)
    if rounding and whole_pixels(m, disp, oh, ow):
        fv = np.uint8(_mix(fill, fill, fill, fill, 0, 0, True))  # the cast a store does
        # uint8 views: one compile serves float32 too (where it never runs: rounding is False)
        copy_whole_pixels(
            s.view(np.uint8), d.view(np.uint8), m, st, height, width, oh, ow, mode, fv
        )
        return
    xs, ys, at = np.empty(ow, np.int64), np.empty(ow, np.int64), np.empty(ow, np.int64)
    ok, edge = np.empty(ow, np.int64), np.empty(ow, np.int64)
    s8, d8 = s.view(np.uint8), d.view(np.uint8)  # the uint8 blend's (float32: unused)
    shifts = disp.reshape(-1) if disp.shape[0] > 0 else np.zeros(2 * ow)
    blend = height > 1 and width > 1  # else no pixel has all four taps inside
    # each axis apart (a resized crop, flips): points along x once, then a row is its y
    x_lo, x_hi, x_edges = 0, 0, -1
    if rounding and pixel == 1 and ow >= GATHER_LANES and blend:
        x_lo, x_hi, x_edges = _axis_taps(m, disp, oh, ow, width, xs, at, edge)
    every = np.empty(ow, np.int64)  # a row whose y has a tap outside: all its pixels
    for x in range(ow):
        every[x] = x
    for y in range(oh):  # one call of each row kernel below: each is inlined once
        base, cols, edges = 0, edge, 0  # the blend's plane offset, the edge pixels
        if x_edges >= 0:  # _taps' near row, its y: by + m10 x is by
            for x in range(ow):
                ys[x] = np.int64(math.floor((m[1, 1] * y + m[1, 2]) * _SCALE + 0.5))
            lo, hi, edges, base = x_lo, x_hi, x_edges, (ys[0] >> _BITS) * st.row_in
            if not np.uint64(ys[0] >> _BITS) < np.uint64(height - 1):
                lo, hi, cols, edges = 0, 0, every, ow  # every pixel has a tap outside
        else:
            bad = _taps(m, disp, shifts, i, y, ow, width, height, st.row_in, pixel, xs, ys, at, ok)
            lo, hi = 0, ow  # the blend's span: from the first pixel all inside to the last
            while bad and lo < ow and ok[lo] != 3:
                lo += 1
            while bad and hi > lo and ok[hi - 1] != 3:
                hi -= 1
            edges = _listed(ok, ow, edge, lo, hi, bad) if bad else 0
        if blend and hi > lo:
            _blend_row(s, d, s8, d8, y * ow * pixel, st, xs, ys, at, lo, hi, ow, rounding, base)
        if edges:
            _edge_row(s, d, d8, y, st, xs, ys, cols, edges, ow, height, width, mode, fill, rounding)


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
