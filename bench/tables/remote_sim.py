"""The node cache over 8 to 64 simulated nodes: bytes each node downloads, its peak cache.

Part of ``python -m bench --remote`` (:mod:`bench.tables.remote_run` is the other part).
No files and no loading: every rank's epoch comes from the loader's own order functions
(:func:`~ffcv_pairs.load.node_order.rank_order`, as :mod:`bench.tables.node_order_sim`
uses them), each node's plan from the loader's planner
(:func:`~ffcv_pairs.load.cache_plan.plan_of` per rank, :func:`~.cache_plan.merge_plans`
over the node's ranks), and each eviction from :func:`~.cache_plan.choose_victims` with
:func:`~.cache_plan.next_uses` (Belady), as the node cache calls them. Mosaic Streaming's
order (``relaxed`` partition, ``py1e`` shuffle) comes from its own code in its venv
(:mod:`bench.extras.mosaic_order`); its cache evicts the least recently used shard, which
is simulated here with the same ``choose_victims`` fed each shard's last use instead of
its next one (Mosaic's cache code itself needs real downloads: :mod:`.remote_run`).

The cache model: a node's ranks run their batches in step; step ``s`` maps the shards
its ranks' batches read (pinned while mapped), and every one not cached is downloaded
then, evicting first if the limit needs it. Nothing is fetched ahead, so the peak is
what the limit forces, not what a fetch-ahead thread would add. The cache lives across
epochs; each epoch's evictions know only that epoch's plan, as the loader's do.

Run it (from the repository root)::

    .venv/bin/python -m bench --remote sim          # the simulation alone
    .venv/bin/python -m bench --remote sim --smoke  # 200k samples, 8 and 64 nodes
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.tables.node_order_sim import (
    Dataset,
    SimConfig,
    epoch_figures,
    make_dataset,
    mosaic_rank_seqs,
    over_epochs,
    rank_specs,
)
from ffcv_pairs.load.cache_plan import Plan, choose_victims, merge_plans, needed_bytes, next_uses
from ffcv_pairs.load.cache_plan import plan_of as cache_plan_of
from ffcv_pairs.load.node_order import rank_order

__all__ = [
    "LIMITS",
    "CacheSimConfig",
    "cache_epochs",
    "lru_epochs",
    "node_plans",
    "ours_epoch",
    "shard_bytes",
    "simulate_caches",
    "smoke_cache_sim",
]

log = logging.getLogger(__name__)

#: Cache limits as fractions of a node's share of the dataset; None: no limit.
LIMITS: tuple[float | None, ...] = (None, 1.0, 0.5)

#: A shard's bytes besides its samples, as the loader's remote reads see them (raw A and B
#: and a label): a header and 3 field descriptors, a metadata row a pair (read on opening,
#: for every shard), and 2 allocation-table rows a pair (fetched with the shard).
HEADER_BYTES, META_ROW, ALLOC_ROWS = 24 + 3 * 1041, 24, 48


def shard_bytes(sim: SimConfig, shard_sizes: np.ndarray) -> dict[str, np.ndarray]:
    """Per shard, in bytes: ``fetched`` (a download: its samples from its first page's
    start to its last sample's end, pages of ``page_samples`` samples padded to a power of
    two, and its allocation table), ``held`` (what the cache counts: that and its header
    and metadata, copied from its skeleton) and ``opening`` (its skeleton, read by every
    node: header and metadata)."""
    n = np.asarray(shard_sizes, dtype=np.int64)
    page = 1 << (sim.page_samples * sim.sample_bytes - 1).bit_length()
    full = (n - 1) // sim.page_samples  # pages before the last, which holds the rest
    span = full * page + (n - full * sim.page_samples) * sim.sample_bytes
    opening = HEADER_BYTES + META_ROW * n
    fetched = span + ALLOC_ROWS * n
    return {"fetched": fetched, "held": fetched + opening, "opening": opening}


def _default_sim() -> SimConfig:
    # 8 MiB pages of 80 samples of 100 KiB, shards of ~64 MB (~8 pages, Mosaic's and
    # LitData's usual shard size), 1M samples: a 100 GB dataset.
    return SimConfig(samples=1_000_000, shard_counts=(1562,), page_samples=80, epochs=3)


@dataclass(frozen=True)
class CacheSimConfig:
    """What the cache simulation runs.

    Attributes:
        sim: The orders' configuration (sizes, nodes, ranks, batch, window, epochs).
        limits: Cache limits as fractions of the node's share (None: unlimited).
        windows: Our quasi-random windows in pages, one set of rows each (the first is
            ``sim.window_pages``'s default, 32 pages of 8 MiB: 256 MiB).
        node_windows: Windows of ``node_window=True`` (one a node), in pages.
    """

    sim: SimConfig = field(default_factory=_default_sim)
    limits: tuple[float | None, ...] = LIMITS
    windows: tuple[int, ...] = (32, 4)
    node_windows: tuple[int, ...] = (32, 64, 128)


def smoke_cache_sim() -> CacheSimConfig:
    """Every path at small sizes (seconds): the figures mean little."""
    sim = SimConfig(samples=200_000, shard_counts=(400,), page_samples=80, nodes=(8, 64), epochs=2)
    return CacheSimConfig(sim=sim)


def node_plans(seqs: list[np.ndarray], offsets: np.ndarray, ranks: int, batch: int) -> list[Plan]:
    """Each node's plan from every rank's sample sequence (node-major ranks): each rank's
    sequence cut into batches of ``batch`` (a shorter last one kept), planned by the
    loader's :func:`~ffcv_pairs.load.cache_plan.plan_of`, merged over the node's ranks."""
    plans = []
    for p in range(len(seqs) // ranks):
        own = []
        for seq in seqs[p * ranks : (p + 1) * ranks]:
            cuts = np.arange(batch, len(seq), batch)
            own.append(cache_plan_of(np.split(np.asarray(seq, np.int64), cuts), offsets))
        plans.append(merge_plans(own))
    return plans


def cache_epochs(
    plans: list[Plan],
    sizes: np.ndarray,
    limit: int | None,
    policy: str = "belady",
    fetched: np.ndarray | None = None,
) -> list[dict[str, int]]:
    """One node's cache over its epochs' plans (see the module for the model): per epoch,
    ``downloaded`` bytes, ``peak`` bytes cached and ``fetches`` (downloads).

    Args:
        plans: The node's plan of each epoch, in order.
        sizes: Bytes each shard takes in the cache.
        limit: The cache limit in bytes; None: never evict.
        fetched: Bytes each shard's download reads (None: ``sizes``).
        policy: ``"belady"`` (furthest next use in this epoch's plan first, the loader's
            rule) or ``"lru"`` (least recently used first, Mosaic's rule).

    Raises:
        ValueError: an unknown policy, or a step whose own shards exceed ``limit``.
    """
    if policy not in ("belady", "lru"):
        raise ValueError(f"policy {policy!r} is not one of 'belady', 'lru'")
    sizes = np.asarray(sizes, dtype=np.int64)
    fetched = sizes if fetched is None else np.asarray(fetched, dtype=np.int64)
    cached: dict[int, int] = {}
    last = np.zeros(len(sizes), dtype=np.int64)
    used = clock = 0
    out = []
    for plan in plans:
        down = fetches = 0
        peak = used
        for s in range(plan.steps):
            want = plan.at(s)
            clock += 1
            missing = [k for k in want.tolist() if k not in cached]
            if missing and limit is not None:
                uses = next_uses(plan, s, len(sizes)) if policy == "belady" else clock - last
            for k in missing:
                if limit is not None:
                    victims = choose_victims(
                        cached, want.tolist(), limit - used, int(sizes[k]), uses
                    )
                    if victims is None:
                        raise ValueError(
                            f"limit {limit} bytes cannot hold step {s}'s shards {want.tolist()}"
                        )
                    for j in victims:
                        used -= cached.pop(j)
                cached[k] = int(sizes[k])
                used += cached[k]
                down += int(fetched[k])
                fetches += 1
                peak = max(peak, used)
            last[want] = clock
        out.append({"downloaded": down, "peak": peak, "fetches": fetches})
    return out


def ours_epoch(
    cfg: SimConfig, data: Dataset, nodes: int, partition: str, epoch: int
) -> list[np.ndarray]:
    """Every rank's sample sequence of ``epoch`` (node-major ranks), from the loader's
    :func:`~ffcv_pairs.load.node_order.rank_order`, quasi-random, ``drop_last``."""
    firsts = np.concatenate([[0], np.cumsum(-(-data.shard_sizes // cfg.page_samples))])[:-1]
    specs = rank_specs(cfg, nodes, partition, tuple(int(p) for p in firsts))
    return [rank_order(data.index, s, epoch) for s in specs]


def lru_epochs(
    per_epoch: list[list[np.ndarray]], offsets: np.ndarray, sizes: np.ndarray, limit: int | None
) -> list[dict[str, int]]:
    """One node's epochs under Mosaic's rule, sample by sample: the node's ranks read
    their sequences (``per_epoch[e][r]``) in turn, one sample each; a shard not cached is
    downloaded when a sample of it is read, and the least recently read shards go first
    when the limit needs room (only the shard being read is held). The cache lives across
    epochs. Per epoch: ``downloaded`` bytes, ``peak`` bytes cached, ``fetches``.

    Raises:
        ValueError: a shard larger than ``limit``.
    """
    cache: OrderedDict[int, int] = OrderedDict()
    used, out = 0, []
    for seqs in per_epoch:
        width = max(len(q) for q in seqs)
        grid = np.full((width, len(seqs)), -1, dtype=np.int64)
        for r, q in enumerate(seqs):
            grid[: len(q), r] = q
        ids = grid.reshape(-1)
        shards = np.searchsorted(offsets, ids[ids >= 0], side="right") - 1
        runs = shards[np.concatenate([[True], shards[1:] != shards[:-1]])].tolist()
        down = fetches = 0
        peak = used
        for k in runs:
            if k in cache:
                cache.move_to_end(k)
                continue
            size = int(sizes[k])
            if limit is not None and size > limit:
                raise ValueError(f"limit {limit} bytes is below shard {k}'s {size} bytes")
            while limit is not None and used + size > limit:
                used -= cache.popitem(last=False)[1]
            cache[k] = size
            used += size
            down += size
            fetches += 1
            peak = max(peak, used)
        out.append({"downloaded": down, "peak": peak, "fetches": fetches})
    return out


def _figures(
    cfg: CacheSimConfig, per_epoch: list[list[np.ndarray]], data: Dataset, lru: bool
) -> dict:
    """The cache rows (one per limit) and the shuffle figures of one order: ours (Belady
    by steps, refused below what two steps need, as the loader refuses) or Mosaic's
    (``lru``: least recently used, sample by sample)."""
    sim = cfg.sim
    ranks = sim.ranks_per_node
    nodes = len(per_epoch[0]) // ranks
    sizes = data.shard_sizes * sim.sample_bytes  # Mosaic's shards: the samples
    ours = shard_bytes(sim, data.shard_sizes)
    offsets = np.concatenate([[0], np.cumsum(data.shard_sizes)]).astype(np.int64)
    share = sim.samples * sim.sample_bytes / nodes
    quality = over_epochs(
        [epoch_figures(s, data, ranks, sim.batch_size) for s in per_epoch], data, nodes
    )
    plans = [] if lru else [node_plans(s, offsets, ranks, sim.batch_size) for s in per_epoch]
    need = max((needed_bytes(e[p], ours["held"]) for e in plans for p in range(nodes)), default=0)
    cache_rows = []
    for fraction in cfg.limits:
        limit = None if fraction is None else int(fraction * share)
        row: dict[str, Any] = {"limit": fraction, "needed": need / share if plans else None}
        if limit is not None and limit < need:
            cache_rows.append({**row, "refused": True})
            continue
        if lru:
            mine = [[e[p * ranks : (p + 1) * ranks] for e in per_epoch] for p in range(nodes)]
            runs = [lru_epochs(m, offsets, sizes, limit) for m in mine]
        else:
            runs = [
                cache_epochs([e[p] for e in plans], ours["held"], limit, fetched=ours["fetched"])
                for p in range(nodes)
            ]
        first = [r[0]["downloaded"] / share for r in runs]
        later = [e["downloaded"] / share for r in runs for e in r[1:]]
        cache_rows.append({
            **row, "refused": False,
            "first_max": max(first),
            "later_mean": float(np.mean(later)) if later else None,
            "later_max": max(later) if later else None,
            "peak_max": max(e["peak"] for r in runs for e in r) / share,
        })  # fmt: skip
    # Opening a remote dataset reads each shard's skeleton on every node: its header and
    # metadata (the allocation table of raw fields comes with the shard).
    return {"cache": cache_rows, "opening": int(ours["opening"].sum()) / share, **quality}


def _orders(windows: tuple[int, ...], shared: tuple[int, ...]) -> list[tuple[str, int | None]]:
    """(order, window) pairs: ours in each partition and window, with one window a node in
    each of ``shared``, then Mosaic's."""
    ours = [(o, w) for w in windows for o in ("global", "node")]
    return ours + [("node_window", w) for w in shared] + [("mosaic", None)]


def simulate_caches(cfg: CacheSimConfig, work: Path, extras: bool) -> dict[str, Any]:
    """Rows ``{shards, nodes, order, cache: [...], ...shuffle figures}`` for every dataset,
    node count and order, and what ran Mosaic (or why it could not)."""
    from bench.extras.mosaic_order import mosaic_epochs, mosaic_python

    sim = cfg.sim
    python, why = mosaic_python() if extras else (None, "--no-extras")
    mosaic: dict[str, Any] = {"version": None, "why": why}
    rows = []
    for shards in sim.shard_counts:
        data = make_dataset(sim, shards)
        for nodes in sim.nodes:
            for order, window in _orders(cfg.windows, cfg.node_windows):
                t = time.perf_counter()
                if order == "mosaic":
                    if python is None:
                        continue
                    spec = {
                        "shard_sizes": data.shard_sizes.tolist(), "nodes": nodes,
                        "canonical_nodes": sim.canonical_nodes,
                        "ranks_per_node": sim.ranks_per_node,
                        "workers_per_rank": sim.workers_per_rank, "batch_size": sim.batch_size,
                        "seed": sim.seed, "epochs": list(range(sim.epochs)),
                        "out": str(work / "mosaic"),
                    }  # fmt: skip
                    try:
                        answer = mosaic_epochs(python, spec)
                    except RuntimeError as e:
                        mosaic.update(why=str(e))
                        python = None
                        continue
                    mosaic.update(version=answer["version"], block_size=answer["block_size"])
                    per_epoch = [mosaic_rank_seqs(np.load(f)) for f in answer["files"]]
                else:
                    ours = replace(sim, window_pages=window or sim.window_pages)
                    per_epoch = [ours_epoch(ours, data, nodes, order, e) for e in range(sim.epochs)]
                row = _figures(cfg, per_epoch, data, lru=order == "mosaic")
                rows.append({"shards": shards, "nodes": nodes, "order": order, "window": window,
                             **row})  # fmt: skip
                log.info("remote sim: %d shards, %d nodes, %s, window %s: %.1f s", shards, nodes,
                         order, window, time.perf_counter() - t)  # fmt: skip
    shutil.rmtree(work / "mosaic", ignore_errors=True)
    config = {**asdict(sim), "limits": list(cfg.limits), "windows": list(cfg.windows),
              "node_windows": list(cfg.node_windows)}  # fmt: skip
    return {"config": config, "rows": rows, "mosaic": mosaic}
