"""Upstream FFCV's pipeline parts, adapted: buffers allocated once, errors raised, no hang.

Composed from upstream's ``Graph`` and ``EpochIterator``;
upstream's ``Loader.__init__`` is not used (it builds slow per-sample dicts and
rejects a custom order), so :class:`LoaderShim` holds the attributes the epoch
iterator reads from its loader.

**Reused buffers.** Batches live in ``batches_ahead + 3`` reused buffer slots,
so a consumer may hold the batch it is working on plus one more (Lightning
prefetches one when a loader has no length) while the next ones are prepared; a
third batch kept beyond that may be overwritten. The slots are allocated once
per loader (upstream allocates a fresh set every epoch: with two sets alive at
an epoch boundary and the freed one kept by the C heap, a rank's memory grows
by about one set). The slot sequence runs on across epochs from the slot after
the last batch **handed out**, not the producer's next slot: an abandoned epoch
may have prepared batches nobody took, and skipping their slots would let the
next epoch run one slot further into the batches the consumer still holds.

**No stuck threads.** Closing an epoch (``break``, a new epoch, ``close()``)
stops its producer, which may be waiting on a full queue, even to put its
final end marker (upstream waits for that with no timeout), and waits for it
to stop, so its buffers are free for the next epoch and no thread is left.
A closed epoch's iterator ends; it never hands out a batch from reused slots.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from queue import Full, Queue
from typing import Any

import numpy as np
import torch
from ffcv.loader.epoch_iterator import EpochIterator
from ffcv.memory_managers.os_cache import OSCacheContext
from ffcv.pipeline import PipelineSpec
from ffcv.pipeline.graph import Graph

from ..format.reader import PairReader
from .memory import PairOSCacheManager, PairProcessCacheManager
from .order import PairTraversalOrder
from .prefetch import Prefetcher, SamplePrefetcher, page_schedule, sample_schedule

__all__ = ["BufferGraph", "EpochQueue", "EpochThread", "LoaderError", "LoaderShim", "build_graph"]

log = logging.getLogger(__name__)

#: How long closing an epoch waits for its producer to finish the batch in hand.
STOP_TIMEOUT_S = 120.0


class LoaderError(RuntimeError):
    """The loading thread failed; the cause is chained."""


class BufferGraph(Graph):
    """Upstream's pipeline graph, with its batch buffers allocated once per loader.

    :meth:`allocate_memory` (called by every epoch's iterator) hands out the same
    buffers again unless the producer that last used them is still running (it
    did not stop when closed): then it allocates a fresh set, as upstream does.
    ``buffer_sets`` counts the sets allocated. ``next_slot`` is the slot after the
    last batch handed to the consumer: where the next epoch starts writing.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.buffers: Any = None
        self.owner: EpochThread | None = None
        self.next_slot = 0
        self.buffer_sets = 0

    def allocate_memory(self, batch_size: int, batches_ahead: int) -> Any:
        if self.buffers is None or (self.owner is not None and self.owner.is_alive()):
            self.buffers = super().allocate_memory(batch_size, batches_ahead)
            self.buffer_sets += 1
            self.next_slot = 0
        return self.buffers

    def codegen_stage(self, stage, s_ix, op_to_node, code, already_defined):
        # Upstream wraps the functions of even-numbered stages in a fresh njit. Ours are
        # thin Python wrappers around cached @njit kernels (a fresh njit would recompile
        # them for every loader), so every stage is given an odd number: nothing is
        # wrapped, and upstream's process-wide Compiler switch is never touched, which
        # another thread building an upstream Loader may be reading.
        return super().codegen_stage(stage, 2 * s_ix + 1, op_to_node, code, already_defined)


class EpochQueue(Queue):
    """The epoch's output queue: a producer never waits on it once the epoch is closed.

    ``put`` waits for room, as usual, until ``stop`` is set: then a batch is refused
    (``Full``, on which upstream's producer returns) and the end marker ``None`` is
    dropped. ``get`` returns ``None`` (the end) once ``stop`` is set, so batches
    in slots the next epoch reuses are never handed out. The consumer's ``get``
    also records the slot of each batch it takes (``graph.next_slot``).
    """

    def __init__(self, maxsize: int, stop: threading.Event, graph: BufferGraph, slots: int):
        super().__init__(maxsize)
        self.stop, self.graph, self.slots = stop, graph, slots
        self.waiting = False  # a producer is blocked on a full queue (tests wait for it)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self.not_full:
            while self._qsize() >= self.maxsize and not self.stop.is_set():
                self.waiting = True
                self.not_full.wait()
                self.waiting = False
            if self.stop.is_set():
                if item is None:
                    return
                raise Full
            self._put(item)
            self.unfinished_tasks += 1
            self.not_empty.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self.not_empty:
            while not self._qsize() and not self.stop.is_set():
                self.not_empty.wait()
            if self.stop.is_set():
                return None
            item = self._get()
            self.not_full.notify()
        if item is not None:
            self.graph.next_slot = (item[0] + 1) % self.slots
        return item

    def wake(self) -> None:
        """Wake a producer or consumer waiting on the queue (after ``stop`` is set)."""
        with self.mutex:
            self.not_full.notify_all()
            self.not_empty.notify_all()


class EpochThread(EpochIterator):
    """Upstream's epoch thread with a shorter queue (so the consumer may hold two
    batches), pipeline errors raised in the consumer instead of a hang, buffer
    slots continuing after the last batch handed out, and a :meth:`close` that
    stops the producer and waits for it.

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
        mode: str = "pages",
    ):
        self.error: BaseException | None = None
        self._deferred = True
        self.prefetcher: Prefetcher | None = None
        super().__init__(engine, order)
        self._start_prefetch(engine, order, prefetch, max_in_flight, mode)
        slots = engine.batches_ahead + 2
        self.output_queue = EpochQueue(queue_size, self.terminate_event, engine.graph, slots)
        self._deferred = False
        self.current_batch_slot = engine.graph.next_slot
        if engine.device.type == "cuda":  # the last epoch's device buffers may still be read
            torch.cuda.current_stream(engine.device).synchronize()
        engine.graph.owner = self
        self.start()

    def _start_prefetch(
        self, engine: LoaderShim, order: np.ndarray, prefetch: int, max_in_flight: int, mode: str
    ) -> None:
        context = self.memory_context
        if prefetch <= 0 or not isinstance(context, OSCacheContext) or context.mmap is None:
            return
        reader = engine.reader
        fields = reader.schema.IMAGE_FIELDS
        columns = [reader.image_pointers(name) for name in fields]
        mapping = context.mmap
        if mode == "samples":  # each image's bytes, no fault readahead (see .prefetch)
            nbytes = [reader.schema.spec(name).nbytes for name in fields]
            self.prefetcher = SamplePrefetcher(
                mapping.ctypes.data,
                mapping.size,
                sample_schedule(order, engine.batch_size, columns, nbytes),
                prefetch,
                prefetch * engine.batch_size * len(columns),
            )
        else:
            self.prefetcher = Prefetcher(
                mapping.ctypes.data,
                mapping.size,
                int(reader.page_size),
                page_schedule(order, engine.batch_size, columns, int(reader.page_shift)),
                prefetch,
                max_in_flight,
            )
        self.prefetcher.start()

    def run_pipeline(self, b_ix, batch_indices, batch_slot, cuda_event):
        if self.prefetcher is not None:
            self.prefetcher.advance(b_ix)
        return super().run_pipeline(b_ix, batch_indices, batch_slot, cuda_event)

    def start(self) -> None:
        if not self._deferred:
            super().start()

    def run(self) -> None:
        try:
            super().run()
        except BaseException as e:
            self.error = e
            self.output_queue.put(None)
        finally:
            if self.prefetcher is not None:
                self.prefetcher.stop()

    def __next__(self):
        try:
            return super().__next__()
        except StopIteration:
            if self.error is not None:
                raise LoaderError(f"loading failed: {self.error!r}") from self.error
            raise

    def close(self) -> None:
        """Stop the producer (and its prefetch thread), wait for it, then release the
        epoch's pages. Idempotent."""
        self.terminate_event.set()
        prefetcher = getattr(self, "prefetcher", None)
        if prefetcher is not None:
            prefetcher.stop()
        queue = getattr(self, "output_queue", None)
        if isinstance(queue, EpochQueue):
            queue.wake()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(STOP_TIMEOUT_S)
            if self.is_alive():
                log.warning("epoch thread still busy %.0f s after close", STOP_TIMEOUT_S)
        context = getattr(self, "memory_context", None)
        if not getattr(self, "closed", True) and context is not None:
            self.closed = True
            context.__exit__(None, None, None)


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
    device: torch.device
    code: Any = None


def build_graph(reader: PairReader, specs: dict[str, PipelineSpec]) -> tuple[BufferGraph, Any]:
    field_ix = {name: i for i, name in enumerate(reader.handlers)}
    # memory_read is None: our decoders read through the metadata pointers.
    graph = BufferGraph(specs, reader.handlers, field_ix, reader.metadata, None)
    _, code = graph.collect_requirements()
    return graph, graph.codegen_all(code)
