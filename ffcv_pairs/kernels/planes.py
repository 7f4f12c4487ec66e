"""One image plane, stored bytes -> augmented bytes: region, padding, flips, quarter turns.

Planes are flat byte offsets into ``src`` and ``dst`` (a slice would be a new
array per plane). :class:`PlaneMove` is what stays fixed for a field;
:class:`Run` is the in-image part of every output row, computed once per plane.
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from .bytemoves import GAP, copy_bytes, fill_bytes, fill_gap, reverse_bytes
from .geometry import PAD_CONSTANT, border, inverse

__all__ = ["PlaneMove", "RowRange", "Run", "move_plane"]


class PlaneMove(NamedTuple):
    """A field's stored plane ``(height, width)``, output plane ``(oh, ow)``, pixel bytes
    and padding mode."""

    height: int
    width: int
    oh: int
    ow: int
    pixel_bytes: int
    pad_mode: int


class Run(NamedTuple):
    """Output row ``y`` reads source row ``y0 + y`` (or ``y0 + oh - 1 - y`` with
    ``flip_rows``); its pixels ``[xa, xb)`` come from source x = ``base + step * x``."""

    y0: int
    flip_rows: bool
    xa: int
    xb: int
    base: int
    step: int


class RowRange(NamedTuple):
    """Output rows ``[start, stop)``."""

    start: int
    stop: int


@nb.njit(cache=True, nogil=True, inline="always")
def _copy_pixel(src, s_row, sx, dst, d, pixel, fill):  # pragma: no cover - JIT
    """Copy one pixel of ``pixel`` bytes from ``src[s_row + sx*pixel]``; ``s_row`` or ``sx``
    below 0: fill."""
    if s_row < 0 or sx < 0:
        for b in range(pixel):
            dst[d + b] = fill[b]
    else:
        s = s_row + sx * pixel
        for b in range(pixel):
            dst[d + b] = src[s + b]


@nb.njit(cache=True, nogil=True)
def _transposed_plane(src, s0, dst, d0, mv, place, fill):  # pragma: no cover - JIT
    """A quarter turn by an odd k: rows become columns, so pixel by pixel."""
    pixel = mv.pixel_bytes
    for y in range(mv.oh):
        for x in range(mv.ow):
            ry, rx = inverse(y, x, mv.oh, mv.ow, place)
            sy = border(place.y0 + ry, mv.height, mv.pad_mode)
            sx = border(place.x0 + rx, mv.width, mv.pad_mode)
            s_row = s0 + sy * mv.width * pixel if sy >= 0 else -1
            _copy_pixel(src, s_row, sx, dst, d0 + (y * mv.ow + x) * pixel, pixel, fill)


@nb.njit(cache=True, nogil=True)
def _row_ends(src, s_row, dst, d_row, mv, run, fill):  # pragma: no cover - JIT
    """The padded ends of a row, [0, xa) and [xb, ow), pixel by pixel (any mode)."""
    pixel = mv.pixel_bytes
    for j in range(run.xa + mv.ow - run.xb):
        x = j if j < run.xa else run.xb + j - run.xa
        sx = border(run.base + run.step * x, mv.width, mv.pad_mode)
        d = d_row + x * pixel
        for b in range(pixel):
            dst[d + b] = fill[b] if sx < 0 else src[s_row + sx * pixel + b]


@nb.njit(cache=True, nogil=True)
def _shifted_plane(src, s0, dst, d0, mv, run, fill, rows):  # pragma: no cover - JIT
    """:func:`_constant_plane` for byte pixels, rows in order, output rows as long as the
    source rows and a gap of at most ``GAP`` bytes between the runs of two rows (a padded
    crop of the image's width): the runs of all in-image rows (the :class:`RowRange`
    ``rows``) are one contiguous copy, then each gap (the end of a row and the start of
    the next) gets the fill."""
    ya, yb, ow, stride = rows.start, rows.stop, mv.ow, mv.ow
    first, n = d0 + ya * stride + run.xa, run.xb - run.xa
    fill_bytes(dst, d0, fill[0], ya * stride)
    fill_bytes(dst, d0 + yb * stride, fill[0], (mv.oh - yb) * stride)
    s = s0 + (run.y0 + ya) * stride + run.base + run.xa
    copy_bytes(dst, first, src, s, (yb - ya - 1) * stride + n)
    gap = ow - run.xb + run.xa
    if gap > 0:
        for y in range(ya, yb - 1):
            fill_gap(dst, d0 + y * stride + run.xb, fill[0], gap)
        fill_bytes(dst, d0 + ya * stride, fill[0], run.xa)
        fill_bytes(dst, d0 + (yb - 1) * stride + run.xb, fill[0], ow - run.xb)


@nb.njit(cache=True, nogil=True)
def _constant_plane(src, s0, dst, d0, mv, run, fill):  # pragma: no cover - JIT
    """Constant padding, runs that need no per-pixel work: padding is filled in one
    pass over the plane (when there is any), then each in-image row is one run (or all
    of them one, :func:`_shifted_plane`)."""
    pixel, oh, ow = mv.pixel_bytes, mv.oh, mv.ow
    d_stride, s_stride = ow * pixel, mv.width * pixel
    # Output rows y whose source row is inside the image.
    if run.flip_rows:
        ya, yb = max(0, run.y0 + oh - mv.height), min(oh, run.y0 + oh)
    else:
        ya, yb = max(0, -run.y0), min(oh, mv.height - run.y0)
    shifted = pixel == 1 and run.step > 0 and not run.flip_rows and ow == mv.width
    if shifted and ya < yb and run.xa < run.xb and ow - run.xb + run.xa <= GAP and ow >= GAP:
        _shifted_plane(src, s0, dst, d0, mv, run, fill, RowRange(ya, yb))
        return
    if ya > 0 or yb < oh or run.xa > 0 or run.xb < ow:
        if pixel == 1:
            fill_bytes(dst, d0, fill[0], oh * d_stride)
        else:
            for k in range(oh * ow):
                for c in range(pixel):
                    dst[d0 + k * pixel + c] = fill[c]
    n = (run.xb - run.xa) * pixel
    if n <= 0:
        return
    for y in range(ya, yb):
        sy = run.y0 + (oh - 1 - y if run.flip_rows else y)
        s_row, d = s0 + sy * s_stride, d0 + y * d_stride + run.xa * pixel
        if run.step > 0:
            copy_bytes(dst, d, src, s_row + (run.base + run.xa) * pixel, n)
        else:
            reverse_bytes(dst, d, src, s_row + run.base - run.xa, n)


@nb.njit(cache=True, nogil=True)
def _row_run(mv, place):  # pragma: no cover - JIT
    """The :class:`Run` of a plane whose rows stay rows (no odd quarter turn)."""
    step = -1 if (place.rot == 2) != (place.hflip > 0) else 1
    base = place.x0 + mv.ow - 1 if step < 0 else place.x0
    if step > 0:
        xa, xb = max(0, -base), min(mv.ow, mv.width - base)
    else:
        xa, xb = max(0, base - mv.width + 1), min(mv.ow, base + 1)
    xa = min(xa, mv.ow)
    xb = max(xa, xb)
    flip_rows = (place.rot == 2) != (place.vflip > 0)
    return Run(np.int64(place.y0), flip_rows, xa, xb, base, np.int64(step))


@nb.njit(cache=True, nogil=True)
def move_plane(src, s0, dst, d0, mv, place, fill):  # pragma: no cover - JIT
    """One plane from ``src[s0:]`` to ``dst[d0:]``, whole pixels of ``mv.pixel_bytes``.

    Rows that stay rows are copied as runs (inline vector moves); constant padding
    with byte pixels, or any pixels unflipped, takes :func:`_constant_plane`.
    Reflect/edge padding fills the ends of each row pixel by pixel; a quarter turn
    by an odd k goes pixel by pixel.
    """
    if place.rot == 1 or place.rot == 3:
        _transposed_plane(src, s0, dst, d0, mv, place, fill)
        return
    run = _row_run(mv, place)
    pixel = mv.pixel_bytes
    if mv.pad_mode == PAD_CONSTANT and (pixel == 1 or run.step > 0):
        _constant_plane(src, s0, dst, d0, mv, run, fill)
        return
    s_stride, d_stride = mv.width * pixel, mv.ow * pixel
    for y in range(mv.oh):
        sy = border(run.y0 + (mv.oh - 1 - y if run.flip_rows else y), mv.height, mv.pad_mode)
        d_row = d0 + y * d_stride
        if sy < 0:  # the whole row is padding
            for k in range(d_stride):
                dst[d_row + k] = fill[k % pixel]
            continue
        s_row = s0 + sy * s_stride
        _row_ends(src, s_row, dst, d_row, mv, run, fill)
        if run.step > 0:
            n = (run.xb - run.xa) * pixel
            copy_bytes(dst, d_row + run.xa * pixel, src, s_row + (run.base + run.xa) * pixel, n)
        else:  # pixels of several bytes, reversed
            for x in range(run.xa, run.xb):
                s, d = s_row + (run.base - x) * pixel, d_row + x * pixel
                for c in range(pixel):
                    dst[d + c] = src[s + c]
