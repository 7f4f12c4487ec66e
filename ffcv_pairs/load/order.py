"""Traversal orders, distributed: a pure function of ``(seed, epoch, rank, world_size)``.

Quasi-random, in three steps, all keyed by counter-based hashes so that every
rank computes the same global plan without talking to the others:

1. **Permute pages** with ``(seed, epoch)``: the same permutation on every rank.
   Shuffle the samples inside each page with ``(seed, epoch, page)``.
2. **Deal** the concatenated sequence out in contiguous, equal slices, one per
   rank. Only the (at most ``world_size - 1``) pages at slice boundaries are
   split between two ranks, so every rank reads whole runs of pages. With
   ``drop_last`` each slice is cut to a multiple of ``batch_size``: fewer than
   ``world_size * batch_size`` samples are dropped, and since the permutation
   changes every epoch, so do the dropped samples.
3. **Window** within the rank, as upstream's QUASI_RANDOM does: each next sample
   is drawn from one of ``window_pages`` open pages, chosen at random with
   ``(seed, epoch, rank)``; an exhausted page is replaced by the next one.

``window_pages`` trades randomness for read locality: a batch reads from at most
about ``window_pages + batch_size / samples_per_page`` pages, and a rank only
needs that many pages resident. Upstream fixes it at ``2 * batch_size`` pages
(4 GiB at batch 256 with 8 MiB pages), which on most files means fully random.

"random" is a global permutation per epoch, dealt the same way; "sequential"
deals the samples in file order, in contiguous blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numba as nb
import numpy as np
from ffcv.traversal_order.base import TraversalOrder

from ..kernels.hashing import below, key3, mix64
from .index import PageIndex

__all__ = ["ORDERS", "OrderKind", "OrderSpec", "PairTraversalOrder", "epoch_order"]

OrderKind = Literal["quasi_random", "random", "sequential"]
ORDERS: tuple[str, ...] = ("quasi_random", "random", "sequential")


@nb.njit(cache=True, nogil=True)
def _quasi_random(samples, starts, runs, page_key, window, rank_key, out):
    """Fill ``out`` with this rank's samples: ``runs`` is ``(3, n)``, the pages it reads
    and the slice ``[lo, hi)`` of each it takes."""
    perm_rank, lo, hi = runs[0], runs[1], runs[2]
    n_runs = len(perm_rank)
    run_start = np.empty(n_runs + 1, dtype=np.int64)
    run_start[0] = 0
    for r in range(n_runs):
        run_start[r + 1] = run_start[r] + hi[r] - lo[r]
    buf = np.empty(run_start[n_runs], dtype=np.int64)
    # 1. Shuffle each page with a key of its own (identical on every rank that shares
    #    it), then keep this rank's slice of it.
    for r in range(n_runs):
        p = perm_rank[r]
        s0, s1 = starts[p], starts[p + 1]
        page = samples[s0:s1].copy()
        key = key3(page_key, p, 0x9A6E)
        for i in range(len(page) - 1, 0, -1):
            j = below(key, i, i + 1)
            page[i], page[j] = page[j], page[i]
        buf[run_start[r] : run_start[r + 1]] = page[lo[r] : hi[r]]
    # 2. Draw from a window of open pages.
    open_runs = np.empty(window, dtype=np.int64)
    pos = run_start[:-1].copy()
    n_open = 0
    next_run = 0
    for t in range(len(out)):
        while n_open < window and next_run < n_runs:
            if run_start[next_run + 1] > run_start[next_run]:
                open_runs[n_open] = next_run
                n_open += 1
            next_run += 1
        k = below(rank_key, t, n_open)
        r = open_runs[k]
        out[t] = buf[pos[r]]
        pos[r] += 1
        if pos[r] == run_start[r + 1]:
            n_open -= 1
            open_runs[k] = open_runs[n_open]


@dataclass(frozen=True)
class OrderSpec:
    """Everything an epoch's order depends on, besides the epoch.

    Args:
        kind: ``"quasi_random"``, ``"random"`` or ``"sequential"``.
        batch_size: Samples per batch on one rank.
        seed: Shared by all ranks.
        rank: This process's rank in ``[0, world_size)``.
        world_size: Number of ranks.
        drop_last: Cut every rank to the same multiple of ``batch_size``.
            Without it nothing is dropped and ranks differ by at most one sample.
        window_pages: Open pages per rank for ``"quasi_random"``.
    """

    kind: OrderKind = "quasi_random"
    batch_size: int = 1
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    drop_last: bool = True
    window_pages: int = 32

    def __post_init__(self) -> None:
        if self.kind not in ORDERS:
            raise ValueError(f"order {self.kind!r} is not supported; must be one of {ORDERS}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in [0, world_size={self.world_size})")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.window_pages < 1:
            raise ValueError(f"window_pages must be at least 1, got {self.window_pages}")

    def share(self, total: int, rank: int | None = None) -> tuple[int, int]:
        """Slice ``[start, stop)`` of the dealt sequence that goes to ``rank``."""
        rank = self.rank if rank is None else rank
        if self.drop_last:
            each = total // self.world_size
            length = each - each % self.batch_size
            return rank * each, rank * each + length
        return rank * total // self.world_size, (rank + 1) * total // self.world_size

    def num_samples(self, total: int) -> int:
        start, stop = self.share(total)
        return stop - start


def _epoch_rng(spec: OrderSpec, epoch: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=[spec.seed & (2**64 - 1), epoch]))


def _deal_pages(index: PageIndex, spec: OrderSpec, perm: np.ndarray):
    """Pages of this rank's share, with the slice [lo, hi) of each it takes."""
    counts = index.counts()[perm]
    ends = np.cumsum(counts)
    begins = ends - counts
    start, stop = spec.share(index.num_samples)
    first = int(np.searchsorted(ends, start, side="right"))
    last = int(np.searchsorted(begins, stop, side="left"))
    sel = slice(first, last)
    lo = np.maximum(begins[sel], start) - begins[sel]
    hi = np.minimum(ends[sel], stop) - begins[sel]
    return perm[sel], lo.astype(np.int64), hi.astype(np.int64)


