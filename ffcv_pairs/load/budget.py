"""How much RAM a loader will use, per rank and per node, checked before the first batch.

Per rank, what the loader adds to the process:

* **buffers**: every pipeline stage that allocates keeps ``batches_ahead + 3``
  slots of ``batch_size`` samples (see :mod:`ffcv_pairs.load.pipeline`); a file
  with JPEG fields adds one batch of decoded A and B (the decoder's scratch);
* **index**: the page index and one epoch's order (int64 per sample);
* **transients**: a device-stage cast/normalise on the CPU makes new tensors
  each batch, which live as long as the batch is queued or held.

On top comes the process itself (interpreter, torch, numba: measured, not
guessed) and, per node, ``local ranks x`` all that. The file's pages sit in the
OS page cache: shared by every rank on the node, reclaimable by the kernel and
counted separately; a lone process shows them in its RSS and USS, several
processes share them (PSS).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import psutil
import torch
from ffcv.pipeline.allocation_query import AllocationQuery

from ..augment.ops import NormalizeConvert, device_ops
from ..augment.placement import place_ops
from ..errors import FfcvPairsError
from ..format.joined import DatasetReader
from ..format.schema import PairSchema
from .index import PageIndex

__all__ = [
    "BudgetedLoader",
    "MemoryBudgetError",
    "MemoryEstimate",
    "check_budget",
    "estimate_memory",
    "mapped_bytes",
    "process_bytes",
]

log = logging.getLogger(__name__)
GB = 1 << 30


class BudgetedLoader(Protocol):
    """What :func:`estimate_memory` reads of a loader (a :class:`PairLoader`)."""

    config: Any
    graph: Any
    index: PageIndex
    schema: PairSchema
    device: torch.device
    path: Path
    reader: DatasetReader

    @property
    def num_samples(self) -> int: ...


class MemoryBudgetError(FfcvPairsError, ValueError):
    """The loader would not fit in the RAM available (or allowed)."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes, per rank unless stated."""

    process: int
    buffers: int
    index: int
    transients: int
    local_ranks: int
    page_cache: int
    buffer_formula: str

    @property
    def loader(self) -> int:
        """What the loader adds to one rank."""
        return self.buffers + self.index + self.transients

    @property
    def per_rank(self) -> int:
        return self.process + self.loader

    @property
    def per_node(self) -> int:
        """All local ranks, without the (shared, reclaimable) page cache."""
        return self.per_rank * self.local_ranks

    def describe(self) -> str:
        return (
            f"RAM estimate: {self.per_rank / GB:.2f} GB per rank (process "
            f"{self.process / GB:.2f} + buffers {self.buffers / GB:.2f} [{self.buffer_formula}] "
            f"+ index {self.index / GB:.3f} + transients {self.transients / GB:.3f}), "
            f"{self.per_node / GB:.2f} GB for {self.local_ranks} local rank(s), plus up to "
            f"{self.page_cache / GB:.2f} GB of shared page cache for the file"
        )


def _query_bytes(query: Any) -> tuple[int, int]:
    """(host bytes, device bytes) of one sample for an allocation query (or tuple of them)."""
    if query is None:
        return 0, 0
    if not isinstance(query, AllocationQuery):
        parts = [_query_bytes(q) for q in query]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    dtype = query.dtype
    itemsize = (
        torch.empty(0, dtype=dtype).element_size()
        if isinstance(dtype, torch.dtype)
        else np.dtype(dtype).itemsize
    )
    nbytes = int(np.prod(query.shape, dtype=np.int64)) * itemsize
    on_device = query.device is not None and torch.device(query.device).type != "cpu"
    return (0, nbytes) if on_device else (nbytes, 0)


def mapped_bytes(path: str | os.PathLike[str]) -> int:
    """Resident bytes of this process's mappings of ``path`` (page cache, shared)."""
    with open("/proc/self/smaps") as f:
        text = f.read()
    # A mapping's header line ends with its path; its "Rss:" line follows.
    header_end, total, at = f" {os.path.realpath(path)}\n", 0, 0
    while (at := text.find(header_end, at)) >= 0:
        rss = text.find("\nRss:", at)
        if rss < 0:
            break
        total += int(text[rss + 5 : text.index("kB", rss)]) * 1024
        at = rss
    return total


def process_bytes(path: str | os.PathLike[str]) -> int:
    """This process's own memory now: USS minus the pages of ``path`` it maps."""
    return int(psutil.Process().memory_full_info().uss) - mapped_bytes(path)


def estimate_memory(loader: BudgetedLoader, local_ranks: int) -> MemoryEstimate:
    """Estimate ``loader``'s memory before its first batch."""
    cfg = loader.config
    slots = cfg.batches_ahead + 3
    queries, _ = loader.graph.collect_requirements()
    per_sample = sum(_query_bytes(q)[0] for kind in queries.values() for q in kind.values())
    buffers = slots * cfg.batch_size * per_sample
    formula = f"{slots} slots x {cfg.batch_size} x {per_sample / 1024:.1f} KiB"
    if loader.schema.compressed:  # JpegPairDecoder's scratch: one batch, decoded
        buffers += cfg.batch_size * loader.schema.sample_bytes
        formula += f" + {cfg.batch_size} x {loader.schema.sample_bytes / 1024:.1f} KiB decoded"
    n = loader.index.num_samples
    index = 8 * (2 * n + len(loader.index.starts)) + 8 * 2 * loader.num_samples
    transients = 0
    aug = cfg.augment
    if aug is not None and loader.device.type == "cpu":
        placement = place_ops(aug, loader.schema, on_cpu=True)
        for name in loader.schema.IMAGE_FIELDS:
            ops = device_ops(aug, name, loader.schema, placement)
            if any(isinstance(op, NormalizeConvert) for op in ops):
                out = aug.resolved_out_dtype(loader.schema.spec(name).dtype)
                item = torch.empty(0, dtype=getattr(torch, out)).element_size()
                elems = cfg.batch_size * int(
                    np.prod(aug.output_shape(aug.field_axes(loader.schema)[name]))
                )
                # Device-stage outputs are new tensors: every queued and held batch keeps
                # one; the batch being made also has two float32 intermediates.
                transients += slots * elems * item + 2 * elems * 4
    return MemoryEstimate(
        process=process_bytes(loader.path),
        buffers=buffers,
        index=index,
        transients=transients,
        local_ranks=local_ranks,
        page_cache=loader.reader.file_size,
        buffer_formula=formula,
    )


def check_budget(estimate: MemoryEstimate, max_ram_gb: float | None) -> None:
    """Raise if the node cannot hold the loaders of all its local ranks.

    Raises:
        MemoryBudgetError: with what to change.
    """
    hint = (
        "lower batch_size or batches_ahead (each slot holds one batch), use a smaller "
        "crop, or run fewer ranks per node"
    )
    if max_ram_gb is not None and estimate.per_node > max_ram_gb * GB:
        raise MemoryBudgetError(f"{estimate.describe()}; exceeds max_ram_gb={max_ram_gb}: {hint}")
    available = psutil.virtual_memory().available
    need = estimate.loader * estimate.local_ranks
    if need > available:
        raise MemoryBudgetError(
            f"{estimate.describe()}; the loaders need {need / GB:.2f} GB more but only "
            f"{available / GB:.2f} GB is available: {hint}"
        )
    log.info(estimate.describe())
