"""The geometric ops of an augmentation policy (``PairAugment(policy=...)``, torchvision's
``TrivialAugmentWide`` and ``RandAugment``): :func:`policy_affine`, an ``apply(image,
params, tag)`` run by the drawn-op driver (:mod:`.drawn_driver`), and :func:`nearest_affine`,
its nearest-neighbour sampler. The policy's other ops run through the applies of the
photometric ops (:mod:`.colour`, :mod:`.tones`, :mod:`.sharpness`), each compiled and cached
on its own (see :mod:`ffcv_pairs.augment.policies`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["POLICY_OPS", "nearest_affine", "policy_affine"]

#: The ops a policy draws from, by the index its rows name them with (torchvision's names).
POLICY_OPS = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
)


@nb.njit(cache=True, nogil=True)
def nearest_affine(image, m, fill):  # pragma: no cover - JIT
    """``image`` (``(planes, height, width, pixel)``) resampled in place: output pixel ``(x,
    y)`` takes the source pixel nearest to ``(m[0] x + m[1] y + m[2], m[3] x + m[4] y + m[5])``
    (indices; rounded half to even, as ``grid_sample``'s nearest mode), or ``fill`` where that
    pixel is outside the image.

    A row at a time: its source pixels first, in one branch-free loop that vectorises (the
    offset of each, 0 where outside, and a flag), then a gather per plane whose reads are
    unsigned (numba skips its negative-index wrap) and whose fill is a select, not a branch:
    several times faster than a pixel at a time, the same bytes."""
    planes, height, width, pixel = image.shape
    held = image.copy()
    value = image.dtype.type(fill)
    src, dst = held.reshape(planes, -1), image.reshape(planes, -1)
    at, ok = np.empty(width, np.uint64), np.empty(width, np.bool_)
    right, bottom = width - 1.0, height - 1.0
    for y in range(height):
        for x in range(width):
            sx = np.rint(m[0] * x + m[1] * y + m[2])
            sy = np.rint(m[3] * x + m[4] * y + m[5])
            inside = (sx >= 0.0) & (sx <= right) & (sy >= 0.0) & (sy <= bottom)
            ix, iy = np.int64(sx if inside else 0.0), np.int64(sy if inside else 0.0)
            at[x], ok[x] = np.uint64((iy * width + ix) * pixel), inside
        start = y * width * pixel
        for p in range(planes):
            s, d = src[p], dst[p][start : start + width * pixel]
            if pixel == 1:  # planes: one value a pixel (LLVM's loop has no inner one)
                for x in range(width):
                    v = s[at[x]]
                    d[x] = v if ok[x] else value
                continue
            for x in range(width):
                for q in range(pixel):
                    v = s[at[x] + np.uint64(q)]
                    d[x * pixel + q] = v if ok[x] else value


@nb.njit(cache=True, nogil=True)
def policy_affine(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, fill, a, b, c, d, e, f, low, high, rounds)``: where ``apply``,
    :func:`nearest_affine` with the map ``(a .. f)`` (built by the draw) and ``fill``."""
    if params[0] != 0.0:
        nearest_affine(image, params[2:8], params[1])
