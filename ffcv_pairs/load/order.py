"""Traversal orders, distributed: a pure function of ``(seed, epoch, rank, world_size)``.

Quasi-random, in three steps, all keyed by this project's counter-based hash
(never numpy's ``Generator``, whose streams numpy does not promise to keep), so
that every rank computes the same global order without talking to the others,
and an upgrade does not change the orders (``tests/test_order.py`` pins them):

1. **Permute pages** with ``(seed, epoch)`` (:func:`~ffcv_pairs.kernels.permute.permute`):
   the same permutation on every rank. Shuffle the samples inside each page
   with ``(seed, epoch, page)`` (Fisher-Yates on the hash).
2. **Deal** the concatenated sequence out in contiguous, equal slices, one per
   rank. Only the (at most ``world_size - 1``) pages at slice boundaries are
   split between two ranks, so every rank reads whole runs of pages. With
   ``drop_last`` each slice is cut to a multiple of ``batch_size``: fewer than
   ``world_size * batch_size`` samples are dropped, and since the permutation
   changes every epoch, so do the dropped samples. Without ``drop_last`` and
   with several ranks, the shorter slices are padded by wrapping (fewer than
   ``world_size`` samples read twice), so all ranks have the same length.
3. **Window** within the rank, as upstream's QUASI_RANDOM does: each next sample
   is drawn from one of ``window_pages`` open pages, chosen at random with
   ``(seed, epoch, rank)``; an exhausted page is replaced by the next one.

``window_pages`` trades randomness for read locality: a batch reads from at most
about ``window_pages + batch_size / samples_per_page`` pages, and a rank only
needs that many pages resident. Upstream fixes it at ``2 * batch_size`` pages
(4 GiB at batch 256 with 8 MiB pages), which on most files means fully random.

"random" is a global permutation per epoch (a keyed Feistel bijection: each
rank computes only its own positions), dealt the same way; "sequential" deals
the samples in file order, in contiguous blocks. A resumed epoch on another
world size is worked out by :mod:`~ffcv_pairs.load.elastic` from these pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numba as nb
import numpy as np
from ffcv.traversal_order.base import TraversalOrder

from ..kernels.hashing import below, key3
from ..kernels.permute import permute as _permute_kernel
from . import small_orders
from .index import PageIndex

__all__ = [
    "ORDERS",
    "PARTITIONS",
    "OrderKind",
    "OrderSpec",
    "PairTraversalOrder",
    "Partition",
    "deal",
    "drawn",
    "epoch_order",
    "read_order",
    "shuffled_groups",
]

OrderKind = Literal["quasi_random", "random", "sequential"]
ORDERS: tuple[str, ...] = ("quasi_random", "random", "sequential")
Partition = Literal["global", "node"]
PARTITIONS: tuple[str, ...] = ("global", "node")

_MASK64 = (1 << 64) - 1
# What each of an epoch's keys is for: part of the key, so no two draws share numbers.
_PAGES, _SHUFFLE, _WINDOW, _RANDOM, _GROUPS, _ITEMS = 1, 2, 3, 4, 5, 6


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
        # An element loop, not a slice assignment: numba compiles a slice assignment's
        # shape-mismatch message (f-strings, str of ints) too, 1.3 s of an empty cache's start.
        for i in range(hi[r] - lo[r]):
            buf[run_start[r] + i] = page[lo[r] + i]
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
        drop_last: Cut every rank to the same multiple of ``batch_size``. Without
            it nothing is dropped, and with several ranks the shorter slices are
            padded by wrapping (as ``DistributedSampler`` pads), so every rank
            reads the same number of samples and DDP never waits for a rank that
            has run out.
        window_pages: Open pages per rank for ``"quasi_random"``.
        partition: ``"global"`` (every rank draws from the whole file) or ``"node"``
            (each node from its own stretch, see :mod:`~.node_order`).
        nodes: Physical nodes (``world_size`` must be a multiple), for ``"node"``.
        canonical_nodes: Buckets the file is cut into (a multiple of ``nodes``), for
            ``"node"``.
        node_window: For ``"node"`` and ``"quasi_random"``: the node's ranks share one
            window of ``window_pages`` over the node's pages ordered shard-major (its
            shards permuted, a shard's pages together), and are dealt its samples in turn
            (see :mod:`~.node_order`). False: each rank its own window over its own run.
        shard_pages: The first page of each shard, ascending (``node_window``'s shards;
            empty: the file is one shard).
    """

    kind: OrderKind = "quasi_random"
    batch_size: int = 1
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    drop_last: bool = True
    window_pages: int = 32
    partition: Partition = "global"
    nodes: int = 1
    canonical_nodes: int = 1
    node_window: bool = False
    shard_pages: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ORDERS:
            raise ValueError(f"order {self.kind!r} is not supported; must be one of {ORDERS}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in [0, world_size={self.world_size})")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.window_pages < 1:
            raise ValueError(f"window_pages must be at least 1, got {self.window_pages}")
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition {self.partition!r} is not one of {PARTITIONS}")
        if self.nodes < 1 or self.world_size % self.nodes:
            raise ValueError(
                f"world_size {self.world_size} is not a whole number of ranks on each of "
                f"{self.nodes} nodes"
            )
        if self.node_window and (self.partition != "node" or self.kind != "quasi_random"):
            raise ValueError(
                f"node_window shares a window among a node's ranks: it needs "
                f"partition='node' and order='quasi_random', got partition={self.partition!r}, "
                f"order={self.kind!r}"
            )
        if self.canonical_nodes < 1 or self.canonical_nodes % self.nodes:
            raise ValueError(
                f"canonical_nodes {self.canonical_nodes} is not a multiple of the {self.nodes} "
                f"nodes: each node takes an equal number of buckets (use a multiple of every "
                f"node count you will run on)"
            )

    def share(self, total: int, rank: int | None = None) -> tuple[int, int]:
        """``(start, length)`` of ``rank``'s slice of a dealt sequence of ``total``.

        The slice may run past the end and wrap to the start (the padding).
        """
        return deal(
            total,
            self.world_size,
            self.rank if rank is None else rank,
            self.batch_size,
            self.drop_last,
        )

    def num_samples(self, total: int) -> int:
        return self.share(total)[1]


