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

A mid-epoch resume on the same world continues exactly; on another world it is refused
(resume at an epoch boundary, or use the global order): the rest of a node-local epoch
would have to be dealt across nodes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..kernels.hashing import key3
from .index import PageIndex
from .options import LoaderConfig
from .order import OrderSpec, epoch_order, read_order
from .world import local_ranks

__all__ = [
    "bucket_bounds",
    "loader_spec",
    "node_index",
    "node_order",
    "node_share",
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
    the longest (padded by wrapping)."""
    nodes, _, _ = _nodes(spec)
    lengths = [
        _local_spec(spec, p).share(node_index(index, spec, p).num_samples)[1] for p in range(nodes)
    ]
    return min(lengths) if spec.drop_last else max(lengths)


def node_order(index: PageIndex, spec: OrderSpec, epoch: int) -> np.ndarray:
    """The sample ids this rank reads in ``epoch`` under the node-local order."""
    _, _, node = _nodes(spec)
    mine = node_index(index, spec, node)
    local = _local_spec(spec, node)
    start, _ = local.share(mine.num_samples)
    length = node_share(index, spec)
    if length > mine.num_samples:
        raise ValueError(
            f"node {node} holds {mine.num_samples} samples, fewer than the {length} each of "
            f"its ranks must read to match the other nodes: use fewer canonical nodes"
        )
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
    cfg: LoaderConfig, rank: int, world_size: int, page_size: int, mixture: bool
) -> OrderSpec:
    """The loader's :class:`OrderSpec`: ``cfg``'s order on this world, its window in
    pages, and for ``partition="node"`` the nodes (``world_size`` over the ranks of this
    node, :func:`~.world.local_ranks`) and ``canonical_nodes`` (default: the nodes).

    Raises:
        ValueError: ``partition="node"`` with a mixture, or nodes and buckets that do
            not divide (named).
    """
    window = max(1, cfg.window_bytes // int(page_size))
    spec = OrderSpec(cfg.order, cfg.batch_size, cfg.seed, rank, world_size, cfg.drop_last, window)
    if cfg.partition == "global":
        return spec
    if mixture:
        raise ValueError(
            "partition='node' reads one dataset (a .beton or a manifest); a mixture's epochs "
            "change which samples there are, so its order stays global"
        )
    nodes = world_size // local_ranks(world_size)
    return replace(
        spec, partition="node", nodes=nodes, canonical_nodes=cfg.canonical_nodes or nodes
    )
