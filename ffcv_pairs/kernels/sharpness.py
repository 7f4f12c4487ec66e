"""Sharpness of one image (torchvision's ``adjust_sharpness``), an ``apply(image, params,
tag)`` run by the drawn-op driver (:mod:`.drawn_driver`); conventions as in :mod:`.tones`.

The blurred image ``d`` is the 3x3 smoothing ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13`` of
each channel at interior pixels (rounded half up for uint8, as torchvision rounds it) and the
image itself on the border; the result is ``f * x + (1 - f) * d``, clamped and finished. An
image with a side of 2 pixels or less is kept, as torchvision keeps it.
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["sharpness"]


@nb.njit(cache=True, nogil=True)
def _channel(rows, p, q, plane):  # pragma: no cover - JIT
    """``plane``: channel ``(p, q)`` of ``rows`` (``(planes, height, width * pixel)``), float32."""
    pixel = rows.shape[2] // plane.shape[1]
    for y in range(plane.shape[0]):
        src, dst = rows[p, y], plane[y]
        if pixel == 1:  # a loop of its own: LLVM vectorises unit strides only
            for x in range(len(dst)):
                dst[x] = np.float32(src[x])
        else:
            for x in range(len(dst)):
                dst[x] = np.float32(src[x * pixel + q])


@nb.njit(cache=True, nogil=True)
def _sharpen(plane, rows, p, q, f, low, high, rounds):  # pragma: no cover - JIT
    """The interior of channel ``(p, q)`` of ``rows`` (``(planes, height, width * pixel)``)
    from its float32 copy ``plane``, sharpened, clamped (uint8: + 1/2, cut toward zero by the
    store), a row at a time."""
    height, width = plane.shape
    pixel = rows.shape[2] // width
    ff, rest = np.float32(f), np.float32(1.0 - f)
    half, four, part = np.float32(0.5 if rounds else 0.0), np.float32(4.0), np.float32(1 / 13)
    out, column = np.empty(width - 2, np.float32), np.empty(width, np.float32)
    for y in range(1, height - 1):
        up, mid, dn = plane[y - 1], plane[y], plane[y + 1]
        for x in range(width):
            column[x] = (up[x] + mid[x]) + dn[x]
        for x in range(width - 2):
            s = (column[x] + column[x + 2]) + (column[x + 1] + four * mid[x + 1])
            d = s * part
            if rounds:  # the same for every x: LLVM moves it out of the loop
                d = np.floor(d + half)
            out[x] = min(max(ff * mid[x + 1] + rest * d, low), high) + half
        dst = rows[p, y]
        if pixel == 1:
            for x in range(width - 2):
                dst[x + 1] = out[x]
        else:
            for x in range(width - 2):
                dst[(x + 1) * pixel + q] = out[x]


@nb.njit(cache=True, nogil=True)
def sharpness(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, factor, low, high, rounds)``. See the module docstring.

    float32: a uint8 image's sums of 13 weights are exact integers (three column sums plus
    4 times the centre), and ``s / 13`` is never within ``1 / 26`` of a half, so ``d`` (``s``
    times float32 ``1 / 13``, within 2e-4 of it) rounds as in float64; ``f * x + (1 - f) *
    d`` and a float image's values are float32 (torchvision's arithmetic on float tensors).
    Each channel is copied to a float32 plane, then each interior row is loops over ``x`` that
    LLVM vectorises."""
    if params[0] == 0.0:
        return
    planes, height, width, pixel = image.shape
    if height <= 2 or width <= 2:
        return
    low, high, rounds = np.float32(params[-3]), np.float32(params[-2]), params[-1] != 0.0
    rows = image.reshape(planes, height, width * pixel)
    plane = np.empty((height, width), np.float32)
    for c in range(planes * pixel):
        _channel(rows, c // pixel, c % pixel, plane)
        _sharpen(plane, rows, c // pixel, c % pixel, params[1], low, high, rounds)
