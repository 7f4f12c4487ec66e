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

The jitter and grayscale compute in float32 (as torchvision does on float tensors), each part
one loop over a channel's values with no branch, which LLVM vectorises: the image is taken to
a float32 work array once, each part passes over it (it stays in the core's cache), and the
result is stored once. Hue uses the closed form of HSV to RGB: with ``H`` the hue in sixths
of a turn, ``v`` the largest and ``c`` the spread (largest - smallest) of R, G, B, channel
``n`` (R: 5, G: 3, B: 1) is ``v - c * clamp(min(k, 4 - k), 0, 1)``, ``k = (n + H) mod 6`` (the
same function as torchvision's six cases; ``v * s = c``), so the saturation and the case
index are never formed; it runs sixteen pixels a step (:mod:`.hue_lanes`: AVX-512 registers
where the CPU has them, the same values where it does not).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba.core import types
from numba.extending import overload

from .hue_lanes import HUE_LANES, SUM_LANES, hue16, lane_sums

__all__ = ["JITTER_PARTS", "channel_shuffle", "color_jitter", "grayscale"]

#: The parts of a colour jitter, by the index its drawn order names them with.
JITTER_PARTS = ("brightness", "contrast", "saturation", "hue")
_R, _G, _B = 0.2989, 0.587, 0.114


_BLOCK = 1024  # pixels a block: its float32 values (12 KiB for RGB) stay in L1; % 16 == 0
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
def _scale(work, a, b, factor, mean, unit):  # pragma: no cover - JIT
    """Brightness (``mean`` 0) or contrast: ``clamp(factor * t + (1 - factor) * mean)``.

    ``unit``: every value lies in ``[0, 1]`` (uint8 ``[0, 255]``, see :func:`_store`), so
    a bound the value cannot pass is not applied (``max(v, 0)`` is ``v`` for ``v >= 0``, as
    ``min(v, 1)`` for ``v <= 1``): a factor in ``[0, 1]`` keeps ``factor * t`` in ``[0, 1]``
    and, with a mean in ``[0, 1]``, the contrast's value ``>= 0``; any factor ``>= 0`` keeps
    a brightness ``>= 0``. The same values, fewer operations."""
    f, add = np.float32(factor), np.float32((1.0 - factor) * mean)
    zero, one = np.float32(0.0), np.float32(1.0)
    low = unit and 0.0 <= factor <= 1.0  # no value below 0 (add >= 0 then)
    for c in range(work.shape[0]):
        row = work[c][a:b]
        if add == 0.0 and low:  # brightness f * t, in [0, 1]
            for j in range(len(row)):
                row[j] = f * row[j]
        elif add == 0.0 and unit and factor >= 0.0:  # brightness f * t >= 0
            for j in range(len(row)):
                row[j] = min(f * row[j], one)
        elif add == 0.0:  # brightness: f * t + 0 is f * t (or -0 for +0: the same after the clamp)
            for j in range(len(row)):
                row[j] = min(max(f * row[j], zero), one)
        elif low:  # contrast >= 0
            for j in range(len(row)):
                row[j] = min(f * row[j] + add, one)
        else:
            for j in range(len(row)):
                row[j] = min(max(f * row[j] + add, zero), one)


@nb.njit(cache=True, nogil=True)
def _saturate(work, a, b, factor, unit):  # pragma: no cover - JIT
    """Saturation: ``clamp(factor * t + (1 - factor) * gray)`` per pixel (``unit`` and a
    factor in ``[0, 1]``: no value below 0, as in :func:`_scale`)."""
    r, g, bl = work[0][a:b], work[1][a:b], work[2][a:b]
    f, rest = np.float32(factor), np.float32(1.0 - factor)
    wr, wg, wb = np.float32(_R), np.float32(_G), np.float32(_B)
    zero, one = np.float32(0.0), np.float32(1.0)
    if unit and 0.0 <= factor <= 1.0:
        for j in range(len(r)):
            gray = rest * (wr * r[j] + wg * g[j] + wb * bl[j])
            r[j] = min(f * r[j] + gray, one)
            g[j] = min(f * g[j] + gray, one)
            bl[j] = min(f * bl[j] + gray, one)
        return
    for j in range(len(r)):
        gray = rest * (wr * r[j] + wg * g[j] + wb * bl[j])
        r[j] = min(max(f * r[j] + gray, zero), one)
        g[j] = min(max(f * g[j] + gray, zero), one)
        bl[j] = min(max(f * bl[j] + gray, zero), one)


@nb.njit(cache=True, nogil=True)
def _hue(work, a, b, shift):  # pragma: no cover - JIT
    """Hue: each pixel's HSV hue plus ``shift`` turns (:func:`.hue_lanes.hue_pixel`), sixteen
    pixels a step (:func:`.hue_lanes.hue16`). The last step runs past ``b`` (up to the next
    multiple of sixteen from ``a``) into columns that :func:`color_jitter` allocates for it and
    never stores: no tail loop (whose compile cost more than the rest of the hue)."""
    r, g, bl = work[0], work[1], work[2]
    turn = np.float32(6.0 * shift)
    for j in range(a, b, HUE_LANES):
        hue16(r, g, bl, j, turn)


@nb.njit(cache=True, nogil=True)
def _parts(work, a, b, params, first, last, mean, unit):  # pragma: no cover - JIT
    """The jitter's parts ``order[first:last]`` that are on, on ``work[:, a:b]`` (``unit``:
    see :func:`_scale`)."""
    for k in range(first, last):
        part = int(params[k])
        if params[8 + part] == 0.0:
            continue
        factor = params[4 + part]
        if part <= 1:  # brightness: contrast about 0
            _scale(work, a, b, factor, mean if part == 1 else 0.0, unit)
        elif part == 2:
            _saturate(work, a, b, factor, unit)
        else:
            _hue(work, a, b, factor)


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
    # columns up to a multiple of HUE_LANES: the hue's last step runs into them (see _hue)
    work = np.empty((channels, -(-n // HUE_LANES) * HUE_LANES if whole else _BLOCK), np.float32)
    sums = np.zeros((channels, _LANES), np.float64)
    mean = 0.0
    # one call site a helper (each inlined once: compile time), in one or two passes
    for phase in range(2 if split < 4 else 1):
        first, last = (split, 4) if phase == 1 else (0, split)
        for j0 in range(0, n, _BLOCK):
            j1 = min(n, j0 + _BLOCK)
            w0 = j0 if whole else 0
            if phase == 0 or not whole:
                _load(flat, pixel, j0, j1, work, w0, low, high)
            _parts(work, w0, w0 + j1 - j0, params, first, last, mean, unit)
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
