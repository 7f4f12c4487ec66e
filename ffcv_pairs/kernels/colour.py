"""Colour ops of one 3-channel image (torchvision's definitions): colour jitter (brightness,
contrast, saturation and hue in a drawn order; saturation and hue alone are jitters with one
part on), grayscale, and channel shuffle (any channel count). Each is an ``apply(image,
params, tag)`` run by the drawn-op driver (:mod:`.drawn_driver`); conventions as in
:mod:`.tones` (rows end with ``low, high, rounds``; values as ``t`` on ``[0, 1]``).

Definitions, on ``t`` (clamped to ``[0, 1]`` after each step, one rounding at the end):

* brightness ``b``: ``b * t``;
* contrast ``c``: ``c * t + (1 - c) * m``, ``m`` the mean of the image's grayscale ``0.2989 R
  + 0.587 G + 0.114 B`` (other channel counts: of all values);
* saturation ``s``: ``s * t + (1 - s) * gray`` per pixel;
* hue ``h``: the pixel's HSV hue plus ``h``, modulo 1 (torchvision's ``_rgb2hsv`` and
  ``_hsv2rgb``).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .tones import finish

__all__ = ["JITTER_PARTS", "channel_shuffle", "color_jitter", "grayscale"]

#: The parts of a colour jitter, by the index its drawn order names them with.
JITTER_PARTS = ("brightness", "contrast", "saturation", "hue")
_R, _G, _B = 0.2989, 0.587, 0.114


@nb.njit(cache=True, nogil=True)
def _hue_shift(r, g, b, shift):  # pragma: no cover - JIT
    """``(r, g, b)`` in ``[0, 1]`` with its hue moved by ``shift`` (torchvision's formulas)."""
    maxc, minc = max(r, g, b), min(r, g, b)
    cr = maxc - minc
    if cr == 0.0:
        return r, g, b  # no hue: torchvision's h = 0 with s = 0 gives the grey back
    s = cr / maxc
    rc, gc, bc = (maxc - r) / cr, (maxc - g) / cr, (maxc - b) / cr
    if maxc == r:
        h = bc - gc
    elif maxc == g:
        h = 2.0 + rc - bc
    else:
        h = 4.0 + gc - rc
    h = h / 6.0 + 1.0 + shift  # torchvision: fmod(h / 6 + 1, 1), then (+ shift) % 1
    h = h - math.floor(h)
    v = maxc
    i = math.floor(h * 6.0)
    f = h * 6.0 - i
    p = min(max(v * (1.0 - s), 0.0), 1.0)
    q = min(max(v * (1.0 - s * f), 0.0), 1.0)
    t = min(max(v * (1.0 - s * (1.0 - f)), 0.0), 1.0)
    k = int(i) % 6
    if k == 0:
        return v, t, p
    if k == 1:
        return q, v, p
    if k == 2:
        return p, v, t
    if k == 3:
        return p, q, v
    if k == 4:
        return t, p, v
    return v, p, q


@nb.njit(cache=True, nogil=True)
def _mean(work):  # pragma: no cover - JIT
    """The contrast mean of ``work`` (``(channels, pixels)``): of the grayscale for 3
    channels, else of all values."""
    if work.shape[0] == 3:
        return (_R * work[0].sum() + _G * work[1].sum() + _B * work[2].sum()) / work.shape[1]
    return work.sum() / work.size


@nb.njit(cache=True, nogil=True)
def _jitter_part(work, part, factor):  # pragma: no cover - JIT
    """One part of the jitter (an index of :data:`JITTER_PARTS`) on ``work``, in place."""
    channels, n = work.shape
    if part == 0:
        for c in range(channels):
            for j in range(n):
                work[c, j] = min(max(factor * work[c, j], 0.0), 1.0)
    elif part == 1:
        m = _mean(work)
        for c in range(channels):
            for j in range(n):
                work[c, j] = min(max(factor * work[c, j] + (1.0 - factor) * m, 0.0), 1.0)
    elif part == 2:
        for j in range(n):
            gray = _R * work[0, j] + _G * work[1, j] + _B * work[2, j]
            for c in range(3):
                work[c, j] = min(max(factor * work[c, j] + (1.0 - factor) * gray, 0.0), 1.0)
    else:
        for j in range(n):
            r, g, b = _hue_shift(work[0, j], work[1, j], work[2, j], factor)
            work[0, j], work[1, j], work[2, j] = r, g, b


@nb.njit(cache=True, nogil=True)
def color_jitter(image, params, tag):  # pragma: no cover - JIT
    """``params = (order[4], factor[4], on[4], low, high, rounds)``: the parts whose ``on``
    is 1, in ``order`` (indices of :data:`JITTER_PARTS`), with their factors (brightness,
    contrast and saturation: multipliers; hue: a shift in turns); none on: the image is kept.
    See the module docstring."""
    if params[8] == 0.0 and params[9] == 0.0 and params[10] == 0.0 and params[11] == 0.0:
        return
    low, high, rounds = params[-3], params[-2], params[-1]
    planes, height, width, pixel = image.shape
    channels, n = planes * pixel, height * width
    span = high - low
    work = np.empty((channels, n), np.float64)
    for c in range(channels):
        p, q = c // pixel, c % pixel
        for y in range(height):
            for x in range(width):
                work[c, y * width + x] = (np.float64(image[p, y, x, q]) - low) / span
    for k in range(4):
        part = int(params[k])
        if params[8 + part] != 0.0:
            _jitter_part(work, part, params[4 + part])
    for c in range(channels):
        p, q = c // pixel, c % pixel
        for y in range(height):
            for x in range(width):
                v = low + span * work[c, y * width + x]
                image[p, y, x, q] = finish(v, low, high, rounds)


@nb.njit(cache=True, nogil=True)
def grayscale(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, low, high, rounds)``: every channel of a 3-channel image becomes
    ``0.2989 R + 0.587 G + 0.114 B`` (torchvision's ``rgb_to_grayscale``, 3 outputs)."""
    if params[0] == 0.0:
        return
    low, high, rounds = params[-3], params[-2], params[-1]
    _, height, width, pixel = image.shape
    for y in range(height):
        for x in range(width):
            r = np.float64(image[0 // pixel, y, x, 0 % pixel])
            g = np.float64(image[1 // pixel, y, x, 1 % pixel])
            b = np.float64(image[2 // pixel, y, x, 2 % pixel])
            v = finish(_R * r + _G * g + _B * b, low, high, rounds)
            for c in range(3):
                image[c // pixel, y, x, c % pixel] = v


@nb.njit(cache=True, nogil=True)
def channel_shuffle(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, perm[channels], low, high, rounds)``: output channel ``c`` is input
    channel ``perm[c]`` (Albumentations' ``ChannelShuffle``), moved a channel at a time."""
    if params[0] == 0.0:
        return
    planes, _, _, pixel = image.shape
    held = image.copy()
    for c in range(planes * pixel):
        src = int(params[1 + c])
        if src != c:
            # Element loops, not a slice assignment (see load/order.py): 2.8 s of compile -> 0.6.
            for y in range(image.shape[1]):
                for x in range(image.shape[2]):
                    image[c // pixel, y, x, c % pixel] = held[src // pixel, y, x, src % pixel]
