"""Where each sample's geometric augmentation puts its region: one draw, shared by A and B.

:class:`GeometryConfig` is what the kernels read of a ``PairAugment`` (a
named tuple, so numba sees named fields); :func:`geometry_params` draws one
sample's :class:`Placement` from the counter-based hash; :func:`inverse` and
:func:`border` map output pixels back to stored pixels; :func:`reduction` says how
much smaller a JPEG may be decoded for a resized crop's region.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

from .hashing import OP_GEOMETRY, randint, sample_key, uniform

__all__ = [
    "PAD_CONSTANT",
    "PAD_EDGE",
    "PAD_REFLECT",
    "REDUCTIONS",
    "GeometryConfig",
    "Placement",
    "border",
    "geometry_params",
    "inverse",
    "reduction",
    "scaled_size",
]

PAD_CONSTANT, PAD_REFLECT, PAD_EDGE = 0, 1, 2


class GeometryConfig(NamedTuple):
    """The geometric ops of one pipeline, as the kernels read them."""

    hflip: float  # probability
    vflip: float
    rot90: bool
    out_h: int
    out_w: int
    pad: int  # crop padding, pixels per side
    scale_lo: float  # resized crop: area fraction range
    scale_hi: float
    ratio_lo: float  # resized crop: aspect ratio range
    ratio_hi: float
    trans_y: int  # maximum shift, pixels
    trans_x: int
    pad_mode: int  # PAD_CONSTANT, PAD_REFLECT or PAD_EDGE
    crop: bool
    resize: bool
    paired: bool
    identity: bool  # no geometric op at all: plain copies
    center: bool = False  # the central region, not a random one (crop or resized crop)


class Placement(NamedTuple):
    """One sample's draw: flips, quarter turns, and the region ``(y0, x0, rh, rw)``."""

    hflip: int
    vflip: int
    rot: int
    y0: int
    x0: int
    rh: int
    rw: int


