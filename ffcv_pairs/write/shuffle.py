"""The seeded order of ``write_pairs(..., shuffle_seed=S)``: a bijection of ``[0, n)``.

Position ``j`` of the written file holds source sample ``source_of(j)``.
The permutation is counter-based, built on the project's one hash
(:func:`ffcv_pairs.kernels.hashing.mix64`), so it is the same on every machine
and every library version, needs no table of ``n`` entries, and either
direction of any index costs a few hashes:

* **Feistel network** on ``2h``-bit integers, the smallest even width that holds
  ``n - 1`` (at least 2 bits): split ``x`` into halves ``(L, R)`` of ``h`` bits and
  run 6 rounds of ``(L, R) -> (R, L ^ F_r(R))`` with
  ``F_r(R) = mix64(R ^ key3(seed, r, TAG)) & (2^h - 1)``. Any round function
  gives a bijection of ``[0, 4^h)``; inverting runs the rounds backwards.
* **Cycle walking** maps that bijection onto ``[0, n)``: apply it again until the
  value falls below ``n``. It is still a bijection (the walk follows a cycle of the
  bigger permutation), and because ``4^h < 4n`` a walk takes under 4 steps on average.

The sidecar records ``shuffle_seed`` and :data:`PERMUTATION` so that ``verify
--against`` and ``inspect`` map every position back to its source index.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ..kernels.hashing import key3, mix64

__all__ = ["PERMUTATION", "Permutation"]

#: Name and version of the algorithm, recorded in the sidecar.
PERMUTATION = "feistel-mix64/1"
_ROUNDS = 6
_TAG = 0x5045524D  # "PERM": keeps these keys apart from every other use of key3


@nb.njit(cache=True, nogil=True)
def _round_keys(seed):  # pragma: no cover - JIT
    keys = np.empty(_ROUNDS, dtype=np.uint64)
    for r in range(_ROUNDS):
        keys[r] = key3(seed, r, _TAG)
    return keys


@nb.njit(cache=True, nogil=True)
def _feistel(x, keys, half, inverse):  # pragma: no cover - JIT
    mask = (np.uint64(1) << np.uint64(half)) - np.uint64(1)
    left = x >> np.uint64(half)
    right = x & mask
    if not inverse:
        for r in range(_ROUNDS):
            left, right = right, left ^ (mix64(right ^ keys[r]) & mask)
    else:
        for r in range(_ROUNDS - 1, -1, -1):
            left, right = right ^ (mix64(left ^ keys[r]) & mask), left
    return (left << np.uint64(half)) | right


@nb.njit(cache=True, nogil=True)
def _walk(ids, n, keys, half, inverse, out):  # pragma: no cover - JIT
    un = np.uint64(n)
    for k in range(ids.shape[0]):
        x = _feistel(np.uint64(ids[k]), keys, half, inverse)
        while x >= un:
            x = _feistel(x, keys, half, inverse)
        out[k] = np.int64(x)


class Permutation:
    """The seeded bijection of ``[0, n)`` used by ``--shuffle`` (see the module docstring).

    Args:
        n: Number of samples (at least 1).
        seed: Any integer in ``[0, 2^64)``.
    """

    def __init__(self, n: int, seed: int):
        if int(n) < 1:
            raise ValueError(f"Permutation: n must be at least 1, got {n}")
        if not 0 <= int(seed) < 1 << 64:
            raise ValueError(f"shuffle seed must be an integer in [0, 2**64), got {seed}")
        self.n, self.seed = int(n), int(seed)
        bits = max(2, (self.n - 1).bit_length())
        self.half = (bits + 1) // 2
        self._keys = _round_keys(np.uint64(self.seed))

    def _apply(self, ids: np.ndarray | int, inverse: bool) -> np.ndarray:
        arr = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        if arr.size and (arr.min() < 0 or arr.max() >= self.n):
            bad = arr[(arr < 0) | (arr >= self.n)][0]
            raise ValueError(f"index {int(bad)} is outside [0, {self.n})")
        out = np.empty(arr.shape[0], dtype=np.int64)
        _walk(arr, self.n, self._keys, self.half, inverse, out)
        return out

    def source_of(self, positions: np.ndarray | int) -> np.ndarray:
        """The source index of each written position (an int64 array)."""
        return self._apply(positions, inverse=False)

    def position_of(self, sources: np.ndarray | int) -> np.ndarray:
        """The written position of each source index (an int64 array)."""
        return self._apply(sources, inverse=True)
