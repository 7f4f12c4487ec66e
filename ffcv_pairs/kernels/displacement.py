"""The elastic op's displacement field: torchvision's ``ElasticTransform`` definition, drawn
from the counter-based hash.

**Definition.** For each output pixel and each axis, a uniform in ``[-1, 1]`` (for sample
``ids[i]``: ``2 * uniform(key, 1 + (c * oh + y) * ow + x) - 1``, ``c`` 0 for x and 1 for y;
``uniform(key, 0) < p`` says whether the op runs), smoothed by a gaussian of ``sigma`` over
``int(8 * sigma + 1)`` taps (made odd), separable, reading past the edge by reflection (as
torchvision's ``gaussian_blur``), then times ``gains[c]``: torchvision's ``alpha / size`` in
its normalised grid, in pixels ``alpha * ow / (2 * oh)`` for x and ``alpha * oh / (2 * ow)``
for y. ``sigma`` 0: no smoothing.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .geometry import PAD_REFLECT, border
from .hashing import sample_key, uniform

__all__ = ["elastic_field", "gaussian_taps"]


@nb.njit(cache=True, nogil=True)
def gaussian_taps(sigma):  # pragma: no cover - JIT
    """torchvision's 1-d gaussian kernel of ``sigma``: ``int(8 * sigma + 1)`` taps (odd)."""
    if sigma <= 0.0:
        return np.ones(1)
    size = np.int64(8 * sigma + 1)
    if size % 2 == 0:
        size += 1
    half = (size - 1) * 0.5
    taps = np.empty(size)
    for k in range(size):
        t = (k - half) / sigma
        taps[k] = math.exp(-0.5 * t * t)
    return taps / taps.sum()


@nb.njit(cache=True, nogil=True)
def _smooth(field, taps, line, out):  # pragma: no cover - JIT
    """``field`` (``(h, w)``) convolved with ``taps`` along rows, then columns (reflect),
    into ``out``; ``line`` (``w + len(taps)``) is scratch. Every value is the sum ``0 +
    taps[0] * v[0] + taps[1] * v[1] + ...`` in that order: the loops run tap by tap over a
    whole row (they vectorise), each value's sum the same."""
    h, w = field.shape
    size = len(taps)
    r = size // 2
    rows = np.zeros_like(field)
    for y in range(h):
        for j in range(w + size - 1):  # the row, padded by reflection
            line[j] = field[y, border(j - r, w, PAD_REFLECT)]
        for k in range(size):
            t = taps[k]
            for x in range(w):
                rows[y, x] += t * line[x + k]
    for y in range(h):
        for x in range(w):
            out[y, x] = 0.0
        for k in range(size):
            t, src = taps[k], border(y + k - r, h, PAD_REFLECT)
            for x in range(w):
                out[y, x] += t * rows[src, x]


@nb.njit(cache=True, parallel=True, nogil=True)
def elastic_field(ids, clock, op, key_tag, p, sigma, gains, out):  # pragma: no cover - JIT
    """Write each sample's displacement ``(dx, dy)`` to ``out`` (float64 ``(n, oh, ow, 2)``)."""
    n, oh, ow = out.shape[0], out.shape[1], out.shape[2]
    taps = gaussian_taps(sigma)
    for i in nb.prange(n):
        key = sample_key(clock[0], clock[1], ids[i], op, key_tag)
        if not uniform(key, 0) < p:
            out[i] = 0.0
            continue
        noise, smooth = np.empty((oh, ow)), np.empty((oh, ow))
        line = np.empty(ow + len(taps))
        for c in range(2):
            for y in range(oh):
                first = 1 + (c * oh + y) * ow
                for x in range(ow):
                    noise[y, x] = 2.0 * uniform(key, first + x) - 1.0
            _smooth(noise, taps, line, smooth)
            for y in range(oh):
                for x in range(ow):
                    out[i, y, x, c] = smooth[y, x] * gains[c]
