"""``python -m bench --node-order``: what the node-local order costs and saves, simulated.

No files: a :class:`~ffcv_pairs.load.index.PageIndex` of S shards (each starting on a new
page) stands for the dataset, and :func:`~ffcv_pairs.load.node_order.rank_order` gives
every rank's epoch, for ``partition="global"`` and ``"node"``, on 8 to 64 nodes of 8
ranks. Mosaic Streaming's partition with its ``py1e`` shuffle, on the same shard sizes,
comes from its own code in its own venv (:mod:`bench.extras.mosaic_order`).

Run it (from the repository root)::

    .venv/bin/python -m bench --node-order            # 3M samples, 30 and 300 shards (~1 min)
    .venv/bin/python -m bench --node-order --smoke    # 200k samples, 8 and 64 nodes, 2 epochs
    .venv/bin/python -m bench --node-order --no-extras  # ours alone

Each epoch gives, per node, the shards (and pages) its ranks read, and, per rank batch,
the classes and shards it spans (labels are shard-correlated: the file is written in
class order, the worst case for a shuffle that keeps to pages or shards); over the epochs,
how far each sample's place in the epoch moves. :mod:`bench.tables.node_order_report`
writes the report.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from ffcv_pairs.load.index import PageIndex
from ffcv_pairs.load.node_order import rank_order
from ffcv_pairs.load.order import OrderSpec

__all__ = [
    "Dataset",
    "SimConfig",
    "epoch_figures",
    "make_dataset",
    "mosaic_rank_seqs",
    "over_epochs",
    "simulate",
    "smoke_sim",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimConfig:
    """What the simulator runs.

    Attributes:
        samples: Samples in the dataset.
        shard_counts: One dataset per count, cut into shards of equal size.
        page_samples: Samples a page holds (a shard's last page holds the rest).
        nodes: Physical node counts.
        ranks_per_node: Ranks on a node.
        batch_size: Samples per rank batch.
        window_pages: The quasi-random window (256 MiB over 8 MiB pages: 32).
        canonical_nodes: Canonical buckets, ours and Mosaic's (a multiple of every count).
        epochs: Epochs 0 .. epochs - 1.
        sample_bytes: Bytes of a sample, for the byte columns only.
        classes: Labels, in file order: sample ``i`` has class ``i * classes // samples``.
        seed: The order's seed (Mosaic's too).
        workers_per_rank: Mosaic's dataloader workers per rank (its batches are a worker's).
    """

    samples: int = 3_000_000
    shard_counts: tuple[int, ...] = (30, 300)
    page_samples: int = 1024
    nodes: tuple[int, ...] = (8, 16, 32, 64)
    ranks_per_node: int = 8
    batch_size: int = 256
    window_pages: int = 32
    canonical_nodes: int = 64
    epochs: int = 4
    sample_bytes: int = 100 * 1024
    classes: int = 1000
    seed: int = 0
    workers_per_rank: int = 1

    def __post_init__(self) -> None:
        least = max(self.canonical_nodes * self.page_samples, *self.shard_counts)
        if self.samples < least:
            raise ValueError(
                f"samples {self.samples} is too few: at least {least} (a page for each of the "
                f"{self.canonical_nodes} canonical nodes, a sample for each shard)"
            )
        odd = [p for p in self.nodes if self.canonical_nodes % p]
        if odd:
            raise ValueError(
                f"canonical_nodes {self.canonical_nodes} is not a multiple of the node counts {odd}"
            )


def smoke_sim() -> SimConfig:
    """Every path at the smallest sizes (under a minute): the figures mean little."""
    return SimConfig(samples=200_000, nodes=(8, 64), epochs=2)


@dataclass(frozen=True)
class Dataset:
    """A simulated dataset: its page index and, per sample, its page, shard and class."""

    index: PageIndex
    shard_sizes: np.ndarray
    page_of: np.ndarray
    shard_of: np.ndarray
    class_of: np.ndarray


def make_dataset(cfg: SimConfig, shards: int) -> Dataset:
    """``cfg.samples`` ids in ``shards`` equal shards, each cut into pages of
    ``cfg.page_samples`` from its start."""
    cuts = np.arange(shards + 1, dtype=np.int64) * cfg.samples // shards
    sizes = np.diff(cuts)
    counts, shard_of_page = [], []
    for k, size in enumerate(sizes.tolist()):
        full, rest = divmod(size, cfg.page_samples)
        pages = [cfg.page_samples] * full + ([rest] if rest else [])
        counts += pages
        shard_of_page += [k] * len(pages)
    page_counts = np.asarray(counts, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(page_counts)]).astype(np.int64)
    index = PageIndex(
        pages=np.arange(len(counts), dtype=np.int64),
        starts=starts,
        samples=np.arange(cfg.samples, dtype=np.int64),
    )
    page_of = np.repeat(np.arange(len(counts), dtype=np.int64), page_counts)
    ids = np.arange(cfg.samples, dtype=np.int64)
    return Dataset(
        index=index,
        shard_sizes=sizes,
        page_of=page_of,
        shard_of=np.asarray(shard_of_page, dtype=np.int64)[page_of],
        class_of=ids * cfg.classes // cfg.samples,
    )


def _distinct_per_row(rows: np.ndarray) -> np.ndarray:
    """Distinct values in each row of a 2-d array."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    s = np.sort(rows, axis=1)
    return 1 + (np.diff(s, axis=1) != 0).sum(axis=1)


