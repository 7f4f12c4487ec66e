"""Random erasing of one image (torchvision's ``RandomErasing``): a box, drawn beforehand
(``augment/erasing_boxes``), filled with a value or with noise; an ``apply(image, params,
tag)`` run by the drawn-op driver (:mod:`.drawn_driver`); conventions as in :mod:`.tones`.

``params = (apply, top, left, h, w, fill, value, seed, mean[0..C), std[0..C), low, high,
rounds)``, ``C`` the image's channels. ``fill``: :data:`CONSTANT` (every value of the box is
``value``), :data:`NORMAL` (``mean[c] + std[c] * z``, ``z`` standard normal) or
:data:`UNIFORM` (uint8: an integer 0..255, each alike; floats: uniform in ``[low, high)``).
The noise of value ``(c, i, j)`` of the box (channel, row and column in it) is the hash's
``normal(key, k)`` or ``uniform(key, k)`` with ``k = (c * h + i) * w + j`` and ``key`` from the
drawn ``seed`` (a whole number below ``2**53``): the same in any layout, and for A and B
where the draw is shared. Results are finished as every op's (rounded half up for uint8,
clamped to ``[low, high]``).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .hashing import mix64, normal, uniform
from .tones import finish

__all__ = ["CONSTANT", "NORMAL", "UNIFORM", "erase"]

CONSTANT, NORMAL, UNIFORM = 0, 1, 2


@nb.njit(cache=True, nogil=True)
def erase(image, params, tag):  # pragma: no cover - JIT
    """See the module docstring."""
    if params[0] == 0.0:
        return
    top, left, h, w = int(params[1]), int(params[2]), int(params[3]), int(params[4])
    fill, value = int(params[5]), params[6]
    key = mix64(np.uint64(params[7]))
    low, high, rounds = params[-3], params[-2], params[-1]
    planes, pixel = image.shape[0], image.shape[3]
    channels = planes * pixel
    if fill == CONSTANT:  # one value, finished once
        v = finish(value, low, high, rounds)
        for c in range(channels):
            image[c // pixel, top : top + h, left : left + w, c % pixel] = v
        return
    for c in range(channels):
        p, q = c // pixel, c % pixel
        mean, std = params[8 + c], params[8 + channels + c]
        for i in range(h):
            for j in range(w):
                if fill == NORMAL:
                    v = mean + std * normal(key, (c * h + i) * w + j)
                elif rounds:
                    v = math.floor(256.0 * uniform(key, (c * h + i) * w + j))
                else:
                    v = low + (high - low) * uniform(key, (c * h + i) * w + j)
                image[p, top + i, left + j, q] = finish(v, low, high, rounds)