def deal(
    total: int, world_size: int, rank: int, batch_size: int, drop_last: bool
) -> tuple[int, int]:
    """``(start, length)`` of ``rank``'s contiguous slice of ``total`` dealt samples.

    With ``drop_last`` every rank gets ``total // world_size`` cut to a multiple of
    ``batch_size`` (fewer than ``world_size * batch_size`` dropped); without it the
    slices start at ``rank * total // world_size`` and all have the length of the
    longest, ``ceil(total / world_size)``: a shorter one runs one sample into the next
    rank's slice (the last rank wraps to the first sample).
    """
    if drop_last:
        each = total // world_size
        return rank * each, each - each % batch_size
    return rank * total // world_size, -(-total // world_size)


def _key(seed: int, epoch: int, tag: int) -> np.uint64:
    return np.uint64(small_orders.key3(seed & _MASK64, epoch, tag))


# On an empty kernel cache, short orders are computed by numpy twins of the kernels (the same
# integers) while the kernels compile in the background, so that a loader's first batch
# does not wait for their compiles.
def permute(key, n, positions, out) -> None:
    """:func:`~ffcv_pairs.kernels.permute.permute`."""
    twin = small_orders.permute
    small_orders.twin_or_kernel(twin, _permute_kernel, len(positions), key, n, positions, out)


