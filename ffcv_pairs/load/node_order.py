"""Node-local order (``partition="node"``): each node reads only its part of the dataset.

The global order (:mod:`~.order`) lets every rank draw from the whole file, so every node
holds or reads the whole dataset each epoch. With ``partition="node"``:

1. **Canonical buckets.** The file's pages (in file order: shard after shard) are cut
   into ``canonical_nodes`` contiguous buckets of about equal sample counts, at page
   boundaries. They depend on the dataset and ``canonical_nodes`` alone.
2. **Nodes.** Physical node ``p`` of ``P`` (ranks are numbered node-major, as torchrun
   numbers them: rank ``r`` is on node ``r // L`` with ``L = world_size / P``) takes the
   ``canonical_nodes / P`` buckets ``[p C / P, (p + 1) C / P)``: one contiguous stretch of
   the file, the same every epoch. ``canonical_nodes`` must be a multiple of ``P``; keep it
   fixed (a multiple of every node count you will use) and a node's buckets stay put
   when the node count changes.
3. **Each epoch**, a node's stretch is ordered as a whole file is (pages permuted with a
   key of ``(seed, node's first bucket)``, samples shuffled within pages, dealt to the
   node's ``L`` ranks in contiguous slices, each read through the quasi-random window).
4. **Equal lengths.** Nodes hold slightly different counts (buckets end at pages), so
   every rank reads the length of the shortest node's slices (``drop_last``: cut to whole
   batches), or without ``drop_last`` the longest, the others padded by wrapping within
   their node. Every rank gets the same number of batches.

What it costs: a sample never meets the samples of other nodes' buckets in an epoch, and a
batch draws only from its node's stretch. What it buys: a node reads (or downloads, or
keeps in its page cache) only ``1 / P`` of the dataset each epoch.

**Elastic resume.** A mid-epoch state lists the worlds the epoch ran on (ranks, nodes,
batch, batches consumed; :mod:`~.elastic`). The rest of the epoch is every sample of each
node's buckets that no rank consumed: :func:`node_resumed_order` replays the worlds (each
rank's order in each, from what the ones before left), and deals each new node the rest of
its own buckets, in its epoch's sequence order, in equal slices as above. So samples never
leave their buckets' node, even when the node count changes, and each is read once (but for
the ``drop_last`` cut, or the padding without it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from ..kernels.hashing import key3
from .index import PageIndex
from .options import LoaderConfig
from .order import OrderSpec, drawn, epoch_order, read_order, shuffled_groups
from .world import local_ranks

__all__ = [
    "SegmentLike",
    "bucket_bounds",
    "loader_spec",
    "node_index",
    "node_order",
    "node_resumed_order",
    "node_share",
    "node_stream",
    "rank_order",
    "rank_samples",
]

_MASK63 = (1 << 63) - 1
_TAG = 0x4E4F4445  # "NODE"


def bucket_bounds(index: PageIndex, canonical: int) -> np.ndarray:
    """int64 ``(canonical + 1,)``: bucket ``b`` is ``index.pages[bounds[b]:bounds[b+1]]``
    (contiguous, about ``num_samples / canonical`` samples each, cut at page starts)."""
    firsts = index.starts[:-1]  # each page's first position among the samples
    targets = np.arange(canonical + 1, dtype=np.int64) * index.num_samples // canonical
    bounds = np.searchsorted(firsts, targets, side="left").astype(np.int64)
    bounds[-1] = index.num_pages
    return bounds


def _nodes(spec: OrderSpec) -> tuple[int, int, int]:
    """``(P, L, p)``: nodes, ranks per node, this rank's node."""
    per_node = spec.world_size // spec.nodes
    return spec.nodes, per_node, spec.rank // per_node


def node_index(index: PageIndex, spec: OrderSpec, node: int) -> PageIndex:
    """The pages of ``node``'s buckets (a contiguous stretch of ``index``)."""
    bounds = bucket_bounds(index, spec.canonical_nodes)
    per = spec.canonical_nodes // spec.nodes
    lo, hi = int(bounds[node * per]), int(bounds[(node + 1) * per])
    first, last = int(index.starts[lo]), int(index.starts[hi])
    return PageIndex(
        pages=index.pages[lo:hi],
        starts=index.starts[lo : hi + 1] - first,
        samples=index.samples[first:last],
    )


