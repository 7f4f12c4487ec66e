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
  and so on (``ax = sx - floor(sx)``, for uint8 cut to a multiple of ``2**-11``); a tap
  outside the image is mapped by the padding mode
  (:func:`~ffcv_pairs.kernels.geometry.border`), or is the fill under constant padding (so
  the fill blends in at the image's edge, as torchvision's ``fill`` and kornia's
  ``padding_mode="zeros"`` do). A uint8 result is ``floor(v + 1/2)`` clamped to 0..255; a
  float one is the float64 blend cast. ``w <= 0`` (a point behind the perspective's horizon)
  reads the fill.
* :func:`~.warp_nearest.warp_nearest` copies the pixel at ``(floor(sx + 1/2),
  floor(sy + 1/2))``, mapped by the padding mode, as bytes (any dtype: a dense mask), or the
  fill.

``sx`` and ``sy`` are rounded to a multiple of ``2**-20`` pixel first; a uint8 blend is then
exact, in 32-bit integers (:mod:`.warp_points` has the numbers and why).

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

import numba as nb
import numpy as np

from .geometry import PAD_CONSTANT
from .warp_copy import copy_whole_pixels, whole_pixels
from .warp_edges import edge_row, listed
from .warp_lanes import GATHER_LANES, blend8_gather, taps8
from .warp_points import (
    BITS,
    FAR,
    ONE,
    Strides,
    affine_row,
    blend_bytes,
    fixed,
    mix,
)
from .warp_quads import quad_row, source_words

__all__ = [
    "warp_bilinear",
    "warp_bilinear_serial",
    "warp_mapped",
    "warp_mapped_serial",
]


@nb.njit(cache=True, nogil=True, inline="always")
def _store(x, sx, sy, inside, width, height, row, px, xs, ys, at, ok):  # pragma: no cover - JIT
    """Store pixel ``x``'s point and the offset of its top-left tap (``at``: 0 where not
    all four taps are inside); ``ok[x]``: 3 where all four are, 2 for a point with a tap
    outside, 0 for none. Returns 1 for a pixel not all inside, else 0. No branch, no store
    that depends on an earlier pixel (unsigned compares): a row's loop vectorises."""
    u = np.uint64
    x0, y0 = sx >> BITS, sy >> BITS
    good = np.int64(inside) & np.int64(u(x0) < u(width - 1)) & np.int64(u(y0) < u(height - 1))
    xs[x], ys[x] = sx, sy
    at[x] = (y0 * row + x0 * px) * good
    ok[x] = good + 2 * np.int64(inside)
    return 1 - good


@nb.njit(cache=True, nogil=True, inline="always")
def _point(m, fx, fy, x, width, height, row, px, xs, ys, at, ok):  # pragma: no cover - JIT
    """:func:`source_point` of the point ``(fx, fy)`` without branches, stored by :func:`_store`."""
    w = m[2, 1] * fy + m[2, 2] + m[2, 0] * fx  # the definition's order (module docstring)
    front = w > 0.0  # else behind the horizon (and no division by zero)
    sx = (m[0, 1] * fy + m[0, 2] + m[0, 0] * fx) / (w if front else 1.0)
    sy = (m[1, 1] * fy + m[1, 2] + m[1, 0] * fx) / (w if front else 1.0)
    inside = front & (abs(sx) < FAR) & (abs(sy) < FAR)
    gx, hy = fixed(sx if inside else 0.0), fixed(sy if inside else 0.0)
    return _store(x, gx, hy, inside, width, height, row, px, xs, ys, at, ok)


@nb.njit(cache=True, nogil=True)
def _taps(
    m, disp, shifts, i, y, ow, width, height, row, px, xs, ys, at, ok
):  # pragma: no cover - JIT
    """Output row ``y``'s source points in fixed point (``xs``, ``ys``), the offset of each
    one's top-left tap and which have all four taps inside (:func:`_store`). Returns how many
    have not. One branch-free loop per kind of row: affine, or any other (``shifts``: ``disp``
    flat, or ``2 * ow`` zeros where it is empty: ``x + 0.0`` is ``x``)."""
    near, bx, by = affine_row(m, disp, y, ow)
    bad = 0
    if near:  # the common case: two multiply-adds a pixel
        m00, m10, first = m[0, 0], m[1, 0], ow - ow % GATHER_LANES
        for x in range(0, first, GATHER_LANES):  # eight a step (taps8), then the rest
            bad += taps8(bx, by, m00, m10, width, height, row, px, xs, ys, at, ok, x)
        for x in range(first, ow):
            sx, sy = fixed(bx + m00 * x), fixed(by + m10 * x)
            bad += _store(x, sx, sy, True, width, height, row, px, xs, ys, at, ok)
    else:  # flat, unsigned reads of the row's displacements
        u, first = np.uint64, (i * disp.shape[1] + y) * ow * 2 if disp.shape[0] > 0 else 0
        for x in range(ow):
            dx, dy = shifts[u(first + 2 * x)], shifts[u(first + 2 * x + 1)]
            bad += _point(m, x + dx, y + dy, x, width, height, row, px, xs, ys, at, ok)
    return bad


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
    row, px, mask, u = st.row_in, st.pixel, ONE - 1, np.uint64
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
        for k in range(st.planes):
            p, q = base + k * st.plane_in + at[x], k * st.plane_out + q0 + x * px
            for c in range(px):
                t = p + c
                if rounding:  # uint8: exact integer blend, rounded half up
                    d[u(q + c)] = blend_bytes(
                        s[u(t)], s[u(t + px)], s[u(t + row)], s[u(t + row + px)], ax, ay
                    )
                else:
                    d[u(q + c)] = mix(
                        s[u(t)], s[u(t + px)], s[u(t + row)], s[u(t + row + px)], ax, ay, False
                    )


@nb.njit(cache=True, nogil=True, inline="always")
def _axis_taps(m, disp, oh, ow, width, xs, at, edge):  # pragma: no cover - JIT
    """``(lo, hi, e)`` of a matrix that scales and shifts each axis apart (affine, ``m01 =
    m10 = 0``, no displacement, every row ``affine_row``'s ``near``), else ``e = -1``. Its rows'
    points along x are one another's (``m01 y`` is a zero): ``xs`` once, ``at`` the top-left
    tap's column (0 for a point with a tap outside: those ``e`` are listed in ``edge``),
    ``lo:hi`` from the first point inside to the last."""
    affine, bx, _ = affine_row(m, disp, 0, ow)  # row 0 near: its y, and x (every row's)
    ey = m[1, 1] * (oh - 1) + m[1, 2]  # by rises or falls with y: its ends bound it
    if not (affine and m[0, 1] == 0.0 and m[1, 0] == 0.0 and abs(ey) < FAR):
        return 0, 0, -1
    lo, hi, e, m00 = ow, 0, 0, m[0, 0]
    for x in range(ow):
        xs[x] = fixed(bx + m00 * x)
        at[x] = xs[x] >> BITS
        if np.uint64(at[x]) < np.uint64(width - 1):
            lo, hi = min(lo, x), x + 1
        else:
            at[x], edge[e], e = 0, x, e + 1
    return lo, hi, e


@nb.njit(cache=True, nogil=True, inline="always")
def _span(
    m, disp, shifts, i, y, ow, width, height, st, xs, ys, at, ok, edge
):  # pragma: no cover - JIT
    """``(lo, hi, edges)`` of output row ``y`` (:func:`_taps`): its blend's span, from the
    first pixel all inside to the last, and its other pixels listed in ``edge``."""
    bad = _taps(m, disp, shifts, i, y, ow, width, height, st.row_in, st.pixel, xs, ys, at, ok)
    lo, hi = 0, ow
    while bad and lo < ow and ok[lo] != 3:
        lo += 1
    while bad and hi > lo and ok[hi - 1] != 3:
        hi -= 1
    return lo, hi, listed(ok, ow, edge, lo, hi, bad) if bad else 0


@nb.njit(cache=True, nogil=True)
def _bilinear_one(src, dst, m, disp, i, mode, fill, rounding):  # pragma: no cover - JIT
    planes, height, width, pixel = src.shape
    oh, ow = dst.shape[1], dst.shape[2]
    s, d = src.reshape(-1), dst.reshape(-1)  # C-contiguous: flat views
    st = Strides(planes, pixel, width * pixel, height * width * pixel, oh * ow * pixel)
    level = np.uint8(mix(fill, fill, fill, fill, 0, 0, True))  # the fill's byte: a store's cast
    if rounding and whole_pixels(m, disp, oh, ow):
        # uint8 views: one compile serves float32 too (where it never runs: rounding is False)
        copy_whole_pixels(
            s.view(np.uint8), d.view(np.uint8), m, st, height, width, oh, ow, mode, level
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
    # RGB under an affine matrix (a rotation): sixteen pixels a step from its words
    quads = source_words(s8, m, disp, st, height, width, ow, rounding and blend and x_edges < 0)
    constant = mode == PAD_CONSTANT
    for y in range(oh):  # one call of each row kernel below: each is inlined once
        base, cols, edges = 0, edge, 0  # the blend's plane offset, the edge pixels
        near, bx, by = affine_row(m, disp, y, ow) if len(quads) > 0 else (False, 0.0, 0.0)
        if near:  # from the source's words
            lo, hi = 0, 0  # blended here
            edges = quad_row(
                quads, d8, st, y, ow, width, height, bx, by, m, xs, ys, edge, level, constant
            )
        elif x_edges >= 0:  # _taps' near row, its y: by + m10 x is by
            for x in range(ow):
                ys[x] = fixed(m[1, 1] * y + m[1, 2])
            lo, hi, edges, base = x_lo, x_hi, x_edges, (ys[0] >> BITS) * st.row_in
            if not np.uint64(ys[0] >> BITS) < np.uint64(height - 1):
                lo, hi, cols, edges = 0, 0, every, ow  # every pixel has a tap outside
        else:
            lo, hi, edges = _span(
                m, disp, shifts, i, y, ow, width, height, st, xs, ys, at, ok, edge
            )
        if blend and hi > lo:
            _blend_row(s, d, s8, d8, y * ow * pixel, st, xs, ys, at, lo, hi, ow, rounding, base)
        if edges:
            edge_row(
                s, d, d8, y, st, xs, ys, cols, edges, ow, height, width, mode, fill, level, rounding
            )


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


@nb.njit(cache=True, parallel=True, nogil=True)
def warp_mapped(mm, rows, ptr, shape, dst, mats, disp, mode, fill):  # pragma: no cover - JIT
    """:func:`warp_bilinear` of uint8 images read where they are stored, no copy first:
    sample ``i``'s image is the ``shape`` (``(planes, height, width, pixel)``) bytes of ``mm``
    from ``ptr[rows[i]]`` (the decoder's mapping and pointers, see ``kernels/decode``)."""
    nbytes = shape[0] * shape[1] * shape[2] * shape[3]
    for i in nb.prange(len(rows)):
        at = np.int64(ptr[rows[i]])
        src = mm[at : at + nbytes].reshape(shape)
        _bilinear_one(src, dst[i], mats[i], disp, np.int64(i), mode, fill, True)


@nb.njit(cache=True, nogil=True)
def warp_mapped_serial(mm, rows, ptr, shape, dst, mats, disp, mode, fill):  # pragma: no cover
    """:func:`warp_mapped` on one thread: its twin while it compiles (the same bytes)."""
    nbytes = shape[0] * shape[1] * shape[2] * shape[3]
    for i in range(len(rows)):
        at = np.int64(ptr[rows[i]])
        src = mm[at : at + nbytes].reshape(shape)
        _bilinear_one(src, dst[i], mats[i], disp, np.int64(i), mode, fill, True)
