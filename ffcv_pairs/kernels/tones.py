"""Per-value and per-channel tone ops of one image: gamma, autocontrast, equalize, posterize,
solarize and invert (torchvision's definitions), each an ``apply(image, params, tag)`` run by
the drawn-op driver (:mod:`.drawn_driver`), and :func:`finish`, how every such op stores a
value.

``image`` is one sample as ``(planes, height, width, pixel)``; channel ``c`` is
``image[c // pixel, :, :, c % pixel]``. ``params`` is the sample's drawn row; every row ends
with ``low, high, rounds``: the values' range (uint8: 0, 255; floats: ``value_range``) and
1.0 where the dtype is integer. Values are computed in float64 from the stored ones, then
:func:`finish`: rounded half up for uint8 and clamped to ``[low, high]``. ``t = (x - low) /
(high - low)`` is a value on torchvision's float scale ``[0, 1]``.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = ["autocontrast", "equalize", "finish", "gamma", "invert", "posterize", "solarize"]


@nb.njit(cache=True, nogil=True)
def finish(v, low, high, rounds):  # pragma: no cover - JIT
    """What a value ``v`` is stored as: rounded half up when ``rounds``, clamped to the range."""
    if rounds:
        v = math.floor(v + 0.5)
    return min(max(v, low), high)


GAMMA, INVERT, SOLARIZE, POSTERIZE = 0, 1, 2, 3  # the per-value ops of :func:`_value_op`


@nb.njit(cache=True, nogil=True)
def _value_op(kind, x, param, low, high, rounds):  # pragma: no cover - JIT
    """Per-value op ``kind`` of value ``x`` (before :func:`finish`)."""
    span = high - low
    if kind == GAMMA:
        return low + span * max((x - low) / span, 0.0) ** param
    if kind == INVERT or (kind == SOLARIZE and x >= param):
        return high + low - x
    if kind == POSTERIZE:
        levels = 2.0**param
        if rounds:
            step = 256.0 / levels
            return math.floor(x / step) * step
        t = min(max(math.floor((x - low) / span * levels), 0.0), levels - 1.0)
        return low + span * t / levels
    return x


@nb.njit(cache=True, nogil=True)
def _map_bytes(flat, kind, param):  # pragma: no cover - JIT
    """Invert, solarize or posterize of uint8 values in integer arithmetic (the same results
    as :func:`_value_op` then :func:`finish`: they are exact there)."""
    if kind == INVERT:
        for j in range(flat.size):
            flat[j] = 255 - flat[j]
    elif kind == SOLARIZE:
        at = np.int64(min(max(math.ceil(param), 0.0), 256.0))  # x >= param, x an integer
        if at > 255:
            return
        # uint8 arithmetic throughout: LLVM then works on 32 or 64 values at once (int64: 1)
        at8, top = np.uint8(at), np.uint8(255)
        for j in range(flat.size):
            x = flat[j]
            flat[j] = top - x if x >= at8 else x
    else:
        keep = np.int64(256 - (1 << (8 - int(param))))
        for j in range(flat.size):
            flat[j] = np.int64(flat[j]) & keep


@nb.njit(cache=True, nogil=True)
def _map_values(image, kind, param, low, high, rounds):  # pragma: no cover - JIT
    """:func:`_value_op` then :func:`finish` on every value of ``image``; uint8 images
    (``rounds``) through a table of the 256 results."""
    flat = image.reshape(image.size)
    if rounds and kind != GAMMA:  # uint8 (0..255): integer forms that LLVM vectorises
        _map_bytes(flat, kind, param)
        return
    if rounds:
        table = np.empty(256, image.dtype)
        for v in range(256):
            table[v] = finish(
                _value_op(kind, np.float64(v), param, low, high, rounds), low, high, rounds
            )
        for j in range(flat.size):
            flat[j] = table[np.int64(flat[j])]
        return
    for j in range(flat.size):
        x = np.float64(flat[j])
        flat[j] = finish(_value_op(kind, x, param, low, high, rounds), low, high, rounds)


@nb.njit(cache=True, nogil=True)
def gamma(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, g, low, high, rounds)``: ``t ** g`` (torchvision's ``adjust_gamma``,
    gain 1)."""
    if params[0] != 0.0:
        _map_values(image, GAMMA, params[1], params[-3], params[-2], params[-1])