def _local_spec(spec: OrderSpec, node: int) -> OrderSpec:
    """``spec`` for one node's ranks, its page permutation keyed by the node's first
    bucket (so a node's order does not depend on the others)."""
    nodes, per_node, _ = _nodes(spec)
    bucket = node * (spec.canonical_nodes // nodes)
    seed = int(key3(np.uint64(spec.seed), np.uint64(bucket), np.uint64(_TAG))) & _MASK63
    return replace(
        spec, seed=seed, rank=spec.rank % per_node, world_size=per_node, nodes=1, canonical_nodes=1
    )


def node_share(index: PageIndex, spec: OrderSpec) -> int:
    """Samples every rank reads in an epoch: the shortest node's slice (``drop_last``) or
    the longest (padded by wrapping).

    Raises:
        ValueError: a node holds fewer samples than that (named), on every rank alike.
    """
    nodes, _, _ = _nodes(spec)
    held = [node_index(index, spec, p).num_samples for p in range(nodes)]
    lengths = [_local_spec(spec, p).share(n)[1] for p, n in enumerate(held)]
    length = min(lengths) if spec.drop_last else max(lengths)
    short = next((p for p, n in enumerate(held) if n < length or not n), None)
    if short is not None:
        what = f"{held[short]} samples, fewer than the {length} each of its ranks must read"
        raise ValueError(
            f"partition='node': node {short} of {nodes} holds {what if held[short] else 'none'} "
            f"(buckets end at pages: {index.num_pages} pages in {spec.canonical_nodes} buckets); "
            f"use fewer nodes or canonical_nodes, smaller pages, or partition='global'"
        )
    return length


def node_stream(mine: PageIndex, local: OrderSpec, epoch: int) -> np.ndarray:
    """A node's samples in the order its ranks take them in turn, with ``node_window``:
    its pages shard-major (shards by ``local.shard_pages``), drawn through one window."""
    firsts = np.asarray(local.shard_pages, dtype=np.int64)
    shards = np.searchsorted(firsts, mine.pages, side="right")
    return drawn(mine, shuffled_groups(shards, local.seed, epoch), local, epoch, _TAG)


def _dealt(stream: np.ndarray, rank: int, ranks: int, length: int) -> np.ndarray:
    """Rank ``rank``'s ``length`` samples of ``stream`` dealt to ``ranks`` in turn (sample
    ``t`` to rank ``t % ranks``), wrapping past the end (the padding)."""
    if length and not len(stream):
        raise ValueError(f"no samples left for the {length} each rank must read")
    at = rank + ranks * np.arange(length, dtype=np.int64)
    return stream[at % max(1, len(stream))]


def node_order(index: PageIndex, spec: OrderSpec, epoch: int) -> np.ndarray:
    """The sample ids this rank reads in ``epoch`` under the node-local order."""
    _, _, node = _nodes(spec)
    mine = node_index(index, spec, node)
    local = _local_spec(spec, node)
    start, _ = local.share(mine.num_samples)
    length = node_share(index, spec)  # refuses a node that holds too few
    if spec.node_window:
        return _dealt(node_stream(mine, local, epoch), local.rank, local.world_size, length)
    return read_order(mine, local, epoch, start % max(1, mine.num_samples), length, local.rank)


def rank_order(index: PageIndex, spec: OrderSpec, epoch: int) -> np.ndarray:
    """This rank's ids in ``epoch``: the node-local order or the global one."""
    if spec.partition == "node":
        return node_order(index, spec, epoch)
    return epoch_order(index, spec, epoch)


def rank_samples(index: PageIndex, spec: OrderSpec) -> int:
    """Samples each rank reads in an epoch of ``index``."""
    if spec.partition == "node":
        return node_share(index, spec)
    return spec.num_samples(index.num_samples)


def loader_spec(
    cfg: LoaderConfig,
    rank: int,
    world_size: int,
    page_size: int,
    mixture: bool,
    shard_pages: tuple[int, ...] = (),
) -> OrderSpec:
    """The loader's :class:`OrderSpec`: ``cfg``'s order on this world, its window in
    pages, and for ``partition="node"`` the nodes (``world_size`` over the ranks of this
    node, :func:`~.world.local_ranks`), ``canonical_nodes`` (default: the nodes) and
    ``node_window`` (over the shards that start at ``shard_pages``).

    Raises:
        ValueError: ``partition="node"`` with a mixture, nodes and buckets that do not
            divide, or ``node_window`` without ``partition="node"`` (named).
    """
    window = max(1, cfg.window_bytes // int(page_size))
    spec = OrderSpec(cfg.order, cfg.batch_size, cfg.seed, rank, world_size, cfg.drop_last, window)
    if cfg.partition == "global":
        if cfg.node_window:
            raise ValueError("node_window=True shares a node's window: give partition='node'")
        return spec
    if mixture:
        raise ValueError(
            "partition='node' reads one dataset (a .beton or a manifest); a mixture's epochs "
            "change which samples there are, so its order stays global"
        )
    local = local_ranks(world_size)
    if world_size % local:
        raise ValueError(
            f"partition='node': world_size {world_size} is not a whole number of nodes of "
            f"{local} ranks (LOCAL_WORLD_SIZE or SLURM_NTASKS_PER_NODE)"
        )
    nodes = world_size // local
    return replace(
        spec,
        partition="node",
        nodes=nodes,
        canonical_nodes=cfg.canonical_nodes or nodes,
        node_window=cfg.node_window,
        shard_pages=shard_pages if cfg.node_window else (),
    )


class SegmentLike(Protocol):
    """What :func:`node_resumed_order` reads of an :class:`~.elastic.Segment`."""

    @property
    def world_size(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def drop_last(self) -> bool: ...
    @property
    def batches(self) -> int: ...
    @property
    def nodes(self) -> int: ...


def _pools(index: PageIndex, spec: OrderSpec, epoch: int, consumed: np.ndarray) -> list[np.ndarray]:
    """Each node's unconsumed samples, in the node's sequence order (the same for every
    rank of a world: computed once a world)."""
    pools = []
    for node in range(spec.nodes):
        mine = node_index(index, spec, node)
        local = _local_spec(spec, node)
        if spec.node_window:
            sequence = node_stream(mine, local, epoch)
        else:
            sequence = read_order(mine, local, epoch, 0, mine.num_samples, None)
        pools.append(sequence[~consumed[sequence]])
    return pools


def _pool_order(pools: list[np.ndarray], spec: OrderSpec) -> np.ndarray:
    """This rank's ids of the ``pools`` (:func:`_pools`): its node's, dealt to the node's
    ranks in equal slices (equal across nodes)."""
    node = _nodes(spec)[2]
    local = _local_spec(spec, node)
    lengths = [local.share(len(pool))[1] for pool in pools]
    length = min(lengths) if spec.drop_last else max(lengths)
    pool = pools[node]
    start = local.share(len(pool))[0]
    if length and not len(pool):
        raise ValueError(f"node {node} has no samples left for the {length} each rank must read")
    if spec.node_window:
        return _dealt(pool, local.rank, local.world_size, length)
    return pool[(start + np.arange(length, dtype=np.int64)) % max(1, len(pool))]


def node_resumed_order(
    index: PageIndex, spec: OrderSpec, epoch: int, history: Sequence[SegmentLike]
) -> np.ndarray:
    """This rank's ids in ``epoch`` after the worlds of ``history`` (see the module
    docstring); the epoch's own order without history.

    Raises:
        ValueError: a segment claims more batches than its ranks had.
    """
    if not history:
        return node_order(index, spec, epoch)
    consumed: np.ndarray | None = None
    size = int(index.samples.max(initial=-1)) + 1
    for number, seg in enumerate(history):
        world = replace(
            spec,
            rank=0,
            world_size=seg.world_size,
            batch_size=seg.batch_size,
            drop_last=seg.drop_last,
            nodes=seg.nodes,
        )
        now = np.zeros(size, dtype=bool) if consumed is None else consumed.copy()
        pools = None if consumed is None else _pools(index, world, epoch, consumed)
        for rank in range(seg.world_size):
            ranked = replace(world, rank=rank)
            order = (
                node_order(index, ranked, epoch) if pools is None else _pool_order(pools, ranked)
            )
            if seg.batches * seg.batch_size > len(order) + (
                0 if seg.drop_last else seg.batch_size - 1
            ):
                raise ValueError(
                    f"resume segment {number} ({seg.world_size} ranks on {seg.nodes} nodes, batch "
                    f"{seg.batch_size}) says each rank consumed {seg.batches} batches, more than "
                    f"it had: a state from another file or selection?"
                )
            now[order[: seg.batches * seg.batch_size]] = True
        consumed = now
    assert consumed is not None
    return _pool_order(_pools(index, spec, epoch, consumed), spec)
