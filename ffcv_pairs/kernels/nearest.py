"""A dense label (mask, disparity, flow) taken along with its sample's geometry, by nearest
sampling: each output pixel copies the stored pixel the image's output pixel is centred on.

**Definition.** Output pixel ``(y, x)``, after undoing the quarter turns and flips
(:func:`~ffcv_pairs.kernels.geometry.inverse`) to region pixel ``(ry, rx)``, reads

* under a resized crop, stored row ``floor(fy + 1/2)`` with ``fy = y0 + (ry + 1/2) * rh /
  oh - 1/2`` clamped to ``[0, height - 1]``: the pixel nearest to where the image's bilinear
  sample lies (:mod:`~ffcv_pairs.kernels.resize`), so an image of its own row indices,
  resized, rounds to exactly this row (columns alike);
* otherwise stored row ``y0 + ry`` mapped by the padding mode
  (:func:`~ffcv_pairs.kernels.geometry.border`), or the field's fill outside the image, as the
  images' pixels are (:mod:`~ffcv_pairs.kernels.planes`).

The draw is the sample's geometry with tag 0: A's (the same as B's when paired). Pixels
are copied as bytes, so one compiled kernel serves every dtype; what the geometry does to
the values (a disparity's scale and sign) is the caller's, from the placements this
writes out.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

from .geometry import border, geometry_params, inverse

__all__ = ["PLACE_FIELDS", "NearestShape", "nearest_geometry"]

#: The columns of the ``places`` the kernel writes: one sample's Placement.
PLACE_FIELDS = ("hflip", "vflip", "rot", "y0", "x0", "rh", "rw")


class NearestShape(NamedTuple):
    """A dense field's stored ``(planes, height, width)`` and bytes per pixel of a plane,
    and the output's ``(oh, ow)``."""

    planes: int
    height: int
    width: int
    pixel_bytes: int
    oh: int
    ow: int


@nb.njit(cache=True, nogil=True, inline="always")
def _source(r, start, length, out_len, limit, resize, mode):  # pragma: no cover - JIT
    """The stored index output index ``r`` of the region reads (-1: the fill)."""
    if resize:
        f = start + (r + 0.5) * length / out_len - 0.5
        f = min(max(f, 0.0), limit - 1.0)
        return np.int64(math.floor(f + 0.5))
    return border(start + r, limit, mode)


@nb.njit(cache=True, nogil=True)
def _tables(s, geo, place):  # pragma: no cover - JIT
    """The stored row and column each output row and column reads (-1: the fill), and
    whether a quarter turn swaps them: output pixel ``(y, x)`` reads ``(rows[y], cols[x])``,
    or ``(rows[x], cols[y])`` when turned. (:func:`inverse` maps each output coordinate to
    one region coordinate: a row to a row, or, turned, to a column.)"""
    turned = place.rot == 1 or place.rot == 3
    rows = np.empty(s.ow if turned else s.oh, np.int64)
    cols = np.empty(s.oh if turned else s.ow, np.int64)
    for k in range(len(rows)):
        ry = inverse(0, k, s.oh, s.ow, place)[0] if turned else inverse(k, 0, s.oh, s.ow, place)[0]
        rows[k] = _source(ry, place.y0, place.rh, s.oh, s.height, geo.resize, geo.pad_mode)
    for k in range(len(cols)):
        rx = inverse(k, 0, s.oh, s.ow, place)[1] if turned else inverse(0, k, s.oh, s.ow, place)[1]
        cols[k] = _source(rx, place.x0, place.rw, s.ow, s.width, geo.resize, geo.pad_mode)
    return rows, cols, turned


@nb.njit(cache=True, nogil=True, inline="always")
def _pixel(src, at, dst, d, p, fill):  # pragma: no cover - JIT
    """One pixel of ``p`` bytes: ``src[at:]`` to ``dst[d:]``, or the fill where ``at`` < 0."""
    if at < 0:
        for b in range(p):
            dst[d + b] = fill[b]
    else:
        for b in range(p):
            dst[d + b] = src[at + b]


@nb.njit(cache=True, nogil=True)
def _move(src, dst, s, geo, place, fill):  # pragma: no cover - JIT
    p = s.pixel_bytes
    plane_in, plane_out, row_in = s.height * s.width * p, s.oh * s.ow * p, s.width * p
    rows, cols, turned = _tables(s, geo, place)
    for k in range(s.planes):
        for y in range(s.oh):
            d = k * plane_out + y * s.ow * p
            if turned:  # the output row is a stored column
                sx = cols[y]
                for x in range(s.ow):
                    sy = rows[x]
                    at = k * plane_in + sy * row_in + sx * p if sy >= 0 and sx >= 0 else -1
                    _pixel(src, at, dst, d + x * p, p, fill)
                continue
            sy = rows[y]
            base = k * plane_in + sy * row_in
            for x in range(s.ow):
                sx = cols[x]
                at = base + sx * p if sy >= 0 and sx >= 0 else -1
                if p == 1 and at >= 0:
                    dst[d + x] = src[at]
                else:
                    _pixel(src, at, dst, d + x * p, p, fill)


@nb.njit(cache=True, parallel=True, nogil=True)
def nearest_geometry(ids, src, dst, shape, geo, clock, fill, places):  # pragma: no cover - JIT
    """Move each sample's dense field by its geometry.

    Args:
        ids: int64 ``(n,)`` sample ids.
        src: uint8 ``(n, stored bytes)``: the stored fields.
        dst: uint8 ``(n, output bytes)``.
        shape: :class:`NearestShape`.
        geo: :class:`~ffcv_pairs.kernels.geometry.GeometryConfig` of the images.
        clock: ``[seed, epoch]``.
        fill: uint8 ``(pixel_bytes,)``: one pixel of the fill, as bytes.
        places: int64 ``(n, 7)``, written: each sample's placement (:data:`PLACE_FIELDS`).
    """
    for i in nb.prange(len(ids)):
        place = geometry_params(geo, clock, ids[i], 0, shape.height, shape.width)
        for j in range(7):
            places[i, j] = place[j]
        _move(src[i], dst[i], shape, geo, place, fill)
