"""The loader: distributed quasi-random FFCV streaming of ``(A, B, label)`` batches.

Example::

    from ffcv_pairs import make_loader
    loader = make_loader("out/train.beton", batch_size=256)   # DDP-aware
    for epoch in range(10):
        loader.set_epoch(epoch)
        for a, b, label in loader:   # uint8 (B,C,H,W), uint8, int64 (B,)
            ...

Composed from upstream FFCV parts (``Graph``, ``EpochIterator``, ``Compiler``)
with this project's reader, memory manager, traversal order and ops; upstream's
``Loader.__init__`` is not used, because it builds the slow per-sample dicts and
rejects a custom order.

**Reused buffers.** Batches live in ``batches_ahead + 3`` reused buffer slots,
so a consumer may hold the batch it is working on plus one more (Lightning
prefetches one when a loader has no length) while the next ones are prepared; a third batch kept
beyond that may be overwritten. Clone what you need to keep longer. The slots are
allocated once per loader and the slot sequence runs on across epochs (upstream
allocates a fresh set every epoch: with two sets alive at an epoch boundary and
the freed one kept by the C heap, a rank's memory grows by about one set).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from queue import Queue
from typing import Any

import numpy as np
import torch
from ffcv.loader.epoch_iterator import EpochIterator
from ffcv.pipeline import PipelineSpec
from ffcv.pipeline.compiler import Compiler
from ffcv.pipeline.graph import Graph
from ffcv.pipeline.operation import Operation
from ffcv.transforms import ToDevice, ToTensor

from .budget import check_budget, estimate_memory
from .decoders import LabelDecoder, PairDecoder, TakeField
from .devices import resolve_device
from .integrity import open_beton
from .memory import PageIndex, PairOSCacheManager, PairProcessCacheManager
from .order import ORDERS, OrderKind, OrderSpec, PairTraversalOrder
from .reader import PairReader
from .schema import PairSchema

__all__ = ["LoaderConfig", "LoaderError", "PairLoader", "make_loader"]

log = logging.getLogger(__name__)

DEFAULT_WINDOW_BYTES = 256 << 20


class LoaderError(RuntimeError):
    """The loading thread failed; the cause is chained."""


@dataclass(frozen=True)
class LoaderConfig:
    """Everything :class:`PairLoader` needs besides the file. See :func:`make_loader`."""

    batch_size: int
    order: OrderKind = "quasi_random"
    os_cache: bool = True
    distributed: bool | None = None
    seed: int = 0
    drop_last: bool = True
    augment: Any = None  # PairAugment | None; typed loosely to avoid an import cycle
    device: str | None = None
    num_threads: int | None = None
    batches_ahead: int = 2
    window_bytes: int = DEFAULT_WINDOW_BYTES
    rank: int | None = None
    world_size: int | None = None
    indices: np.ndarray | None = field(default=None, compare=False)
    verify: bool = False
    max_ram_gb: float | None = None

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order {self.order!r} is not supported; must be one of {ORDERS}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.batches_ahead < 1:
            raise ValueError(f"batches_ahead must be at least 1, got {self.batches_ahead}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {self.num_threads}")
        if self.window_bytes < 1:
            raise ValueError(f"window_bytes must be positive, got {self.window_bytes}")


def _resolve_world(cfg: LoaderConfig) -> tuple[int, int]:
    if cfg.rank is not None or cfg.world_size is not None:
        if cfg.rank is None or cfg.world_size is None:
            raise ValueError("pass both rank and world_size, or neither")
        return cfg.rank, cfg.world_size
    dist = torch.distributed
    initialised = dist.is_available() and dist.is_initialized()
    if cfg.distributed and not initialised:
        raise ValueError(
            "distributed=True needs an initialised torch.distributed process group "
            "(or pass rank= and world_size=)"
        )
    if (cfg.distributed is None and initialised) or cfg.distributed:
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def local_ranks(world_size: int) -> int:
    """Ranks on this node: ``LOCAL_WORLD_SIZE`` (torchrun), ``SLURM_NTASKS_PER_NODE``, or
    the whole world (one node)."""
    local = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("SLURM_NTASKS_PER_NODE")
    return max(1, int(local) if local else world_size)


def default_num_threads(world_size: int) -> int:
    """The node's cores split across its local ranks."""
    return max(1, len(os.sched_getaffinity(0)) // local_ranks(world_size))


def _resolve_device(device: str | None) -> torch.device:
    return resolve_device(device)


class _PairGraph(Graph):
    """Upstream's pipeline graph, with its batch buffers allocated once per loader.

    :meth:`allocate_memory` (called by every epoch's iterator) hands out the same
    buffers again, unless the iterator that last used them is still running (an
    epoch abandoned half way): then it allocates a fresh set, as upstream does.
    ``start_slot`` is where the new epoch starts writing: on reused buffers, where
    the last epoch stopped (``next_slot``, kept by the iterator that owns them), so
    batches the consumer still holds are not overwritten.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.buffers: Any = None
        self.owner: _PairEpochIterator | None = None
        self.next_slot = self.start_slot = 0

    def allocate_memory(self, batch_size: int, batches_ahead: int) -> Any:
        if self.buffers is None or (self.owner is not None and not self.owner.finished):
            self.buffers = super().allocate_memory(batch_size, batches_ahead)
            self.next_slot = 0
        self.start_slot = self.next_slot
        return self.buffers


class _PairEpochIterator(EpochIterator):
    """Upstream's epoch thread with a shorter queue (so the consumer may hold two
    batches), pipeline errors raised in the consumer instead of a hang, and the
    buffer slots continuing where the previous epoch stopped."""

    def __init__(self, engine: _Engine, order: np.ndarray, queue_size: int):
        self.error: BaseException | None = None
        self.finished = False
        self._deferred = True
        super().__init__(engine, order)
        self.output_queue: Queue[Any] = Queue(queue_size)
        self._deferred = False
        self.current_batch_slot = engine.graph.start_slot
        if torch.cuda.is_available():  # the last epoch's device buffers may still be read
            torch.cuda.current_stream().synchronize()
        engine.graph.owner = self
        self.start()

    def start(self) -> None:
        if not self._deferred:
            super().start()

    def run(self) -> None:
        try:
            super().run()
        except BaseException as e:
            self.error = e
            self.output_queue.put(None)
        graph = self.loader.graph
        if graph.owner is self:  # an abandoned epoch's late end must not move the slots
            graph.next_slot = self.current_batch_slot
        self.finished = True

    def __next__(self):
        try:
            return super().__next__()
        except StopIteration:
            # The thread ends right after its last put: wait for it, so that the next
            # epoch finds it finished and reuses the buffers (see _PairGraph).
            self.join(timeout=10.0)
            if self.error is not None:
                raise LoaderError(f"loading failed: {self.error!r}") from self.error
            raise


@dataclass
class _Engine:
    """The attributes upstream's ``EpochIterator`` reads from its loader."""

    reader: PairReader
    batch_size: int
    batches_ahead: int
    num_workers: int
    memory_manager: PairOSCacheManager | PairProcessCacheManager
    traversal_order: PairTraversalOrder
    graph: _PairGraph
    code: Any = None


