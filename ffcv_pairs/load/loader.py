"""The loader: distributed quasi-random FFCV streaming of ``(A, B, label)`` batches.

Example::

    from ffcv_pairs import make_loader
    loader = make_loader("out/train.beton", batch_size=256)   # DDP-aware
    for epoch in range(10):
        loader.set_epoch(epoch)
        for a, b, label in loader:   # uint8 (B,C,H,W), uint8, int64 (B,)
            ...   # a file with extra fields: for a, b, label, *extras in loader

Built from this project's reader, page index, traversal order, memory manager,
decoders and augmentation ops, run by upstream's compiled pipeline in this
project's epoch thread (:mod:`~ffcv_pairs.load.pipeline`), and moved to a GPU by
:mod:`~ffcv_pairs.load.delivery`. What a caller may hold: on the CPU the current
batch and one more (the images are reused slots; labels and extras are always
fresh tensors); on a GPU any number.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from ffcv.pipeline.operation import Operation

from ..augment.config import PairAugment
from ..format.joined import dataset_stats
from ..format.schema import PairSchema
from .budget import check_budget, estimate_memory
from .delivery.engines import CopyEngine, CudaEngine
from .delivery.stage import DeviceStage
from .devices import resolve_device
from .elastic import EpochPosition, batches_in, resume_epoch, resumed_order
from .handout import Handout
from .index import PageIndex
from .memory import PairOSCacheManager, PairProcessCacheManager
from .mixing import EpochSamples, absolute_source, open_streams
from .node_order import loader_spec
from .options import DEFAULT_PREFETCH, DEFAULT_WINDOW_BYTES, BatchOp, LoaderConfig, make_loader_doc
from .order import OrderKind, PairTraversalOrder, Partition
from .pipeline import EpochThread, LoaderError, LoaderShim, build_graph
from .prefetch import prefetch_mode
from .residency import check_cache
from .resume import check_resume, resume_fingerprint
from .specs import pair_specs
from .truncation import FileWatch, forget_mappings, watch_mappings
from .world import default_num_threads, local_ranks, resolve_world

__all__ = [
    "DEFAULT_PREFETCH",
    "DEFAULT_WINDOW_BYTES",
    "LoaderConfig",
    "LoaderError",
    "PairLoader",
    "make_loader",
]

log = logging.getLogger(__name__)


class PairLoader:
    """Streams ``(A, B, label)`` batches from a pair `.beton`. Build it with :func:`make_loader`.

    Attributes:
        schema: The file's :class:`~ffcv_pairs.format.schema.PairSchema`.
        rank, world_size: This process's place in the (possibly simulated) job.
        num_threads: JIT threads used by the pipeline.

    A loader pickles (a torch ``DataLoader``'s spawned workers, Lightning's
    ``ddp_spawn``): the copy is rebuilt from the file and options and continues
    where this one stands (:meth:`__reduce__`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Sequence[Any],
        config: LoaderConfig,
        copy_engine: CopyEngine | None = None,
    ):
        """Args: ``copy_engine`` replaces the GPU's (tests pass the CPU simulation)."""
        self._made_with = (config, copy_engine)  # what a pickle rebuilds it from
        self.reader, self.streams, mixture = open_streams(path, config)
        self.path = self.reader.path
        self.schema: PairSchema = self.reader.schema
        self.config = cfg = config.for_file(self.schema)
        self.rank, self.world_size = resolve_world(cfg.rank, cfg.world_size, cfg.distributed)
        self.num_threads = cfg.num_threads or default_num_threads(local_ranks(self.world_size))
        self.device = resolve_device(cfg.device)
        if copy_engine is None and self.device.type == "cuda":
            copy_engine = CudaEngine(self.device)
        elif copy_engine is None and self.device.type != "cpu":
            raise ValueError(f"device={cfg.device!r}: batches go to the CPU or a CUDA GPU")
        #: Moves batches to the device; None on the CPU path, which touches no CUDA API.
        self.copy_engine = copy_engine
        self.index = PageIndex.build(self.reader, cfg.indices)
        #: Each epoch's index and the sample ids of its entries (a mixture's change).
        self.samples = EpochSamples(self.index, self.reader, mixture, cfg.seed)
        page_size = int(self.reader.page_size)
        shards = getattr(self.reader, "bases", None)  # a dataset of shards: where each starts
        firsts = () if shards is None else tuple(int(b) // page_size for b in shards)
        self.spec = loader_spec(
            cfg, self.rank, self.world_size, page_size, mixture is not None, firsts
        )
        share = self.num_samples
        if cfg.drop_last and share == 0:
            each = self.samples.num_samples // self.world_size
            chosen = " chosen by indices" if cfg.indices is not None else ""
            raise ValueError(
                f"{self.path}: batch_size {cfg.batch_size} is larger than this rank's share of "
                f"{each} samples ({self.samples.num_samples} samples{chosen} over world_size "
                f"{self.world_size}); use a smaller batch_size or drop_last=False"
            )
        self._clock = np.zeros(2, dtype=np.int64)  # [seed, epoch], read by augment kernels
        self._clock[0] = cfg.seed
        self._handout = Handout(self.schema, cfg, self._clock, copy=copy_engine is None)
        memory = (PairOSCacheManager if cfg.os_cache else PairProcessCacheManager)(self.reader)
        contrast = cfg.augment is not None and cfg.augment.contrast
        stats = dataset_stats(self.reader) if contrast else None
        specs, finishers = pair_specs(
            self.reader,
            cfg.augment,
            self._clock,
            stats,
            on_cpu=copy_engine is None,
            jpeg_downscale=cfg.jpeg_downscale,
            field_ops=cfg.field_ops,
        )
        self.graph, code = build_graph(self.reader, specs)
        slots = cfg.batches_ahead + 3
        stage = None if copy_engine is None else DeviceStage(copy_engine, slots, finishers)
        if stage is not None:
            self.graph.host_buffer = stage.host_buffer
        self._engine = LoaderShim(
            self.reader,
            cfg.batch_size,
            cfg.batches_ahead + 1,
            self.num_threads,
            memory,
            PairTraversalOrder(self.index, self.spec),
            self.graph,
            stage,
            code,
            FileWatch(self.reader.files, getattr(self.reader, "offsets", None)),
        )
        self.memory_estimate = estimate_memory(self, local_ranks(self.world_size))
        check_budget(self.memory_estimate, cfg.max_ram_gb)
        self._next_epoch = 0
        self._resume: EpochPosition | None = None  # loaded, not yet started
        self._progress: EpochPosition | None = None  # the epoch being read, or abandoned
        self._active: EpochThread | None = None
        #: Ids of the batch last handed out (on this rank), in batch order.
        self.last_batch_ids = np.zeros(0, dtype=np.int64)
        #: Called by :meth:`load_state_dict` on a mid-epoch state with the batches the
        #: state counted as done and the batches this loader counts as done (they
        #: differ when the world or batch size changed); PairDataModule uses it to
        #: keep Lightning's batch count in step.
        self.on_resume: Callable[[int, int], None] | None = None

    # -- epochs ------------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches this rank reads in a whole epoch (a resumed epoch reads its rest)."""
        return batches_in(self.num_samples, self.config.batch_size, self.config.drop_last)

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    @property
    def num_samples(self) -> int:
        """Samples this rank reads per epoch."""
        return self.samples.per_rank(self.spec)

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
        """Sample ids this rank reads in a whole ``epoch``, in order (before batching)."""
        return self.samples.ids(epoch, resumed_order(self.samples.index(epoch), self.spec, epoch))

    def close(self) -> None:
        """Stop the loading thread of an unfinished epoch (and wait for it)."""
        if self._active is not None:
            self._active.close()
            self._active = None

    def __del__(self) -> None:
        # try, not contextlib.suppress: at interpreter exit module globals may be None.
        try:
            self.close()
            forget_mappings(id(self))
            if self._engine.watch is not None:
                self._engine.watch.close()
        except Exception:  # a finaliser must not raise
            pass

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        """One epoch. Lazy: the epoch is fixed, and loading starts, at the first ``next()``.

        Lightning creates the first epoch's iterator before it calls ``set_epoch``
        (and calls ``iter()`` once more just to check the loader), so nothing may
        happen before the first batch is asked for. Starting an epoch closes the
        previous one: its iterator ends.
        """
        self.close()
        epoch = self._next_epoch
        self._next_epoch = epoch + 1
        state = self._resume
        if state is None or state.epoch != epoch:
            state = EpochPosition.start(self.samples.index(epoch), self.spec, epoch)
        self._resume = None
        bs = self.batch_size
        rest = self.samples.ids(epoch, state.order[state.now.batches * bs :])
        self._clock[1] = epoch
        self._progress = None if state.finished else state
        if state.finished:
            return
        cfg = self.config
        # At most two windows of pages requested and not yet read (matters for "random").
        in_flight = 2 * self.spec.window_pages
        mode = prefetch_mode(cfg.order, int(self.reader.file_size))
        self._active = it = EpochThread(
            self._engine, rest, cfg.batches_ahead, cfg.prefetch, in_flight, mode
        )
        mapped = self.reader.mapped_tables()
        mapped += [m for m in [getattr(it.memory_context, "mmap", None)] if m is not None]
        watch_mappings(id(self), self.path, mapped)
        try:
            for k, values in enumerate(it):  # image slots are reused: hold two batches
                self.last_batch_ids = rest[k * bs : (k + 1) * bs]
                batch = self._handout(values, self.last_batch_ids)
                state = state.advanced()
                self._progress = state
                yield batch
            if self._active is it:  # finished, not closed by a newer epoch
                self._progress = None
        finally:
            it.close()
            if self._active is it:
                self._active = None

    # -- resume ------------------------------------------------------------------------
    @functools.cached_property
    def _fingerprint(self) -> dict[str, Any]:
        """What a resume must match; made at the first state (it reads the file's tables)."""
        index = self.samples.index(0)
        return resume_fingerprint(self.reader, index, self.spec, self.samples.identity())

    def _position(self, state: EpochPosition) -> int:
        """Batches of ``state``'s epoch done, counted in this world's batches."""
        return len(self) - state.batches + state.now.batches

    def state_dict(self) -> dict[str, Any]:
        """Where this job is in its epoch; the same on every rank under DDP, so any one
        rank's state resumes every rank of a job of any world size.

        ``epoch``: the epoch in progress, or the next one; ``segments``: the stretches
        of it run so far, one per world (see :mod:`~ffcv_pairs.load.elastic`);
        ``batches_consumed``: of this rank's ``len()``, the batches done.
        """
        state = self._resume or self._progress
        fingerprint = {**self._fingerprint, "rank": self.rank}
        if state is None or state.finished:
            return {"epoch": self._next_epoch, "batches_consumed": 0, "segments": [], **fingerprint}
        return {
            "epoch": state.epoch,
            "batches_consumed": self._position(state),
            "segments": state.segments(),
            **fingerprint,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (any rank's, from a job of any world size).

        The rest of that epoch is every sample no rank had consumed, each once
        (apart from fewer than ``world_size x batch_size`` dropped with ``drop_last``),
        dealt to this job's ranks; augmentation is keyed by sample, so every byte is
        as an uninterrupted run's. On the same world and batch size the batches also
        come in the same order.

        Raises:
            ValueError: the file, indices, order, window or seed differ (named, with the
                file), or the state is malformed.
        """
        segments = check_resume(state, self._fingerprint, str(self.path))
        epoch = int(state["epoch"])  # checked: a non-negative integer
        self._next_epoch, self._progress, self._resume = epoch, None, None
        if segments:
            self._resume = resume_epoch(self.samples.index(epoch), self.spec, epoch, segments)
            if self.on_resume is not None:
                self.on_resume(int(state["batches_consumed"]), self._position(self._resume))

    # -- pickling ----------------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what rebuilds it (spawned workers, ``ddp_spawn``): the file's absolute
        path, the options it was made with, with this loader's rank and world size (a copy
        in a worker process reads this rank's share), and any ``copy_engine`` given; then
        its place (the next epoch, or :meth:`state_dict` in an epoch being read or loaded),
        ``last_batch_ids`` and ``on_resume``. The copy opens the file, loads its kernels and
        resolves its device again, as :func:`make_loader` would in that process; a file
        that changed in between is refused by the resume check, named."""
        config, copy_engine = self._made_with
        config = replace(config, rank=self.rank, world_size=self.world_size)
        state = self._resume or self._progress
        at_boundary = state is None or state.finished
        carried = {
            "place": (
                {"epoch": self._next_epoch, "batches_consumed": 0}
                if at_boundary
                else self.state_dict()
            ),
            "last_batch_ids": self.last_batch_ids,
            "on_resume": self.on_resume,
        }
        source = absolute_source(self.reader, self.streams)
        return (PairLoader, (source, config, copy_engine), carried)

    def __setstate__(self, carried: dict[str, Any]) -> None:
        self.load_state_dict(carried["place"])  # before the hook: nothing to align here
        self.last_batch_ids = carried["last_batch_ids"]
        self.on_resume = carried["on_resume"]

    def describe(self) -> str:
        return (
            f"{self.path.name}: {self.num_samples} samples on rank {self.rank}/{self.world_size}, "
            f"{len(self)} batches of {self.batch_size}, order={self.spec.kind} "
            f"(window {self.spec.window_pages} pages of {self.reader.page_size >> 10} KiB), "
            f"{self.num_threads} threads, device={self.device}"
        )

    def __repr__(self) -> str:
        return f"PairLoader({self.describe()})"


def make_loader(
    path: str | os.PathLike[str] | Sequence[Any],
    *,
    batch_size: int,
    order: OrderKind = "quasi_random",
    os_cache: bool = True,
    distributed: bool | None = None,
    seed: int = 0,
    drop_last: bool = True,
    augment: PairAugment | None = None,
    batch_ops: Sequence[BatchOp] | None = None,
    device: str | None = None,
    num_threads: int | None = None,
    batches_ahead: int = 2,
    prefetch: int = DEFAULT_PREFETCH,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
    rank: int | None = None,
    world_size: int | None = None,
    indices: npt.ArrayLike | None = None,
    verify: bool = False,
    dequantize: bool = True,
    jpeg_downscale: bool = True,
    max_ram_gb: float | None = None,
    partition: Partition = "global",
    canonical_nodes: int | None = None,
    node_window: bool = False,
    epoch_size: int | None = None,
    field_ops: Mapping[str, Sequence[Operation]] | None = None,
    cache_dir: str | None = None,
    cache_limit: int | str | None = None,
) -> PairLoader:
    # The signature repeats LoaderConfig's fields for editors and LightningCLI; a test
    # checks that names, types and defaults agree. The docstring is made from the fields.
    options = dict(locals())
    return check_cache(PairLoader(options.pop("path"), LoaderConfig(**options)))


make_loader.__doc__ = make_loader_doc()