@nb.njit(cache=True, nogil=True)
def _resized_region(geo, key, height, width):  # pragma: no cover - JIT
    """torchvision's ``RandomResizedCrop.get_params``, with hashed uniforms."""
    area = height * width
    log_lo, log_hi = math.log(geo.ratio_lo), math.log(geo.ratio_hi)
    for attempt in range(10):
        scale = geo.scale_lo + uniform(key, 10 + 4 * attempt) * (geo.scale_hi - geo.scale_lo)
        target = area * scale
        aspect = math.exp(log_lo + uniform(key, 11 + 4 * attempt) * (log_hi - log_lo))
        w = np.int64(round(math.sqrt(target * aspect)))
        h = np.int64(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            y0 = randint(key, 12 + 4 * attempt, 0, height - h)
            x0 = randint(key, 13 + 4 * attempt, 0, width - w)
            return y0, x0, h, w
    # No box fits: a central crop at the nearest allowed ratio.
    return _central_region(height, width, geo.ratio_lo, geo.ratio_hi)


@nb.njit(cache=True, nogil=True)
def _central_region(height, width, ratio_lo, ratio_hi):  # pragma: no cover - JIT
    """The largest central region whose aspect ratio (width / height) is the image's
    clamped to ``[ratio_lo, ratio_hi]``: ``(y0, x0, rh, rw)``."""
    ratio = width / height
    if ratio < ratio_lo:
        rw, rh = np.int64(width), np.int64(round(width / ratio_lo))
    elif ratio > ratio_hi:
        rh, rw = np.int64(height), np.int64(round(height * ratio_hi))
    else:
        rh, rw = np.int64(height), np.int64(width)
    return (height - rh) // 2, (width - rw) // 2, rh, rw


@nb.njit(cache=True, nogil=True)
def geometry_params(geo, clock, sample_id, tag, height, width):  # pragma: no cover - JIT
    """Sample ``sample_id``'s :class:`Placement` in epoch ``clock[1]`` (seed ``clock[0]``).

    ``tag`` (0 for A, 1 for B) enters the key only when ``geo.paired`` is False.
    """
    key = sample_key(clock[0], clock[1], sample_id, OP_GEOMETRY, 0 if geo.paired else tag)
    hflip = 1 if uniform(key, 0) < geo.hflip else 0
    vflip = 1 if uniform(key, 1) < geo.vflip else 0
    rot = randint(key, 2, 0, 3) if geo.rot90 else 0
    y0, x0, rh, rw = np.int64(0), np.int64(0), np.int64(height), np.int64(width)
    if geo.crop and geo.center and geo.resize:  # the output's aspect ratio, resized to it
        ratio = geo.out_w / geo.out_h
        y0, x0, rh, rw = _central_region(height, width, ratio, ratio)
    elif geo.crop and geo.center:
        y0, x0 = np.int64((height - geo.out_h) // 2), np.int64((width - geo.out_w) // 2)
        rh, rw = np.int64(geo.out_h), np.int64(geo.out_w)
    elif geo.crop and geo.resize:
        y0, x0, rh, rw = _resized_region(geo, key, height, width)
    elif geo.crop:
        y0 = randint(key, 3, -geo.pad, height + geo.pad - geo.out_h)
        x0 = randint(key, 4, -geo.pad, width + geo.pad - geo.out_w)
        rh, rw = np.int64(geo.out_h), np.int64(geo.out_w)
    if geo.trans_y > 0:
        y0 += randint(key, 5, -geo.trans_y, geo.trans_y)
    if geo.trans_x > 0:
        x0 += randint(key, 6, -geo.trans_x, geo.trans_x)
    return Placement(np.int64(hflip), np.int64(vflip), np.int64(rot), y0, x0, rh, rw)


#: The reductions a JPEG decode can take (turbojpeg's 1/2, 1/4 and 1/8), largest first.
REDUCTIONS = (8, 4, 2)


@nb.njit(cache=True, nogil=True)
def reduction(geo, place):  # pragma: no cover - JIT
    """The largest of :data:`REDUCTIONS` that the resized crop's region ``place`` still spans
    at least ``geo.out_h x geo.out_w`` after (the image is downscaled either way), or 1."""
    for d in REDUCTIONS:
        if place.rh >= d * geo.out_h and place.rw >= d * geo.out_w:
            return np.int64(d)
    return np.int64(1)


@nb.njit(cache=True, nogil=True)
def scaled_size(height, width, denom):  # pragma: no cover - JIT
    """``(ceil(height / denom), ceil(width / denom))``: an image reduced ``denom`` times (a
    JPEG decoded at 1/denom)."""
    return (height + denom - 1) // denom, (width + denom - 1) // denom


@nb.njit(cache=True, nogil=True, inline="always")
def border(i, n, mode):  # pragma: no cover - JIT
    """Index ``i`` mapped into [0, n) by the padding mode; -1 means 'fill'."""
    if 0 <= i < n:
        return i
    if mode == PAD_CONSTANT:
        return -1
    if mode == PAD_EDGE:
        return 0 if i < 0 else n - 1
    if n == 1:
        return 0
    if i < 0:
        i = -i
    if i >= n:
        i = 2 * n - 2 - i
    if 0 <= i < n:  # one reflection covers pads smaller than the image
        return i
    period = 2 * n - 2
    i = abs(i) % period
    return period - i if i >= n else i


@nb.njit(cache=True, nogil=True, inline="always")
def inverse(y, x, n_h, n_w, place):  # pragma: no cover - JIT
    """Output pixel -> pixel of the region (undo the quarter turns, then the flips)."""
    rot = place.rot
    if rot == 1:
        y, x = x, n_w - 1 - y
    elif rot == 2:
        y, x = n_h - 1 - y, n_w - 1 - x
    elif rot == 3:
        y, x = n_h - 1 - x, y
    if place.vflip:
        y = n_h - 1 - y
    if place.hflip:
        x = n_w - 1 - x
    return y, x
