"""The draw of random erasing (options in :mod:`.photo_options`, apply in
:mod:`ffcv_pairs.kernels.erasing`): torchvision's ``RandomErasing.get_params`` on a sample's
hashed uniforms.

Uniforms of a sample: ``u[0]`` decides (``u[0] < p``); try ``t`` of 10 takes the area
fraction from ``u[1 + 2t]`` (uniform in ``scale``) and the aspect ratio from ``u[2 + 2t]``
(``exp`` of a uniform in ``log(ratio)``), ``h = round(sqrt(area * ratio))``, ``w =
round(sqrt(area / ratio))`` (half to even, as Python's ``round``); the first try with ``h <
height`` and ``w < width`` wins; ``u[21]`` and ``u[22]`` place it, ``top =
floor(u[21] * (height - h + 1))``, ``left`` likewise; ``u[23]`` seeds the noise. No try fits:
nothing is erased (torchvision returns the image).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels.erasing import CONSTANT, NORMAL, UNIFORM

__all__ = ["ERASING_UNIFORMS", "erasing_boxes", "erasing_draw"]

#: Uniforms per sample: the decision, 10 tries of two, the place, the noise's seed.
ERASING_UNIFORMS = 24
_TRIES = 10


def erasing_boxes(
    u: np.ndarray, height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float]
) -> np.ndarray:
    """``(n, 4)`` float64 ``(top, left, h, w)`` per row of uniforms ``u``; ``h = w = 0`` where
    no try fits (see the module docstring)."""
    n = len(u)
    box = np.zeros((n, 4))
    found = np.zeros(n, bool)
    area = height * width
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for t in range(_TRIES):
        target = area * (scale[0] + (scale[1] - scale[0]) * u[:, 1 + 2 * t])
        aspect = np.exp(lo + (hi - lo) * u[:, 2 + 2 * t])
        h = np.round(np.sqrt(target * aspect))
        w = np.round(np.sqrt(target / aspect))
        fits = ~found & (h < height) & (w < width)
        box[fits, 2], box[fits, 3] = h[fits], w[fits]
        found |= fits
    box[:, 0] = np.floor(u[:, 21] * (height - box[:, 2] + 1))
    box[:, 1] = np.floor(u[:, 22] * (width - box[:, 3] + 1))
    box[~found, :2] = 0.0
    return box


def erasing_draw(aug: Any, size: tuple[int, int], channels: int) -> Callable:
    """The draw of ``aug``'s erasing on images of ``size`` with ``channels`` channels: rows of
    ``(apply, top, left, h, w, fill, value, seed, mean[C], std[C])`` (see
    :mod:`ffcv_pairs.kernels.erasing`)."""
    random = aug.erasing_value == "random"
    normalised = random and aug.normalize_mean is not None
    fill = (NORMAL if normalised else UNIFORM) if random else CONSTANT
    value = 0.0 if random else float(aug.erasing_value)
    mean = np.broadcast_to(np.asarray(aug.normalize_mean or (0.0,), float), channels)
    std = np.broadcast_to(np.asarray(aug.normalize_std or (1.0,), float), channels)

    def draw(u: np.ndarray) -> np.ndarray:
        n = len(u)
        box = erasing_boxes(u, *size, aug.erasing_scale, aug.erasing_ratio)
        apply = (u[:, 0] < aug.erasing) & (box[:, 2] > 0) & (box[:, 3] > 0)
        seed = np.floor(u[:, 23] * 2.0**53)
        constants = np.tile([fill, value], (n, 1))
        return np.column_stack(
            [apply, box, constants, seed, np.tile(mean, (n, 1)), np.tile(std, (n, 1))]
        )

    return draw
