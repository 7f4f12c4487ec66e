"""Upstream FFCV's pipeline parts, adapted: buffers allocated once, errors raised, no hang.

Composed from upstream's ``Graph``, ``EpochIterator`` and ``Compiler``;
upstream's ``Loader.__init__`` is not used (it builds slow per-sample dicts and
rejects a custom order), so :class:`LoaderShim` holds the attributes the epoch
iterator reads from its loader.

**Reused buffers.** Batches live in ``batches_ahead + 3`` reused buffer slots,
so a consumer may hold the batch it is working on plus one more (Lightning
prefetches one when a loader has no length) while the next ones are prepared; a
third batch kept beyond that may be overwritten. The slots are allocated once
per loader and the slot sequence runs on across epochs (upstream allocates a
fresh set every epoch: with two sets alive at an epoch boundary and the freed
one kept by the C heap, a rank's memory grows by about one set).
"""

from __future__ import annotations

from dataclasses import dataclass
from queue import Queue
from typing import Any

import numpy as np
import torch
from ffcv.loader.epoch_iterator import EpochIterator
from ffcv.memory_managers.os_cache import OSCacheContext
from ffcv.pipeline import PipelineSpec
from ffcv.pipeline.compiler import Compiler
from ffcv.pipeline.graph import Graph

from ..format.reader import PairReader
from .memory import PairOSCacheManager, PairProcessCacheManager
from .order import PairTraversalOrder
from .prefetch import Prefetcher, page_schedule

__all__ = ["BufferGraph", "EpochThread", "LoaderError", "LoaderShim", "build_graph"]


class LoaderError(RuntimeError):
    """The loading thread failed; the cause is chained."""


class BufferGraph(Graph):
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
        self.owner: EpochThread | None = None
        self.next_slot = self.start_slot = 0

    def allocate_memory(self, batch_size: int, batches_ahead: int) -> Any:
        if self.buffers is None or (self.owner is not None and not self.owner.finished):
            self.buffers = super().allocate_memory(batch_size, batches_ahead)
            self.next_slot = 0
        self.start_slot = self.next_slot
        return self.buffers


class EpochThread(EpochIterator):
    """Upstream's epoch thread with a shorter queue (so the consumer may hold two
    batches), pipeline errors raised in the consumer instead of a hang, and the
    buffer slots continuing where the previous epoch stopped.

    With ``prefetch`` > 0 and the OS cache, a :class:`~.prefetch.Prefetcher`
    requests each page ``prefetch`` batches before the batch that first reads it.
    """

    def __init__(
        self,
        engine: LoaderShim,
        order: np.ndarray,
        queue_size: int,
        prefetch: int = 0,
        max_in_flight: int = 64,
    ):
        self.error: BaseException | None = None
        self.finished = False
        self._deferred = True
        self.prefetcher: Prefetcher | None = None
        super().__init__(engine, order)
        context = self.memory_context
        if prefetch > 0 and isinstance(context, OSCacheContext) and context.mmap is not None:
            reader = engine.reader
            columns = [reader.image_pointers(name) for name in reader.schema.IMAGE_FIELDS]
            schedule = page_schedule(order, engine.batch_size, columns, int(reader.page_shift))
            mapping = context.mmap
            self.prefetcher = Prefetcher(
                mapping.ctypes.data,
                mapping.size,
                int(reader.page_size),
                schedule,
                prefetch,
                max_in_flight,
            )
            self.prefetcher.start()
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

    def run_pipeline(self, b_ix, batch_indices, batch_slot, cuda_event):  # type: ignore[no-untyped-def]
        if self.prefetcher is not None:
            self.prefetcher.advance(b_ix)
        return super().run_pipeline(b_ix, batch_indices, batch_slot, cuda_event)

    def run(self) -> None:
        try:
            super().run()
        except BaseException as e:
            self.error = e
            self.output_queue.put(None)
        if self.prefetcher is not None:
            self.prefetcher.stop()
        graph = self.loader.graph
        if graph.owner is self:  # an abandoned epoch's late end must not move the slots
            graph.next_slot = self.current_batch_slot
        self.finished = True

    def close(self) -> None:
        """Stop the epoch (and its prefetch thread); safe to call more than once."""
        super().close()
        if getattr(self, "prefetcher", None) is not None:
            self.prefetcher.stop()

    def __next__(self):
        try:
            return super().__next__()
        except StopIteration:
            # The thread ends right after its last put: wait for it, so that the next
            # epoch finds it finished and reuses the buffers (see BufferGraph).
            self.join(timeout=10.0)
            if self.error is not None:
                raise LoaderError(f"loading failed: {self.error!r}") from self.error
            raise


@dataclass
class LoaderShim:
    """The attributes upstream's ``EpochIterator`` reads from its loader."""

    reader: PairReader
    batch_size: int
    batches_ahead: int
    num_workers: int
    memory_manager: PairOSCacheManager | PairProcessCacheManager
    traversal_order: PairTraversalOrder
    graph: BufferGraph
    code: Any = None


def build_graph(reader: PairReader, specs: dict[str, PipelineSpec]) -> tuple[BufferGraph, Any]:
    field_ix = {name: i for i, name in enumerate(reader.handlers)}
    # memory_read is None: our decoders read through the metadata pointers.
    graph = BufferGraph(specs, reader.handlers, field_ix, reader.metadata, None)
    # Our ops return thin Python wrappers around cached @njit kernels: keep FFCV
    # from wrapping them in a fresh njit, which would recompile on every loader.
    enabled = Compiler.is_enabled
    Compiler.set_enabled(False)
    try:
        _, code = graph.collect_requirements()
        return graph, graph.codegen_all(code)
    finally:
        Compiler.set_enabled(enabled)
