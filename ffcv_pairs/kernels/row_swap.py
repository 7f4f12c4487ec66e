"""A and B exchanged row by row in place: the CPU path of ``PairAugment(swap=p)``
(:class:`~ffcv_pairs.augment.swap.SwapAB`).

One pass over each swapped row's bytes, eight at a time (each value read once, written once,
no held copy), on the calling thread: torch's three ``copy_`` a row through a held row
took about 7 ms a batch of 64 pairs of 3x224x224 here (the caller's thread, beside the
loader's own), this about 1 ms.
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["swap_rows"]


@nb.njit(cache=True, nogil=True)
def swap_rows(a, b, rows):  # pragma: no cover - JIT
    """Exchange rows ``rows`` of ``a`` and ``b`` (uint64 ``(n, words)``, C-contiguous, not
    overlapping: one batch's two fields)."""
    u = np.uint64
    for k in range(len(rows)):
        x, y = a[u(rows[k])], b[u(rows[k])]
        for j in range(x.shape[0]):
            t = x[j]
            x[j] = y[j]
            y[j] = t