def epoch_figures(
    seqs: list[np.ndarray], data: Dataset, ranks_per_node: int, batch: int
) -> dict[str, Any]:
    """One epoch's figures from every rank's sequence of sample ids (node-major ranks).

    Returns ``shards`` and ``pages`` (per node, the sorted ids it reads), ``page_samples``
    (per node, samples on those pages), ``batch_classes`` and ``batch_shards`` (distinct
    per whole rank batch, all ranks), and ``position`` (per sample, its step over the
    epoch's steps, NaN if not read).
    """
    nodes = len(seqs) // ranks_per_node
    counts = data.index.counts()
    shards, pages, page_samples = [], [], []
    for p in range(nodes):
        ids = np.concatenate(seqs[p * ranks_per_node : (p + 1) * ranks_per_node])
        shards.append(np.unique(data.shard_of[ids]))
        touched = np.unique(data.page_of[ids])
        pages.append(touched)
        page_samples.append(int(counts[touched].sum()))
    classes, shard_span = [], []
    position = np.full(len(data.class_of), np.nan)
    for seq in seqs:
        whole = seq[: len(seq) // batch * batch].reshape(-1, batch)
        classes.append(_distinct_per_row(data.class_of[whole]))
        shard_span.append(_distinct_per_row(data.shard_of[whole]))
        steps = -(-len(seq) // batch)
        position[seq] = (np.arange(len(seq)) // batch) / max(1, steps)
    return {
        "shards": shards,
        "pages": pages,
        "page_samples": page_samples,
        "batch_classes": np.concatenate(classes),
        "batch_shards": np.concatenate(shard_span),
        "position": position,
    }


def over_epochs(epochs: list[dict[str, Any]], data: Dataset, nodes: int) -> dict[str, Any]:
    """The figures over epochs: need per epoch after the first, new downloads against
    the epoch before, what a node holds over all epochs, batch spans, position spread."""
    share = len(data.class_of) / nodes
    sizes = data.shard_sizes
    later = epochs[1:] or epochs
    need = [float(sizes[e["shards"][p]].sum()) / share for e in later for p in range(nodes)]
    need_pages = [e["page_samples"][p] / share for e in later for p in range(nodes)]
    new = [
        float(sizes[np.setdiff1d(e["shards"][p], before["shards"][p])].sum()) / share
        for before, e in pairwise(epochs)
        for p in range(nodes)
    ]
    held = [
        float(sizes[np.unique(np.concatenate([e["shards"][p] for e in epochs]))].sum()) / share
        for p in range(nodes)
    ]
    positions = np.stack([e["position"] for e in epochs])
    every = np.isfinite(positions).all(axis=0)
    spread = (
        float(np.sqrt(positions[:, every].var(axis=0, ddof=1).mean())) if len(epochs) > 1 else None
    )
    classes = np.concatenate([e["batch_classes"] for e in epochs])
    shard_span = np.concatenate([e["batch_shards"] for e in epochs])
    return {
        "shards_max": max(len(e["shards"][p]) for e in later for p in range(nodes)),
        "need_mean": float(np.mean(need)),
        "need_max": float(np.max(need)),
        "need_pages_max": float(np.max(need_pages)),
        "new_max": float(np.max(new)) if new else None,
        "held_max": float(np.max(held)),
        "batch_classes_mean": float(classes.mean()),
        "batch_classes_p5": float(np.percentile(classes, 5)),
        "batch_shards_mean": float(shard_span.mean()),
        "position_spread": spread,
        "read_fraction": float(every.mean()),
    }


def rank_specs(
    cfg: SimConfig, nodes: int, partition: str, shard_pages: tuple[int, ...] = ()
) -> list[OrderSpec]:
    """The loader's order spec of every rank (node-major) of ``nodes`` nodes: quasi-random,
    ``drop_last``, global or node-local, or (``"node_window"``) node-local with one window a
    node over the shards that start at ``shard_pages``."""
    node = partition in ("node", "node_window")
    shared = partition == "node_window"
    return [
        OrderSpec(
            "quasi_random",
            cfg.batch_size,
            cfg.seed,
            rank,
            nodes * cfg.ranks_per_node,
            True,
            cfg.window_pages,
            "node" if node else "global",
            nodes if node else 1,
            cfg.canonical_nodes if node else 1,
            shared,
            shard_pages if shared else (),
        )
        for rank in range(nodes * cfg.ranks_per_node)
    ]


def _ours(cfg: SimConfig, data: Dataset, nodes: int, partition: str) -> dict[str, Any]:
    specs = rank_specs(cfg, nodes, partition)
    epochs = [
        epoch_figures(
            [rank_order(data.index, s, epoch) for s in specs],
            data,
            cfg.ranks_per_node,
            cfg.batch_size,
        )
        for epoch in range(cfg.epochs)
    ]
    return over_epochs(epochs, data, nodes)


def mosaic_rank_seqs(ids: np.ndarray) -> list[np.ndarray]:
    """Each rank's sequence (node-major ranks) from Mosaic's (nodes, ranks, workers,
    batches, batch) array: its workers' batches taken in turn, as a ``DataLoader`` takes
    them, padding (-1) left out."""
    nodes, ranks = ids.shape[:2]
    seqs = []
    for p in range(nodes):
        for r in range(ranks):
            seq = ids[p, r].transpose(1, 0, 2).reshape(-1)
            seqs.append(seq[seq >= 0])
    return seqs


def _mosaic(
    cfg: SimConfig, data: Dataset, nodes: int, python: Path, work: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    from bench.extras.mosaic_order import mosaic_epochs

    spec = {
        "shard_sizes": data.shard_sizes.tolist(),
        "canonical_nodes": cfg.canonical_nodes,
        "nodes": nodes,
        "ranks_per_node": cfg.ranks_per_node,
        "workers_per_rank": cfg.workers_per_rank,
        "batch_size": cfg.batch_size,
        "seed": cfg.seed,
        "epochs": list(range(cfg.epochs)),
        "out": str(work),
    }
    answer = mosaic_epochs(python, spec)
    epochs = []
    for path in answer["files"]:
        seqs = mosaic_rank_seqs(np.load(path))
        epochs.append(epoch_figures(seqs, data, cfg.ranks_per_node, cfg.batch_size))
        Path(path).unlink()
    return over_epochs(epochs, data, nodes), answer


def simulate(cfg: SimConfig, work: Path, extras: bool) -> dict[str, Any]:
    """Rows ``{shards, nodes, order, ...figures}`` for every dataset, node count and order,
    and what ran Mosaic (or why it could not)."""
    mosaic: dict[str, Any] = {"version": None, "why": "--no-extras"}
    python = None
    if extras:
        from bench.core.settings import BENCH_DIR
        from bench.extras.mosaic_order import mosaic_python

        python, why = mosaic_python()
        shown = python and (
            python.relative_to(BENCH_DIR.parent)
            if python.is_relative_to(BENCH_DIR.parent)
            else python
        )
        mosaic = {"version": None, "why": why, "python": str(shown) if shown else None}
    rows = []
    for shards in cfg.shard_counts:
        data = make_dataset(cfg, shards)
        for nodes in cfg.nodes:
            for order in ("global", "node", "mosaic"):
                if order == "mosaic" and python is None:
                    continue
                t = time.perf_counter()
                if order == "mosaic" and python is not None:
                    try:
                        row, answer = _mosaic(cfg, data, nodes, python, work / "mosaic")
                    except RuntimeError as e:
                        mosaic.update(why=str(e))
                        python = None
                        continue
                    mosaic.update(version=answer["version"], block_size=answer["block_size"])
                else:
                    row = _ours(cfg, data, nodes, order)
                rows.append({"shards": shards, "nodes": nodes, "order": order, **row})
                log.info("node-order: %d shards, %d nodes, %s: %.1f s, %s", shards, nodes, order,
                         time.perf_counter() - t, row)  # fmt: skip
    shutil.rmtree(work / "mosaic", ignore_errors=True)
    return {"config": asdict(cfg), "rows": rows, "mosaic": mosaic}
