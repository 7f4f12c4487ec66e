"""Random resized crop: a separable bilinear resample of one region, flips and quarter turns.

**Definition** (torchvision's ``resize`` of the crop, ``align_corners=False``):
output pixel ``(y, x)`` of an ``(oh, ow)`` output, after undoing the quarter turns
and flips (:func:`~ffcv_pairs.kernels.geometry.inverse`) to region pixel
``(ry, rx)``, samples the stored image at ``fy = y0 + (ry + 1/2) * rh / oh - 1/2``
and ``fx = x0 + (rx + 1/2) * rw / ow - 1/2``, each clamped to ``[0, size - 1]``
(the nearest edge pixel outside the image), bilinearly between the four pixels
around it.

**How.** Separable, vertical first: per output row, one contiguous (vectorised)
blend of the two source rows over the columns the region uses, then a
horizontal pass with column indices and weights computed once per sample (and
shared by A and B, and by every plane). Three planes of a CHW image go through
the horizontal pass together (one index and weight load for three outputs),
eight outputs at a time where their taps fit in two 8-value windows
(:mod:`~ffcv_pairs.kernels.lanes`: any downscale by up to 2); other outputs,
and interleaved channels, are read tap by tap. Source rows are read in place:
from the page cache when the decoder calls it. The vertical blend and the output
cast go eight values a vector (:func:`~ffcv_pairs.kernels.lanes.rows8`,
:func:`~ffcv_pairs.kernels.lanes.store8`), and the rows :data:`AHEAD` output rows
on are prefetched, so their cache misses overlap with the work. No loop takes a
slice of the source or the output: a slice is an atomic reference count on memory
that every loader thread shares (at 64x64 those counts took a quarter of the
loader's time, and kept the second thread from adding speed).

**Rounding.** Arithmetic is float32. A uint8 result is the float32 value rounded
half up (0.5 is added once, in the vertical pass): within 1 of the exact
bilinear value rounded half up, and almost always equal to it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

from .bytemoves import prefetch
from .geometry import Placement, geometry_params
from .lanes import LANES, MAX_SPAN, blend8, rows8, store8

__all__ = [
    "AHEAD",
    "ResizeShape",
    "ResizeWork",
    "Span",
    "Tap",
    "ThreePlanes",
    "new_work",
    "resize_sample",
    "resized_crop",
]

AHEAD = 3  # per output row, source rows AHEAD and AHEAD + 1 on are prefetched


class ResizeShape(NamedTuple):
    """Stored ``(planes, height, width, pixel)`` elements to ``(planes, oh, ow, pixel)``;
    ``rounding``: an integer result (add 0.5 before truncating)."""

    planes: int
    height: int
    width: int
    pixel: int
    oh: int
    ow: int
    rounding: bool


class Tap(NamedTuple):
    """Where an output position reads: source index ``first`` and ``first + 1``, the
    second with weight ``weight``."""

    first: int
    weight: float


class Span(NamedTuple):
    """Elements ``[start, start + length)`` of each source row."""

    start: int
    length: int


class ThreePlanes(NamedTuple):
    """Plane indices blended together (a last plane or two repeated)."""

    k0: int
    k1: int
    k2: int


class ResizeWork(NamedTuple):
    """One thread's scratch: column taps, blended rows, and a plane set for quarter turns."""

    xi: np.ndarray  # int64 (ow,): element offset of the left tap, relative to the first column
    xw: np.ndarray  # float32 (ow,): weight of the right tap
    xs: np.ndarray  # int64 (2 * (ow // LANES),): window start per half block (-1 first: no fit)
    xo: np.ndarray  # int32 (ow,): left tap's offset in its window
    rows: np.ndarray  # float32 (planes, (width + 1) * pixel + LANES): vertically blended rows
    line: np.ndarray  # float32 (planes, ow * pixel): one output row before its cast
    turn: np.ndarray  # dst dtype (planes * oh * ow * pixel,)