def _build_graph(reader: PairReader, specs: dict[str, PipelineSpec]) -> tuple[_PairGraph, Any]:
    field_ix = {name: i for i, name in enumerate(reader.handlers)}
    # memory_read is None: our decoders read through the metadata pointers.
    graph = _PairGraph(specs, reader.handlers, field_ix, reader.metadata, None)
    # Our ops return thin Python wrappers around cached @njit kernels: keep FFCV
    # from wrapping them in a fresh njit, which would recompile on every loader.
    enabled = Compiler.is_enabled
    Compiler.set_enabled(False)
    try:
        _, code = graph.collect_requirements()
        return graph, graph.codegen_all(code)
    finally:
        Compiler.set_enabled(enabled)


class PairLoader:
    """Streams ``(A, B, label)`` batches from a pair `.beton`. Build it with :func:`make_loader`.

    Attributes:
        schema: The file's :class:`~ffcv_pairs.schema.PairSchema`.
        rank, world_size: This process's place in the (possibly simulated) job.
        num_threads: JIT threads used by the pipeline.
    """

    def __init__(self, path: str | os.PathLike[str], config: LoaderConfig):
        self.config = cfg = config
        self.reader = open_beton(path, full_check=cfg.verify)
        self.path = self.reader.path
        self.schema: PairSchema = self.reader.schema
        self.rank, self.world_size = _resolve_world(cfg)
        self.num_threads = cfg.num_threads or default_num_threads(self.world_size)
        self.device = _resolve_device(cfg.device)
        self.index = PageIndex.build(self.reader, cfg.indices)
        window = max(1, cfg.window_bytes // int(self.reader.page_size))
        self.spec = OrderSpec(
            cfg.order, cfg.batch_size, cfg.seed, self.rank, self.world_size, cfg.drop_last, window
        )
        share = self.spec.num_samples(self.index.num_samples)
        if cfg.drop_last and share == 0:
            each = self.index.num_samples // self.world_size
            raise ValueError(
                f"{self.path}: batch_size {cfg.batch_size} is larger than this rank's share of "
                f"{each} samples ({self.index.num_samples} samples over world_size "
                f"{self.world_size}); use a smaller batch_size or drop_last=False"
            )
        self._clock = np.zeros(2, dtype=np.int64)  # [seed, epoch], read by augment kernels
        self._clock[0] = cfg.seed
        memory = (PairOSCacheManager if cfg.os_cache else PairProcessCacheManager)(self.reader)
        graph, code = _build_graph(self.reader, self._pipelines())
        self._engine = _Engine(
            self.reader,
            cfg.batch_size,
            cfg.batches_ahead + 1,
            self.num_threads,
            memory,
            PairTraversalOrder(self.index, self.spec),
            graph,
            code,
        )
        self.memory_estimate = estimate_memory(self, local_ranks(self.world_size))
        check_budget(self.memory_estimate, cfg.max_ram_gb)
        self._next_epoch = 0
        self._resume: tuple[int, int] | None = None
        self._progress: tuple[int, int] | None = None  # (epoch, batches) while iterating
        self._active: _PairEpochIterator | None = None

    # -- pipelines ---------------------------------------------------------------------
    def _pipelines(self) -> dict[str, PipelineSpec]:
        """A: decoder (both images) -> take A -> ...; B: the same decoder -> take B -> ..."""
        aug = self.config.augment
        to_device: list[Operation] = []
        if self.device.type != "cpu":
            to_device = [ToDevice(self.device, non_blocking=True)]
        b_ptrs = self.reader.image_pointers(PairSchema.IMAGE_FIELDS[1])
        decoder = PairDecoder(self.schema, b_ptrs, aug, self._clock, self.reader.page_shift)
        specs: dict[str, PipelineSpec] = {}
        for index, name in enumerate(PairSchema.IMAGE_FIELDS):
            plan = decoder.plans[index]
            ops = [
                TakeField(index, plan.out_shape, plan.spec.np_dtype),
                *(aug.cpu_ops(name, self.schema, self._clock) if aug else []),
                ToTensor(),
                *to_device,
                *(aug.device_ops(name, self.schema) if aug else []),
            ]
            if index == 0:
                specs[name] = PipelineSpec(name, decoder=decoder, transforms=ops)
            else:
                specs[name] = PipelineSpec(decoder, transforms=ops)
        specs[PairSchema.LABEL_FIELD] = PipelineSpec(
            PairSchema.LABEL_FIELD, decoder=LabelDecoder(), transforms=[ToTensor(), *to_device]
        )
        return specs

    # -- epochs ------------------------------------------------------------------------
    def __len__(self) -> int:
        n = self.spec.num_samples(self.index.num_samples)
        bs = self.config.batch_size
        return n // bs if self.config.drop_last else -(-n // bs)

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    @property
    def num_samples(self) -> int:
        """Samples this rank reads per epoch."""
        return self.spec.num_samples(self.index.num_samples)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run ``epoch`` (otherwise epochs count up from 0)."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self._next_epoch = int(epoch)

    @property
    def sampler(self) -> PairLoader:
        """Lightning calls ``dataloader.sampler.set_epoch(epoch)`` at each epoch start."""
        return self

    #: Like a ``DataLoader`` without one; Lightning looks for it.
    batch_sampler = None

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Sample ids this rank reads in ``epoch``, in order (before batching)."""
        order = self._engine.traversal_order.sample_order(epoch)
        return np.asarray(order)[: len(self) * self.batch_size]

    def close(self) -> None:
        """Stop the loading thread of an unfinished epoch."""
        if self._active is not None:
            self._active.close()
            self._active = None

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        """One epoch. Lazy: the epoch is fixed, and loading starts, at the first ``next()``.

        Lightning creates the first epoch's iterator before it calls ``set_epoch``
        (and calls ``iter()`` once more just to check the loader), so nothing may
        happen before the first batch is asked for.
        """
        self.close()
        epoch = self._next_epoch
        self._next_epoch = epoch + 1
        skip = 0
        if self._resume is not None and self._resume[0] == epoch:
            skip = self._resume[1]
        self._resume = None
        order = self.epoch_order(epoch)[skip * self.batch_size :]
        self._clock[1] = epoch
        self._progress = (epoch, skip)
        if len(order) == 0:
            self._progress = None
            return
        Compiler.set_num_threads(self.num_threads)
        self._active = it = _PairEpochIterator(self._engine, order, self.config.batches_ahead)
        done = skip
        try:
            for batch in it:
                done += 1
                self._progress = (epoch, done)
                yield batch
            self._progress = None
        finally:
            it.close()

    # -- resume ------------------------------------------------------------------------
    def _fingerprint(self) -> dict[str, Any]:
        s = self.spec
        return {
            "seed": s.seed,
            "world_size": s.world_size,
            "batch_size": s.batch_size,
            "order": s.kind,
            "drop_last": s.drop_last,
            "window_pages": s.window_pages,
            "num_samples": self.index.num_samples,
        }

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is: the epoch to run (or in progress) and batches consumed of it."""
        if self._progress is not None and self._progress[1] < len(self):
            epoch, done = self._progress
        else:
            epoch = self._progress[0] + 1 if self._progress else self._next_epoch
            done = 0
        return {"epoch": epoch, "batches_consumed": done, "rank": self.rank, **self._fingerprint()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the rest of that epoch comes out exactly as it would have.

        Mid-epoch state (``batches_consumed > 0``) must come from a job with the same
        seed, world size, batch size, order and file; a different world size is
        accepted only at an epoch boundary, where the next epoch is re-sharded.

        Raises:
            ValueError: naming the setting that differs.
        """
        done = int(state["batches_consumed"])
        if done:
            mine = self._fingerprint()
            diff = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
            if diff:
                what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in diff.items())
                raise ValueError(
                    f"cannot resume mid-epoch (epoch {state['epoch']}, batch {done}): {what}. "
                    f"Resume with the original settings, or from an end-of-epoch checkpoint"
                )
            if done > len(self):
                raise ValueError(f"batches_consumed {done} exceeds the epoch's {len(self)}")
        self._next_epoch = int(state["epoch"])
        self._resume = (self._next_epoch, done)

    def describe(self) -> str:
        return (
            f"{self.path.name}: {self.num_samples} samples on rank {self.rank}/{self.world_size}, "
            f"{len(self)} batches of {self.batch_size}, order={self.spec.kind} "
            f"(window {self.spec.window_pages} pages of {self.reader.page_size >> 10} KiB), "
            f"{self.num_threads} threads, device={self.device}"
        )

    def __repr__(self) -> str:
        return f"PairLoader({self.describe()})"

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def make_loader(
    path: str | os.PathLike[str],
    *,
    batch_size: int,
    order: OrderKind = "quasi_random",
    os_cache: bool = True,
    distributed: bool | None = None,
    seed: int = 0,
    drop_last: bool = True,
    augment: Any = None,
    device: str | None = None,
    num_threads: int | None = None,
    batches_ahead: int = 2,
    **more: Any,
) -> PairLoader:
    """A loader over the pair `.beton` at ``path``.

    Args:
        path: A file written by :func:`~ffcv_pairs.write_pairs` (or upstream FFCV
            with fields ``A``, ``B`` (NDArrayField) and ``label`` (IntField)).
        batch_size: Samples per batch on this rank.
        order: ``"quasi_random"`` (default), ``"random"`` or ``"sequential"``.
        os_cache: Read through the OS page cache (shared by all ranks on a node). False:
            upstream's process cache (private page buffers filled by reader threads).
        distributed: Shard across ranks. ``None``: if ``torch.distributed`` is initialised.
        seed: Order (and augmentation) seed, the same on every rank.
        drop_last: Equal, whole batches on every rank; without it nothing is dropped.
        augment: A :class:`~ffcv_pairs.augment.PairAugment`, or None.
        device: Where batches go; default ``"cuda"`` when available, else CPU.
        num_threads: JIT threads; default: the node's cores over its local ranks.
        batches_ahead: Batches prepared ahead of the consumer (buffer slots: this + 3).
        **more: Further :class:`LoaderConfig` fields: ``window_bytes`` (quasi-random
            window, default 256 MiB), ``rank`` and ``world_size`` (explicit sharding),
            ``indices`` (a subset), ``verify`` (check every checksum on open) and
            ``max_ram_gb`` (refuse a loader whose node-wide estimate exceeds it).

    Raises:
        BetonError: the file is not a readable pair `.beton`, or fails its checksums.
        MemoryBudgetError: the loaders of this node would not fit in RAM.
        ValueError: a bad argument, named with the value given.
    """
    unknown = set(more) - {f for f in LoaderConfig.__dataclass_fields__}
    if unknown:
        raise TypeError(f"make_loader() got unexpected keyword argument(s) {sorted(unknown)}")
    cfg = LoaderConfig(
        batch_size=batch_size,
        order=order,
        os_cache=os_cache,
        distributed=distributed,
        seed=seed,
        drop_last=drop_last,
        augment=augment,
        device=device,
        num_threads=num_threads,
        batches_ahead=batches_ahead,
        **more,
    )
    return PairLoader(path, cfg)