@nb.njit(cache=True, nogil=True)
def invert(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, low, high, rounds)``: ``high + low - x`` (uint8: ``255 - x``)."""
    if params[0] != 0.0:
        _map_values(image, INVERT, 0.0, params[-3], params[-2], params[-1])


@nb.njit(cache=True, nogil=True)
def solarize(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, threshold, low, high, rounds)``: values at or above ``threshold`` are
    inverted (``high + low - x``), the others kept."""
    if params[0] != 0.0:
        _map_values(image, SOLARIZE, params[1], params[-3], params[-2], params[-1])


@nb.njit(cache=True, nogil=True)
def posterize(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, bits, low, high, rounds)``: keep the top ``bits`` bits of a uint8
    value (``x & ~(2 ** (8 - bits) - 1)``); floats: ``floor(t * 2**bits) / 2**bits``, ``t`` at
    most ``1 - 2**-bits`` (torchvision v2's float posterize)."""
    if params[0] != 0.0:
        _map_values(image, POSTERIZE, params[1], params[-3], params[-2], params[-1])


@nb.njit(cache=True, nogil=True)
def _extremes(src, q, pixel):  # pragma: no cover - JIT
    """The smallest and largest of the values ``q, q + pixel, ...`` of ``src``, as float64."""
    lo, hi = src[q], src[q]
    if pixel == 1:  # a loop of its own: LLVM vectorises unit strides only (uint8 min/max)
        for j in range(len(src)):
            lo, hi = min(lo, src[j]), max(hi, src[j])
    else:
        for j in range(q, len(src), pixel):
            lo, hi = min(lo, src[j]), max(hi, src[j])
    return np.float64(lo), np.float64(hi)


@nb.njit(cache=True, nogil=True)
def autocontrast(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, low, high, rounds)``: each channel's values stretched linearly from
    its own ``[min, max]`` to ``[low, high]``; a constant channel is kept (torchvision's
    ``autocontrast``)."""
    if params[0] == 0.0:
        return
    low, high, rounds = params[-3], params[-2], params[-1]
    planes, height, width, pixel = image.shape
    flat = image.reshape(planes, height * width * pixel)
    table = np.empty(256, image.dtype)
    for c in range(planes * pixel):
        src, q = flat[c // pixel], c % pixel
        lo, hi = _extremes(src, q, pixel)
        if hi <= lo:
            continue
        scale = (high - low) / (hi - lo)
        if rounds:  # uint8: a table of the 256 results
            for level in range(256):
                table[level] = finish(low + (level - lo) * scale, low, high, rounds)
        if rounds and pixel == 1:  # a plain loop, unit stride
            for j in range(len(src)):
                src[j] = table[np.int64(src[j])]
        elif rounds:
            for j in range(q, len(src), pixel):
                src[j] = table[np.int64(src[j])]
        else:
            for j in range(q, len(src), pixel):
                src[j] = finish(low + (np.float64(src[j]) - lo) * scale, low, high, rounds)


@nb.njit(cache=True, nogil=True)
def _level(value, low, span, rounds):  # pragma: no cover - JIT
    """The level (0..255) of a value for equalize: a uint8 value's own, else ``round(t *
    255)``, clamped."""
    if rounds:
        return np.int64(value)
    t = (np.float64(value) - low) / span
    return np.int64(min(max(math.floor(t * 255.0 + 0.5), 0.0), 255.0))


@nb.njit(cache=True, nogil=True)
def equalize(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, low, high, rounds)``: each channel's histogram equalised over 256
    levels, as torchvision (and PIL): ``step = (count - count of the last level present) //
    255``; no change when ``step`` is 0; else level ``v`` maps to ``min((cumulative count
    below v + step // 2) // step, 255)``. Float values are taken to level ``round(t * 255)``
    and come back as ``lut / 255`` on their scale."""
    if params[0] == 0.0:
        return
    low, high, rounds = params[-3], params[-2], params[-1]
    planes, height, width, pixel = image.shape
    span = high - low
    hist = np.empty(256, np.int64)
    lut = np.empty(256, np.int64)
    table = np.empty(256, image.dtype)
    for c in range(planes * pixel):
        p, q = c // pixel, c % pixel
        hist[:] = 0
        for y in range(height):
            for x in range(width):
                hist[_level(image[p, y, x, q], low, span, rounds)] += 1
        last = 255
        while hist[last] == 0:
            last -= 1
        step = (height * width - hist[last]) // 255
        if step == 0:
            continue
        below = step // 2
        for v in range(256):
            lut[v] = min(below // step, 255)
            below += hist[v]
        for v in range(256):
            table[v] = finish(low + span * lut[v] / 255.0, low, high, rounds)
        for y in range(height):
            for x in range(width):
                image[p, y, x, q] = table[_level(image[p, y, x, q], low, span, rounds)]
