"""Gaussian noise from a counter stream: four values per hash, a normal from a table.

**The distribution.** ``z`` takes one of ``2**16`` equally likely values: the
standard normal's quantiles at ``(k + 1/2) / 2**16``, ``k = 0 .. 65535``,
scaled by about 1.0002 so that the table has unit variance. So ``z`` is a
normal truncated at ``|z| <= 4.33`` (the mass beyond, 1.5e-5, moves to the
outermost values) and rounded to one of 65,536 levels.

**The stream.** Value ``j`` of an image with random key ``key`` (see
:func:`~ffcv_pairs.kernels.hashing.sample_key`) is ``table[bits]``, where
``bits`` is the 16-bit field ``j % 4`` (lowest first) of
``mix64(key + (j // 4 + 1) * GOLDEN)``: the same counter-based hash as every
other random number, one hash for four values. It depends on ``(seed, epoch,
sample, op, field)`` and ``j`` only, never on threads, ranks or order.
"""

from __future__ import annotations

import functools
from statistics import NormalDist

import numba as nb
import numpy as np

from .hashing import GOLDEN, mix64

__all__ = ["NOISE_LEVELS", "noise_block", "normal_table"]

NOISE_LEVELS = 1 << 16


@functools.lru_cache(maxsize=1)
def normal_table() -> np.ndarray:
    """The ``2**16`` equally likely values of ``z`` (float32, unit variance, read-only)."""
    dist = NormalDist()
    k = np.arange(NOISE_LEVELS, dtype=np.float64)
    z = np.array([dist.inv_cdf(p) for p in (k + 0.5) / NOISE_LEVELS])
    z /= np.sqrt(np.mean(z * z))
    table = z.astype(np.float32)
    table.flags.writeable = False
    return table


@nb.njit(cache=True, nogil=True)
def noise_block(key, j0, out, scale, table):  # pragma: no cover - JIT
    """``out[k] = scale * z[j0 + k]`` for ``k < len(out)``: values ``j0 ..`` of ``key``'s stream."""
    mask = np.uint64(0xFFFF)
    n, k, j = out.shape[0], 0, j0
    while k < n and j % 4 != 0:  # the head, up to the next multiple of 4
        h = mix64(key + np.uint64(j // 4 + 1) * GOLDEN)
        out[k] = scale * table[(h >> np.uint64(16 * (j % 4))) & mask]
        k, j = k + 1, j + 1
    q = np.uint64(j // 4 + 1)
    while k + 4 <= n:
        h = mix64(key + q * GOLDEN)
        out[k] = scale * table[h & mask]
        out[k + 1] = scale * table[(h >> np.uint64(16)) & mask]
        out[k + 2] = scale * table[(h >> np.uint64(32)) & mask]
        out[k + 3] = scale * table[h >> np.uint64(48)]
        k, q = k + 4, q + np.uint64(1)
    if k < n:
        h = mix64(key + q * GOLDEN)
        for r in range(n - k):
            out[k + r] = scale * table[(h >> np.uint64(16 * r)) & mask]