def _draw_through_window(samples, starts, runs, page_key, window, rank_key, out) -> None:
    """:func:`_quasi_random`."""
    args = (samples, starts, runs, page_key, window, rank_key, out)
    size = max(len(out), len(samples) // 4)
    small_orders.twin_or_kernel(small_orders.quasi_random, _quasi_random, size, *args)


def _spans(start: int, length: int, total: int) -> list[tuple[int, int]]:
    """``[start, start + length)`` wrapped into ``[0, total)``: one or two ranges."""
    if (length and not 0 <= start < total) or length > total:
        raise ValueError(f"slice [{start}, {start}+{length}) does not fit {total} samples")
    stop = start + length
    return [(start, min(stop, total))] + ([(0, stop - total)] if stop > total else [])


def _runs(index: PageIndex, perm: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """``(3, n)``: the pages (in permuted order) that ``spans`` cover, and the slice
    ``[lo, hi)`` of each."""
    counts = index.counts()[perm]
    ends = np.cumsum(counts)
    begins = ends - counts
    parts = []
    for start, stop in spans:
        sel = slice(
            int(np.searchsorted(ends, start, side="right")),
            int(np.searchsorted(begins, stop, side="left")),
        )
        lo = np.maximum(begins[sel], start) - begins[sel]
        hi = np.minimum(ends[sel], stop) - begins[sel]
        parts.append(np.stack([perm[sel], lo, hi]))
    return np.concatenate(parts, axis=1).astype(np.int64)


def read_order(
    index: PageIndex,
    spec: OrderSpec,
    epoch: int,
    start: int,
    length: int,
    rank: int | None = None,
) -> np.ndarray:
    """Positions ``[start, start + length)`` (wrapping) of ``epoch``'s dealt sequence.

    In the order ``rank`` reads them: for ``"quasi_random"`` drawn through its
    window of ``spec.window_pages`` pages with the rank's key. ``rank=None`` gives
    them in sequence order (pages permuted, each page shuffled).
    """
    total = index.num_samples
    spans = _spans(start, length, total)
    if spec.kind == "sequential":
        return np.concatenate([index.samples[a:b] for a, b in spans])
    if spec.kind == "random":
        positions = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans])
        perm = np.empty(len(positions), dtype=np.int64)
        permute(_key(spec.seed, epoch, _RANDOM), total, positions, perm)
        return index.samples[perm]
    pages = np.empty(index.num_pages, dtype=np.int64)
    permute(_key(spec.seed, epoch, _PAGES), index.num_pages, np.arange(index.num_pages), pages)
    window = 1 if rank is None else spec.window_pages
    window_key = int(_key(spec.seed, epoch, _WINDOW))
    rank_key = small_orders.mix64(window_key ^ (0 if rank is None else rank + 1))
    out = np.empty(length, dtype=np.int64)
    _draw_through_window(
        index.samples,
        index.starts,
        _runs(index, pages, spans),
        _key(spec.seed, epoch, _SHUFFLE),
        window,
        np.uint64(rank_key),
        out,
    )
    return out


def drawn(
    index: PageIndex, pages: np.ndarray, spec: OrderSpec, epoch: int, stream: int
) -> np.ndarray:
    """All of ``index``'s samples, ``pages`` (positions in ``index``, every one once) in
    that order, each page shuffled as :func:`read_order` shuffles it, drawn through one
    window of ``spec.window_pages`` keyed by ``(seed, epoch, stream)``."""
    counts = index.counts()[pages]
    runs = np.stack([pages, np.zeros_like(counts), counts]).astype(np.int64)
    out = np.empty(index.num_samples, dtype=np.int64)
    _draw_through_window(
        index.samples,
        index.starts,
        runs,
        _key(spec.seed, epoch, _SHUFFLE),
        spec.window_pages,
        np.uint64(small_orders.mix64(int(_key(spec.seed, epoch, _WINDOW)) ^ int(stream))),
        out,
    )
    return out


def shuffled_groups(groups: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """Positions ``0 .. len(groups) - 1`` (items of nondecreasing group ids) group-major:
    the groups in an order keyed by ``(seed, epoch)``, each group's items shuffled among
    themselves and kept together."""
    n = len(groups)
    if not n:
        return np.zeros(0, dtype=np.int64)
    new = np.r_[True, groups[1:] != groups[:-1]]
    which = np.cumsum(new) - 1  # each item's group, 0 ..
    count = int(which[-1]) + 1
    group_key = np.empty(count, dtype=np.int64)
    permute(_key(seed, epoch, _GROUPS), count, np.arange(count, dtype=np.int64), group_key)
    item_key = np.empty(n, dtype=np.int64)
    permute(_key(seed, epoch, _ITEMS), n, np.arange(n, dtype=np.int64), item_key)
    return np.lexsort((item_key, group_key[which])).astype(np.int64)


def epoch_order(index: PageIndex, spec: OrderSpec, epoch: int) -> np.ndarray:
    """The sample ids this rank reads in ``epoch``, in order (int64).

    A pure function of ``(index, spec, epoch)``: no process group, no global state.
    """
    start, length = spec.share(index.num_samples)
    return read_order(index, spec, epoch, start, length, spec.rank)


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
