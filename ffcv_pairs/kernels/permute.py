"""Counter-based permutations of ``[0, n)``, built on the one hash (:func:`mix64`).

Orders must not depend on numpy's ``Generator`` streams, which numpy does not
promise to keep across versions. :func:`permute` is a keyed bijection on
``[0, n)``: a balanced four-round Feistel network on the smallest even number
of bits that covers ``n``, walked along its cycle until the value falls below
``n`` (at most a 4x domain, so a few steps on average). Any position's image is
computed on its own, so a rank computes only the part of a permutation it reads.

Definition (what the tests re-implement in plain Python): ``bits`` is the
smallest ``b >= 1`` with ``2**b >= n`` and ``half = ceil(bits / 2)``; with
``round_key[r] = mix64(key ^ ((r + 1) * GOLDEN))`` one step maps ``x = L << half | R``
through ``(L, R) -> (R, L ^ (mix64(R ^ round_key[r]) & mask))`` for ``r = 0..3``;
a value ``>= n`` is stepped again.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .hashing import GOLDEN, mix64

__all__ = ["ROUNDS", "feistel_bits", "permute"]

ROUNDS = 4


@nb.njit(cache=True, nogil=True)
def feistel_bits(n):  # pragma: no cover - JIT
    """Bits per Feistel half for a domain of ``n`` values."""
    bits = 1
    while (np.int64(1) << bits) < n:
        bits += 1
    return (bits + 1) // 2


@nb.njit(cache=True, nogil=True)
def permute(key, n, positions, out):  # pragma: no cover - JIT
    """``out[i] = pi(positions[i])`` for the keyed bijection ``pi`` of ``[0, n)``."""
    half = np.uint64(feistel_bits(n))
    mask = (np.uint64(1) << half) - np.uint64(1)
    keys = np.empty(ROUNDS, dtype=np.uint64)
    for r in range(ROUNDS):
        keys[r] = mix64(np.uint64(key) ^ (np.uint64(r + 1) * GOLDEN))
    limit = np.uint64(n)
    for i in range(len(positions)):
        x = np.uint64(positions[i])
        while True:
            left, right = x >> half, x & mask
            for r in range(ROUNDS):
                left, right = right, left ^ (mix64(right ^ keys[r]) & mask)
            x = (left << half) | right
            if x < limit:
                break
        out[i] = np.int64(x)
