"""Sharpness of one image (torchvision's ``adjust_sharpness``), an ``apply(image, params,
tag)`` run by the drawn-op driver (:mod:`.drawn_driver`); conventions as in :mod:`.tones`.

The blurred image ``d`` is the 3x3 smoothing ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13`` of
each channel at interior pixels (rounded half up for uint8, as torchvision rounds it) and the
image itself on the border; the result is ``f * x + (1 - f) * d``, clamped and finished. An
image with a side of 2 pixels or less is kept, as torchvision keeps it.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .tones import finish

__all__ = ["sharpness"]


@nb.njit(cache=True, nogil=True)
def sharpness(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, factor, low, high, rounds)``. See the module docstring."""
    if params[0] == 0.0:
        return
    factor, low, high, rounds = params[1], params[-3], params[-2], params[-1]
    planes, height, width, pixel = image.shape
    if height <= 2 or width <= 2:
        return
    plane = np.empty((height, width), np.float64)
    for c in range(planes * pixel):
        p, q = c // pixel, c % pixel
        for y in range(height):
            for x in range(width):
                plane[y, x] = image[p, y, x, q]
        for y in range(1, height - 1):
            for x in range(1, width - 1):
                s = 4.0 * plane[y, x]
                for dy in range(-1, 2):
                    for dx in range(-1, 2):
                        s += plane[y + dy, x + dx]
                d = s / 13.0
                if rounds:
                    d = math.floor(d + 0.5)
                v = factor * plane[y, x] + (1.0 - factor) * d
                image[p, y, x, q] = finish(v, low, high, rounds)
