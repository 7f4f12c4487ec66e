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

The jitter and grayscale compute in float32 (as torchvision does on float tensors): the image
is taken to a float32 work array once, a block at a time (it stays in the core's cache), and
the result is stored once. On three channels the parts run together, 64 pixels a step
(:func:`.hue_lanes.parts64`: the values stay in vector registers from one part to the next,
each part a branch on its code, the same for the whole image); on other channel counts
(brightness and contrast only) each part is one loop over a channel's values with no branch,
which LLVM vectorises. Hue uses the closed form of HSV to RGB: with ``H`` the hue in sixths of
a turn, ``v`` the largest and ``c`` the spread (largest - smallest) of R, G, B, channel ``n``
(R: 5, G: 3, B: 1) is ``v - c * clamp(min(k, 4 - k), 0, 1)``, ``k = (n + H) mod 6`` (the same
function as torchvision's six cases; ``v * s = c``), so the saturation and the case index are
never formed. On uint8 ``[0, 255]`` every value stays in ``[0, 1]``, so the parts skip the
bounds no value can pass (see :func:`_stages`) and the store its clamps.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba.core import types
from numba.extending import overload

from . import hue_lanes as _codes
from .hue_lanes import PARTS_LANES, SUM_LANES, lane_sums, parts64

__all__ = ["JITTER_PARTS", "channel_shuffle", "color_jitter", "grayscale"]

#: The parts of a colour jitter, by the index its drawn order names them with.
JITTER_PARTS = ("brightness", "contrast", "saturation", "hue")
_R, _G, _B = 0.2989, 0.587, 0.114


_BLOCK = 1024  # pixels a block: its float32 values (12 KiB for RGB) stay in L1; % 64 == 0
_LANES = SUM_LANES  # partial sums of the contrast mean


def _is_bytes(image):  # pragma: no cover - typed by the overload below
    """Whether ``image`` holds uint8 values: a constant of the compiled code."""
    raise NotImplementedError("only callable from jitted code")


@overload(_is_bytes, jit_options={"nogil": True})
def _is_bytes_overload(image):
    flag = image.dtype == types.uint8
    return lambda image: flag


@nb.njit(cache=True, nogil=True)
def _load(flat, pixel, j0, j1, work, w0, low, high):  # pragma: no cover - JIT
    """``work[c, w0 + i]``: pixel ``j0 + i`` (up to ``j1``) of channel ``c`` of the image
    ``flat`` (``(planes, height * width * pixel)``) as ``t = (x - low) / (high - low)``,
    float32 (``x - 0`` is ``x``: no subtraction).

    The image is read by index, never sliced: a slice holds a reference to the batch, an
    atomic count that every loader thread shares (see docs/augmentation.md). The indices are
    known not negative (the guard), so numba's wraparound check goes and LLVM vectorises."""
    if j0 < 0 or w0 < 0 or j1 * pixel > flat.shape[1]:
        return
    base, scale = np.float32(low), np.float32(1.0 / (high - low))
    count = j1 - j0
    if pixel == 3 and base == 0.0:  # RGB interleaved: three channels a loop (vectorised)
        r, g, b = work[0][w0 : w0 + count], work[1][w0 : w0 + count], work[2][w0 : w0 + count]
        for i in range(count):
            r[i] = np.float32(flat[0, 3 * (j0 + i)]) * scale
            g[i] = np.float32(flat[0, 3 * (j0 + i) + 1]) * scale
            b[i] = np.float32(flat[0, 3 * (j0 + i) + 2]) * scale
        return
    for c in range(flat.shape[0] * pixel):
        dst, q = work[c][w0 : w0 + count], c % pixel
        if pixel == 1 and base == 0.0:
            for i in range(count):
                dst[i] = np.float32(flat[c, j0 + i]) * scale
        elif pixel == 1:
            for i in range(count):
                dst[i] = (np.float32(flat[c, j0 + i]) - base) * scale
        else:
            for i in range(count):
                dst[i] = (np.float32(flat[0, (j0 + i) * pixel + q]) - base) * scale


@nb.njit(cache=True, nogil=True)
def _store(work, w0, flat, pixel, j0, j1, low, high, rounds):  # pragma: no cover - JIT
    """Pixels ``j0..j1`` of the image ``flat``'s channels (as :func:`_load`'s) from
    ``work[:, w0:]``: ``low + span * t``, rounded half up when ``rounds``, clamped to ``[low,
    high]``; the image written by index, as :func:`_load` reads it.

    uint8 images of the range ``[0, 255]``: every value of the work array lies in ``[0, 1]``
    (the load's ``x / 255`` does, each part keeps it there), so ``255 * t`` needs no clamp
    and no ``0 +``; the other images take the general path."""
    if j0 < 0 or w0 < 0 or j1 * pixel > flat.shape[1]:
        return
    base, span = np.float32(low), np.float32(high - low)
    # uint8: clamped, then + 1/2 and cut toward zero by the cast (floor(v + 1/2), as v >= 0);
    # on the uint8 path the cast goes through int32, which LLVM packs with fewer shuffles
    top, half = np.float32(high), np.float32(0.5 if rounds else 0.0)
    unit = _is_bytes(flat) and rounds and low == 0.0 and high == 255.0
    count = j1 - j0
    if pixel == 3 and unit:  # RGB interleaved: three channels a loop (vectorised)
        r, g, b = work[0][w0 : w0 + count], work[1][w0 : w0 + count], work[2][w0 : w0 + count]
        for i in range(count):
            flat[0, 3 * (j0 + i)] = np.int32(span * r[i] + half)
            flat[0, 3 * (j0 + i) + 1] = np.int32(span * g[i] + half)
            flat[0, 3 * (j0 + i) + 2] = np.int32(span * b[i] + half)
        return
    for c in range(flat.shape[0] * pixel):
        src, q = work[c][w0 : w0 + count], c % pixel
        if pixel == 1 and unit:
            for i in range(count):
                flat[c, j0 + i] = np.int32(span * src[i] + half)
        elif pixel == 1:
            for i in range(count):
                flat[c, j0 + i] = min(max(base + span * src[i], base), top) + half
        else:
            for i in range(count):
                v = min(max(base + span * src[i], base), top) + half
                flat[c // pixel, (j0 + i) * pixel + q] = v


@nb.njit(cache=True, nogil=True)
def _add_sums(work, a, b, sums):  # pragma: no cover - JIT
    """``sums[c, k]`` (float64, ``_LANES`` a channel) += the values ``j`` of ``work[c, a:b]``
    with ``j - a`` = ``k`` modulo ``_LANES``: partial sums in an order fixed by the code (the
    same on every run), held in registers across the block (:func:`.hue_lanes.lane_sums`),
    where one running sum would wait on each add."""
    full = (b - a) // _LANES
    for c in range(work.shape[0]):
        acc, row = sums[c], work[c]
        lane_sums(row, a, full, acc)
        for k in range(b - a - full * _LANES):
            acc[k] += row[a + full * _LANES + k]


@nb.njit(cache=True, nogil=True)
def _gray_mean(sums, n):  # pragma: no cover - JIT
    """The contrast mean from :func:`_add_sums` over ``n`` pixels: of the grayscale for 3
    channels, else of all values."""
    channels = sums.shape[0]
    total = 0.0
    for c in range(channels):
        part = 0.0
        for k in range(_LANES):
            part += sums[c, k]
        total += (_R, _G, _B)[c] * part if channels == 3 else part
    return total / n if channels == 3 else total / (n * channels)


@nb.njit(cache=True, nogil=True)
def _scale(work, a, b, factor, mean):  # pragma: no cover - JIT
    """Brightness (``mean`` 0) or contrast: ``clamp(factor * t + (1 - factor) * mean)``."""
    f, add = np.float32(factor), np.float32((1.0 - factor) * mean)
    zero, one = np.float32(0.0), np.float32(1.0)
    for c in range(work.shape[0]):
        row = work[c][a:b]
        if add == 0.0:  # brightness: f * t + 0 is f * t (or -0 for +0: the same after the clamp)
            for j in range(len(row)):
                row[j] = min(max(f * row[j], zero), one)
        else:
            for j in range(len(row)):
                row[j] = min(max(f * row[j] + add, zero), one)


@nb.njit(cache=True, nogil=True)
def _stages(params, first, last, mean, unit):  # pragma: no cover - JIT
    """The table of :func:`.hue_lanes.parts64` for the parts ``order[first:last]`` that are
    on, in order from the first row (the rest: the end code), factors and values in float32.

    ``unit``: every value lies in ``[0, 1]`` (uint8 ``[0, 255]``, see :func:`_store`), so a
    bound the value cannot pass is not applied (``max(v, 0)`` is ``v`` for ``v >= 0``, as
    ``min(v, 1)`` for ``v <= 1``): a factor in ``[0, 1]`` keeps ``factor * t`` in ``[0, 1]``
    and, with a mean or a gray in ``[0, 1]``, the contrast's and saturation's value ``>= 0``;
    any factor ``>= 0`` keeps a brightness ``>= 0``. The same values, fewer operations."""
    stages = np.zeros((4, 4), np.float32)
    stages[:, 0] = _codes.SKIP
    row = 0  # the parts on, in order, from the first row; the rest: none
    for k in range(first, last):
        part = int(params[k])
        if params[8 + part] == 0.0:
            continue
        factor = params[4 + part]
        low = unit and 0.0 <= factor <= 1.0
        stages[row, 1] = np.float32(factor)
        if part <= 1:
            add = np.float32((1.0 - factor) * mean) if part == 1 else np.float32(0.0)
            stages[row, 2] = add
            if add == 0.0:  # brightness, or a contrast about 0 (as in _scale)
                top = unit and factor >= 0.0
                code = _codes.B_NONE if low else (_codes.B_TOP if top else _codes.B_CLAMP)
            else:
                code = _codes.C_TOP if low else _codes.C_CLAMP
        elif part == 2:
            code = _codes.S_TOP if low else _codes.S_CLAMP
            stages[row, 2] = np.float32(1.0 - factor)
        else:
            code = _codes.HUE
            stages[row, 2] = np.float32(6.0 * factor)
        stages[row, 0] = code
        row += 1
    return stages


@nb.njit(cache=True, nogil=True)
def _parts(work, a, b, params, first, last, mean, stages):  # pragma: no cover - JIT
    """The jitter's parts ``order[first:last]`` that are on, on ``work[:, a:b]``: on three
    channels all of them in one pass, 64 pixels a step
    (``stages`` from :func:`_stages`); the last step runs past ``b`` (up to the next multiple
    of 64 from ``a``) into columns that :func:`color_jitter` allocates for it and never
    stores nor sums: no tail loop. Else a pass a part."""
    if work.shape[0] == 3:
        if stages[0, 0] == _codes.SKIP:  # no part on
            return
        r, g, bl = work[0], work[1], work[2]
        for j in range(a, b, PARTS_LANES):
            parts64(r, g, bl, j, stages)
        return
    for k in range(first, last):  # saturation and hue need 3 channels: refused before
        part = int(params[k])
        if part <= 1 and params[8 + part] != 0.0:  # brightness: contrast about 0
            _scale(work, a, b, params[4 + part], mean if part == 1 else 0.0)


@nb.njit(cache=True, nogil=True)
def color_jitter(image, params, tag):  # pragma: no cover - JIT
    """``params = (order[4], factor[4], on[4], low, high, rounds)``: the parts whose ``on``
    is 1, in ``order`` (indices of :data:`JITTER_PARTS`), with their factors (brightness,
    contrast and saturation: multipliers; hue: a shift in turns); none on: the image is kept.
    See the module docstring.

    A block of pixels at a time: without contrast, each block is loaded, jittered and stored
    while it sits in L1. Contrast needs the mean of the image as the parts before it leave it:
    the blocks go through those parts into a work array of the whole image, summed on the way,
    then through contrast and the rest (no part before it: the blocks are loaded and summed,
    then loaded again)."""
    if params[8] == 0.0 and params[9] == 0.0 and params[10] == 0.0 and params[11] == 0.0:
        return
    low, high, rounds = params[-3], params[-2], params[-1] != 0.0
    unit = _is_bytes(image) and rounds and low == 0.0 and high == 255.0  # values in [0, 1]
    planes, height, width, pixel = image.shape
    channels, n = planes * pixel, height * width
    flat = image.reshape(planes, n * pixel)  # the one view of the image (see _load)
    split = 4  # the contrast's place in the order (4: off)
    for k in range(4):
        if int(params[k]) == 1 and params[9] != 0.0:
            split = k
    ahead = False  # a part on before contrast
    for k in range(split):
        ahead = ahead or params[8 + int(params[k])] != 0.0
    # a work array of the whole image where parts come before contrast; where none does, the
    # second pass loads the image again (cheaper than writing and reading the whole array)
    whole = ahead
    # columns up to a multiple of PARTS_LANES: the parts' last step runs into them (_parts)
    work = np.empty((channels, -(-n // PARTS_LANES) * PARTS_LANES if whole else _BLOCK), np.float32)
    sums = np.zeros((channels, _LANES), np.float64)
    mean = 0.0
    # one call site a helper (each inlined once: compile time), in one or two passes
    for phase in range(2 if split < 4 else 1):
        first, last = (split, 4) if phase == 1 else (0, split)
        stages = _stages(params, first, last, mean, unit)
        for j0 in range(0, n, _BLOCK):
            j1 = min(n, j0 + _BLOCK)
            w0 = j0 if whole else 0
            if phase == 0 or not whole:
                _load(flat, pixel, j0, j1, work, w0, low, high)
            _parts(work, w0, w0 + j1 - j0, params, first, last, mean, stages)
            if split < 4 and phase == 0:
                _add_sums(work, w0, w0 + j1 - j0, sums)
            else:
                _store(work, w0, flat, pixel, j0, j1, low, high, rounds)
        mean = _gray_mean(sums, n)


@nb.njit(cache=True, nogil=True)
def grayscale(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, low, high, rounds)``: every channel of a 3-channel image becomes
    ``0.2989 R + 0.587 G + 0.114 B`` (torchvision's ``rgb_to_grayscale``, 3 outputs), in
    float32, clamped, rounded half up for uint8 (+ 1/2, cut toward zero by the store)."""
    if params[0] == 0.0:
        return
    low, high = np.float32(params[-3]), np.float32(params[-2])
    half = np.float32(0.5 if params[-1] != 0.0 else 0.0)
    planes, height, width, pixel = image.shape
    flat, n = image.reshape(planes, height * width * pixel), height * width
    wr, wg, wb = np.float32(_R), np.float32(_G), np.float32(_B)
    if pixel == 1:
        r, g, b = flat[0], flat[1], flat[2]
        for j in range(n):
            v = wr * np.float32(r[j]) + wg * np.float32(g[j]) + wb * np.float32(b[j])
            r[j] = min(max(v, low), high) + half
            g[j] = r[j]
            b[j] = r[j]
        return
    px = flat[0]
    for j in range(n):
        v = wr * np.float32(px[3 * j]) + wg * np.float32(px[3 * j + 1])
        px[3 * j] = min(max(v + wb * np.float32(px[3 * j + 2]), low), high) + half
        px[3 * j + 1] = px[3 * j]
        px[3 * j + 2] = px[3 * j]


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
