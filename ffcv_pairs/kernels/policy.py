"""The apply of an augmentation policy (``PairAugment(policy=...)``, torchvision's
``TrivialAugmentWide`` and ``RandAugment``): one ``apply(image, params, tag)`` run by the
drawn-op driver (:mod:`.drawn_driver`) that runs the sample's drawn ops in turn, each through
the apply of the photometric op it is (:mod:`.colour`, :mod:`.tones`, :mod:`.sharpness`) or
through :func:`nearest_affine`, the nearest-neighbour sampler of the geometric ones.

``params = (count, fill, count * (op, magnitude, a, b, c, d, e, f), low, high, rounds)``:
``op`` an index of :data:`POLICY_OPS`, ``magnitude`` its signed magnitude as torchvision
passes it (a factor's ``1 + magnitude`` is formed here), and for the geometric ops the map
from an output pixel ``(x, y)`` (indices) to the source position ``(a x + b y + c, d x + e y +
f)`` in pixel indices, which the draw builds (:mod:`ffcv_pairs.augment.policies`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .colour import color_jitter
from .sharpness import sharpness
from .tones import autocontrast, equalize, posterize, solarize

__all__ = ["POLICY_OPS", "nearest_affine", "policy"]

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
_GEOMETRIC_LAST, _BRIGHTNESS, _COLOR, _CONTRAST, _SHARPNESS = 5, 6, 7, 8, 9
_POSTERIZE, _SOLARIZE, _AUTOCONTRAST, _EQUALIZE = 10, 11, 12, 13
_ROW = 8  # (op, magnitude, a, b, c, d, e, f)


@nb.njit(cache=True, nogil=True)
def nearest_affine(image, m, fill):  # pragma: no cover - JIT
    """``image`` (``(planes, height, width, pixel)``) resampled in place: output pixel ``(x,
    y)`` takes the source pixel nearest to ``(m[0] x + m[1] y + m[2], m[3] x + m[4] y + m[5])``
    (rounded half to even, as ``grid_sample``'s nearest mode), or ``fill`` where that pixel is
    outside the image."""
    planes, height, width, pixel = image.shape
    held = image.copy()
    value = image.dtype.type(fill)
    for y in range(height):
        for x in range(width):
            sx = np.rint(m[0] * x + m[1] * y + m[2])
            sy = np.rint(m[3] * x + m[4] * y + m[5])
            inside = 0.0 <= sx <= width - 1.0 and 0.0 <= sy <= height - 1.0
            ix, iy = (int(sx), int(sy)) if inside else (0, 0)
            for p in range(planes):
                for q in range(pixel):
                    image[p, y, x, q] = held[p, iy, ix, q] if inside else value


@nb.njit(cache=True, nogil=True)
def _factor(image, part, factor, tail, tag):  # pragma: no cover - JIT
    """One part of :func:`~.colour.color_jitter` (0 brightness, 1 contrast, 2 saturation)."""
    p = np.zeros(15, np.float64)
    for k in range(4):
        p[k] = k
        p[4 + k] = factor
    p[8 + part] = 1.0
    p[12:] = tail
    color_jitter(image, p, tag)


@nb.njit(cache=True, nogil=True)
def _one(image, op, magnitude, tail, tag):  # pragma: no cover - JIT
    """Photometric op ``op`` (an index of :data:`POLICY_OPS` past the geometric ones)."""
    p = np.empty(5, np.float64)
    p[0], p[1] = 1.0, magnitude
    p[2:] = tail
    if op == _BRIGHTNESS:
        _factor(image, 0, 1.0 + magnitude, tail, tag)
    elif op == _COLOR:
        if image.shape[0] * image.shape[3] == 3:  # one channel: kept, as torchvision keeps it
            _factor(image, 2, 1.0 + magnitude, tail, tag)
    elif op == _CONTRAST:
        _factor(image, 1, 1.0 + magnitude, tail, tag)
    elif op == _SHARPNESS:
        p[1] = 1.0 + magnitude
        sharpness(image, p, tag)
    elif op == _POSTERIZE:
        posterize(image, p, tag)
    elif op == _SOLARIZE:  # torchvision: the threshold is magnitude * the largest value
        p[1] = tail[0] + (tail[1] - tail[0]) * magnitude
        solarize(image, p, tag)
    elif op == _AUTOCONTRAST:
        autocontrast(image, p[np.array([0, 2, 3, 4])], tag)
    elif op == _EQUALIZE:
        equalize(image, p[np.array([0, 2, 3, 4])], tag)


@nb.njit(cache=True, nogil=True)
def policy(image, params, tag):  # pragma: no cover - JIT
    """See the module docstring."""
    count, fill = int(params[0]), params[1]
    tail = params[-3:].copy()
    for j in range(count):
        row = params[2 + _ROW * j : 2 + _ROW * (j + 1)]
        op = int(row[0])
        if op == 0:
            continue
        if op <= _GEOMETRIC_LAST:
            nearest_affine(image, row[2:], fill)
        else:
            _one(image, op, row[1], tail, tag)
