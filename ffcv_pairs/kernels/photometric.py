"""Brightness, contrast and gaussian noise, per sample, paired or per image."""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

from .hashing import OP_BRIGHTNESS, OP_CONTRAST, OP_NOISE, normal, sample_key, uniform

__all__ = ["PhotometricConfig", "photometric"]


class PhotometricConfig(NamedTuple):
    """The photometric ops of one pipeline; ``*_paired``: the same draw for A and B."""

    brightness: float
    brightness_paired: bool
    contrast: float
    contrast_paired: bool
    noise_std: float
    noise_paired: bool


@nb.njit(cache=True, parallel=True, nogil=True)
def photometric(ids, x, cfg, clock, tag, is_int):  # pragma: no cover - JIT
    """In place: brightness, then contrast, then gaussian noise, per sample.

    ``cfg``: :class:`PhotometricConfig`. ``x``: ``(batch, n)`` uint8 (``is_int``: rounded half up,
    clipped to [0, 255]) or float32.
    """
    seed, epoch = clock[0], clock[1]
    n = x.shape[1]
    for i in nb.prange(len(ids)):
        sid = ids[i]
        kb = sample_key(seed, epoch, sid, OP_BRIGHTNESS, 0 if cfg.brightness_paired else tag)
        kc = sample_key(seed, epoch, sid, OP_CONTRAST, 0 if cfg.contrast_paired else tag)
        kn = sample_key(seed, epoch, sid, OP_NOISE, 0 if cfg.noise_paired else tag)
        bright = 1.0 + cfg.brightness * (2.0 * uniform(kb, 0) - 1.0) if cfg.brightness > 0 else 1.0
        contrast = 1.0 + cfg.contrast * (2.0 * uniform(kc, 0) - 1.0) if cfg.contrast > 0 else 1.0
        mean = 0.0
        if cfg.contrast > 0:
            for j in range(n):
                mean += np.float64(x[i, j])
            mean = mean * bright / n
        for j in range(n):
            v = np.float64(x[i, j]) * bright
            if cfg.contrast > 0:
                v = (v - mean) * contrast + mean
            if cfg.noise_std > 0:
                v += cfg.noise_std * normal(kn, j)
            if is_int:
                v = min(max(math.floor(v + 0.5), 0.0), 255.0)
            x[i, j] = v