def epoch_order(index: PageIndex, spec: OrderSpec, epoch: int) -> np.ndarray:
    """The sample ids this rank reads in ``epoch``, in order (int64).

    A pure function of ``(index, spec, epoch)``: no process group, no global state.
    """
    total = index.num_samples
    start, stop = spec.share(total)
    if spec.kind == "sequential":
        return index.samples[start:stop].copy()
    rng = _epoch_rng(spec, epoch)
    if spec.kind == "random":
        return rng.permutation(index.samples)[start:stop]
    perm = rng.permutation(index.num_pages)
    pages, lo, hi = _deal_pages(index, spec, perm)
    out = np.empty(stop - start, dtype=np.int64)
    page_key = int(rng.integers(0, 2**63))
    rank_key = int(mix64(np.uint64(page_key) ^ np.uint64(spec.rank + 1)))
    _quasi_random(
        index.samples,
        index.starts,
        np.stack([pages, lo, hi]).astype(np.int64),
        np.uint64(page_key),
        spec.window_pages,
        np.uint64(rank_key),
        out,
    )
    return out


class PairTraversalOrder(TraversalOrder):
    """An upstream ``TraversalOrder`` backed by :func:`epoch_order`.

    Upstream's ``Loader`` cannot take it (it checks ``isinstance`` on a class);
    :class:`~ffcv_pairs.load.loader.PairLoader` composes it directly.
    """

    def __init__(self, index: PageIndex, spec: OrderSpec):
        self.index, self.spec = index, spec
        self.indices, self.seed = index.samples, spec.seed
        self.distributed, self.sampler = spec.world_size > 1, None

    def sample_order(self, epoch: int) -> np.ndarray:
        return epoch_order(self.index, self.spec, epoch)