@nb.njit(cache=True, nogil=True)
def new_work(rs, like):  # pragma: no cover - JIT
    """A :class:`ResizeWork` for ``rs``; ``turn`` has ``like``'s dtype."""
    n = rs.planes * rs.oh * rs.ow * rs.pixel
    return ResizeWork(
        np.empty(rs.ow, np.int64),
        np.empty(rs.ow, np.float32),
        np.empty(rs.ow // LANES * 2, np.int64),
        np.empty(rs.ow, np.int32),
        np.zeros((rs.planes, (rs.width + 1) * rs.pixel + LANES), np.float32),
        np.empty((rs.planes, rs.ow * rs.pixel), np.float32),
        np.empty(n, like.dtype),
    )


@nb.njit(cache=True, nogil=True, inline="always")
def _tap(r, start, length, out_len, limit):  # pragma: no cover - JIT
    """The :class:`Tap` of output position ``r``."""
    f = start + (r + 0.5) * length / out_len - 0.5
    f = min(max(f, 0.0), limit - 1.0)
    i0 = np.int64(math.floor(f))
    return Tap(i0, np.float32(f - i0))


@nb.njit(cache=True, nogil=True)
def _column_taps(rs, x0, rw, flip, work):  # pragma: no cover - JIT
    """Fill ``work.xi``/``work.xw``; returns the source columns ``[lo, hi)`` the taps read."""
    ow = rs.ow
    for x in range(ow):
        tap = _tap(ow - 1 - x if flip else x, x0, rw, ow, rs.width)
        work.xi[x], work.xw[x] = tap.first, tap.weight
    lo = min(work.xi[0], work.xi[ow - 1])
    hi = min(max(work.xi[0], work.xi[ow - 1]) + 2, rs.width)
    for x in range(ow):
        work.xi[x] = (work.xi[x] - lo) * rs.pixel
    if rs.pixel == 1:
        _windows(work)
    return lo, hi


@nb.njit(cache=True, nogil=True)
def _windows(work):  # pragma: no cover - JIT
    """``work.xs``/``work.xo`` from ``work.xi``, per block of :data:`LANES` outputs: each half's
    window start and tap offsets. A block whose taps do not fit (a downscale by more than 2)
    is marked ``xs = -1``: the scalar pass takes it."""
    half = LANES // 2
    for blk in range(work.xs.shape[0] // 2):
        fits = True
        for side in range(2):
            x0 = blk * LANES + side * half
            start = min(work.xi[x0], work.xi[x0 + half - 1])
            fits = fits and max(work.xi[x0], work.xi[x0 + half - 1]) - start <= MAX_SPAN
            work.xs[2 * blk + side] = start
            for t in range(half):
                work.xo[x0 + t] = work.xi[x0 + t] - start
        if not fits:
            work.xs[2 * blk] = -1


@nb.njit(cache=True, nogil=True, inline="always")
def _prefetch_rows(src, s0, rs, cols, first, last):  # pragma: no cover - JIT
    """:func:`~ffcv_pairs.kernels.bytemoves.prefetch` every cache line of source rows
    ``first..last`` (inclusive, clipped to the image) of every plane over the :class:`Span`
    ``cols``."""
    row_len, plane_len = rs.width * rs.pixel, rs.height * rs.width * rs.pixel
    lo, n = cols.start, cols.length
    for r in range(max(first, 0), min(last, rs.height - 1) + 1):
        for k in range(rs.planes):
            i = s0 + k * plane_len + r * row_len + lo
            for j in range(0, n + 63, 64):
                prefetch(src, i + min(j, n - 1))


@nb.njit(cache=True, nogil=True, inline="always")
def _vertical(src, s0, rs, cols, fy, rows):  # pragma: no cover - JIT
    """Blend source rows ``fy.first`` and ``fy.first + 1`` (weight ``fy.weight``, a
    :class:`Tap`) of every plane over the :class:`Span` ``cols`` into ``rows`` (float32,
    one row per plane); the last pixel is repeated once. :data:`LANES` values per
    :func:`~ffcv_pairs.kernels.lanes.rows8`, the last step overlapping the one before; a
    row shorter than that, one by one."""
    a, wy = fy.first, fy.weight
    b = min(a + 1, rs.height - 1)
    half = np.float32(0.5) if rs.rounding else np.float32(0.0)
    row_len, plane_len = rs.width * rs.pixel, rs.height * rs.width * rs.pixel
    lo, n = cols.start, cols.length
    p, stride = rs.pixel, rows.shape[1]
    for k in range(rs.planes):
        i0 = s0 + k * plane_len + lo + a * row_len
        i1, o = i0 + (b - a) * row_len, k * stride
        if n >= LANES:
            for j in range(0, n - LANES, LANES):
                rows8(src, i0 + j, i1 + j, wy, half, rows, o + j)
            j = n - LANES
            rows8(src, i0 + j, i1 + j, wy, half, rows, o + j)
        else:
            for j in range(n):
                q = np.float32(src[i0 + j])
                rows[k, j] = q + (np.float32(src[i1 + j]) - q) * wy + half
        for c in range(p):
            rows[k, n + c] = rows[k, n - p + c]


@nb.njit(cache=True, nogil=True, inline="always")
def _planes_row(work, ks, ow):  # pragma: no cover - JIT
    """One output row of the planes ``ks`` (:class:`ThreePlanes`), ``work.rows`` ->
    ``work.line``: :data:`LANES` outputs per :func:`~ffcv_pairs.kernels.lanes.blend8`
    where the taps fit, tap by tap (unsigned indices: no checks) elsewhere and for the last
    ``ow % LANES``."""
    rows, line, xi, xw = work.rows, work.line, work.xi, work.xw
    blocks, one = work.xs.shape[0] // 2, np.uint64(1)
    for blk in range(blocks + 1):
        x0 = blk * LANES
        if blk < blocks and work.xs[2 * blk] >= 0:
            blend8(rows, line, ks, work.xs, work.xo, x0, xw)
            continue
        for x in range(x0, min(x0 + LANES, ow)):
            a, w = np.uint64(xi[x]), xw[x]
            for k in ks:
                q = rows[k, a]
                line[k, x] = q + (rows[k, a + one] - q) * w


@nb.njit(cache=True, nogil=True, fastmath={"contract"})
def _rgb_row(row, line, xi, xw, ow):  # pragma: no cover - JIT
    """One row of interleaved 3-channel pixels: ``line[3x + c]`` from ``row[xi[x] + c]`` and
    ``row[xi[x] + 3 + c]``. A call of its own, not inlined: inlined, it made the planar rows
    of the fused kernel about 10% slower (the kernel grew past what LLVM optimises as well)."""
    for x in range(ow):
        a, w = np.uint64(xi[x]), xw[x]
        r0, g0, b0 = row[a], row[a + np.uint64(1)], row[a + np.uint64(2)]
        r1, g1, b1 = row[a + np.uint64(3)], row[a + np.uint64(4)], row[a + np.uint64(5)]
        o = 3 * x
        line[o] = r0 + (r1 - r0) * w
        line[o + 1] = g0 + (g1 - g0) * w
        line[o + 2] = b0 + (b1 - b0) * w


@nb.njit(cache=True, nogil=True, inline="always")
def _horizontal(rs, dst, d_row, plane_out, work):  # pragma: no cover - JIT
    """One output row of every plane from ``work.rows``: ``dst[d_row + k * plane_out + ...]``.

    Planes (``pixel == 1``) go three at a time through :func:`_planes_row` (one load of the
    taps for three outputs); interleaved channels are read tap by tap. Each plane's float32
    line is then stored in ``dst``'s dtype, :data:`LANES` values per
    :func:`~ffcv_pairs.kernels.lanes.store8`.
    """
    rows, line, xi, xw, ow, p = work.rows, work.line, work.xi, work.xw, rs.ow, rs.pixel
    k = 0
    if p == 1:
        while k < rs.planes:  # a last plane or two is blended again: one tuple type to compile
            ks = ThreePlanes(k, min(k + 1, rs.planes - 1), min(k + 2, rs.planes - 1))
            _planes_row(work, ks, ow)
            k += 3
    while k < rs.planes and p == 3:
        _rgb_row(rows[k], line[k], xi, xw, ow)
        k += 1
    while k < rs.planes:
        for x in range(ow):
            a, w = np.uint64(xi[x]), xw[x]
            for c in range(p):
                q = rows[k, a + np.uint64(c)]
                line[k, x * p + c] = q + (rows[k, a + np.uint64(p + c)] - q) * w
        k += 1
    n, stride = ow * p, line.shape[1]
    for k in range(rs.planes):
        d = d_row + k * plane_out
        if n >= LANES:
            for j in range(0, n - LANES, LANES):
                store8(line, k * stride + j, dst, d + j)
            store8(line, k * stride + n - LANES, dst, d + n - LANES)
        else:
            for j in range(n):
                dst[d + j] = line[k, j]


@nb.njit(cache=True, nogil=True)
def _quarter_turn(rs, src, dst, d0, rot):  # pragma: no cover - JIT
    """``dst[d0:]`` = ``src`` (planes of ``(n, n, pixel)``) turned by ``rot`` (1 or 3) quarters."""
    n, p = rs.oh, rs.pixel
    plane = n * n * p
    for k in range(rs.planes):
        for y in range(n):
            for x in range(n):
                sy, sx = (x, n - 1 - y) if rot == 1 else (n - 1 - x, y)
                s, d = k * plane + (sy * n + sx) * p, d0 + k * plane + (y * n + x) * p
                for c in range(p):
                    dst[d + c] = src[s + c]


@nb.njit(cache=True, nogil=True, fastmath={"contract"})
def _resample(src, s0, dst, d0, rs, place, work):  # pragma: no cover - JIT
    """The region of ``place``, flipped by its flags (no quarter turn), into ``dst[d0:]``."""
    lo, hi = _column_taps(rs, place.x0, place.rw, place.hflip > 0, work)
    cols = Span(lo * rs.pixel, (hi - lo) * rs.pixel)
    plane_out = rs.oh * rs.ow * rs.pixel
    step = -1 if place.vflip else 1  # the direction source rows are read in
    for y in range(rs.oh):
        fy = _tap(rs.oh - 1 - y if place.vflip else y, place.y0, place.rh, rs.oh, rs.height)
        a = fy.first + (step < 0)  # the first of the two rows in reading order
        near, far = a + step * (0 if y == 0 else AHEAD), a + step * (AHEAD + 1)
        _prefetch_rows(src, s0, rs, cols, min(near, far), max(near, far))
        _vertical(src, s0, rs, cols, fy, work.rows)
        _horizontal(rs, dst, d0 + y * rs.ow * rs.pixel, plane_out, work)


@nb.njit(cache=True, nogil=True)
def resize_sample(src, s0, dst, d0, rs, place, work, denom):  # pragma: no cover - JIT
    """One image: ``src[s0:]`` (``rs``'s stored planes) -> ``dst[d0:]`` (output planes).

    ``place``: the sample's :class:`~ffcv_pairs.kernels.geometry.Placement`. A half turn
    is both flips; a quarter turn resamples into ``work.turn``, then turns. ``denom``: the
    stored image is the original reduced ``denom`` times (a JPEG decoded at 1/``denom``,
    ``rs`` giving the reduced size) and ``place`` is in the original's pixels: reduced pixel
    ``i`` is centred on original pixel ``(i + 1/2) * denom - 1/2``, so the region's edges
    map to ``edge / denom`` (1: the stored image itself).
    """
    rot = place.rot
    hflip = np.int64((place.hflip > 0) != (rot == 2))
    vflip = np.int64((place.vflip > 0) != (rot == 2))
    y0, x0, rh, rw = place.y0 / denom, place.x0 / denom, place.rh / denom, place.rw / denom
    flat = Placement(hflip, vflip, np.int64(0), y0, x0, rh, rw)
    if rot == 1 or rot == 3:
        _resample(src, s0, work.turn, 0, rs, flat, work)
        _quarter_turn(rs, work.turn, dst, d0, rot)
    else:
        _resample(src, s0, dst, d0, rs, flat, work)


@nb.njit(cache=True, parallel=True, nogil=True)
def resized_crop(ids, src, dst, rs, geo, clock, tag):  # pragma: no cover - JIT
    """Random resized crop of a decoded batch: ``src`` ``(batch, stored elements)`` to ``dst``
    ``(batch, output elements)`` (float32, or uint8 with ``rs.rounding``).

    ``geo``: :class:`~ffcv_pairs.kernels.geometry.GeometryConfig`; ``tag`` (0 for A, 1 for B)
    keys the draw only when ``geo.paired`` is False.
    """
    for i in nb.prange(len(ids)):
        work = new_work(rs, dst[i])
        place = geometry_params(geo, clock, ids[i], tag, rs.height, rs.width)
        resize_sample(src[i], 0, dst[i], 0, rs, place, work, 1)
