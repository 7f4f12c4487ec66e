"""Upstream FFCV's pipeline parts, composed: buffers allocated once, errors raised, no hang.

Upstream's ``Graph`` compiles the pipeline; upstream's ``Loader`` is not used (it
builds slow per-sample dicts and rejects a custom order), nor is its
``EpochIterator`` (it makes CUDA streams and pins memory whenever a GPU is
present, even for CPU batches, and lets the host refill pinned memory that a
queued copy has not read yet). :class:`EpochThread` runs the compiled code
itself; the copy to a GPU is :mod:`~ffcv_pairs.load.delivery`'s.

**Reused buffers.** The pipeline writes into ``batches_ahead + 3`` reused buffer
slots. On the CPU (``device="cpu"``) the batches handed out *are* those slots, so
a consumer may hold the batch it is working on plus one more (Lightning
prefetches one when a loader has no length) while the next ones are prepared;
a third batch kept beyond that may be overwritten. (On a GPU each batch is a
fresh set of device tensors: see :mod:`~ffcv_pairs.load.delivery.stage`.) The
slots are allocated once per loader (upstream allocates a fresh set every
epoch: with two sets alive at an epoch boundary and the freed one kept by the C
heap, a rank's memory grows by about one set), pinned only when batches go to a
GPU. The slot sequence runs on across epochs from the slot after the last batch
**handed out**, not the producer's next slot: an abandoned epoch may have
prepared batches nobody took, and skipping their slots would let the next
epoch run one slot further into the batches the consumer still holds.

**No stuck threads.** Closing an epoch (``break``, a new epoch, ``close()``)
stops its producer, which may be waiting on a full queue, even to put its
final end marker (upstream waits for that with no timeout), and waits for it
to stop, so its buffers are free for the next epoch and no thread is left.
A closed epoch's iterator ends; it never hands out a batch from reused slots.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from queue import Full, Queue
from typing import Any

import numpy as np
import torch
from ffcv.loader.epoch_iterator import select_buffer
from ffcv.memory_managers.os_cache import OSCacheContext
from ffcv.pipeline import PipelineSpec
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.compiler import Compiler
from ffcv.pipeline.graph import Graph

from ..errors import FfcvPairsError
from ..format.joined import DatasetReader
from ..kernels.launches import kernel_launches
from .delivery.stage import DeviceStage
from .memory import PairOSCacheManager, PairProcessCacheManager
from .order import PairTraversalOrder
from .prefetch import Prefetcher, SamplePrefetcher, page_schedule, sample_schedule
from .truncation import FileWatch

__all__ = ["BufferGraph", "EpochQueue", "EpochThread", "LoaderError", "LoaderShim", "build_graph"]

log = logging.getLogger(__name__)

#: How long closing an epoch waits for its producer to finish the batch in hand.
STOP_TIMEOUT_S = 120.0


class LoaderError(FfcvPairsError, RuntimeError):
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
        #: Allocates the slots' host buffers (pinned, for a GPU); None: plain memory.
        self.host_buffer: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] | None = None
        self.owner: EpochThread | None = None
        self.next_slot = 0
        self.buffer_sets = 0

    def allocate_memory(self, batch_size: int, batches_ahead: int) -> Any:
        if self.buffers is None or (self.owner is not None and self.owner.is_alive()):
            queries, _ = self.collect_requirements()
            self.buffers = {
                kind: {
                    node: self._allocate(q, batch_size, batches_ahead) for node, q in nodes.items()
                }
                for kind, nodes in queries.items()
            }
            self.buffer_sets += 1
            self.next_slot = 0
        return self.buffers

    def _allocate(self, query: Any, batch_size: int, slots: int) -> Any:
        """``slots`` batches of what ``query`` asks for (a tuple for a tuple of queries):
        a numpy array, or a list of tensors for a torch dtype, as upstream's code reads
        them; pinned through ``host_buffer`` when one is given."""
        if query is None:
            return None
        if not isinstance(query, AllocationQuery):
            return tuple(self._allocate(q, batch_size, slots) for q in query)
        if query.device is not None and torch.device(query.device).type != "cpu":
            raise ValueError(f"pipeline buffers live on the host; an op asked for {query}")
        shape = (slots, batch_size, *query.shape)
        if isinstance(query.dtype, torch.dtype):
            return [self._host(shape[1:], query.dtype) for _ in range(slots)]
        dtype = torch.from_numpy(np.empty(0, dtype=query.dtype)).dtype
        return self._host(shape, dtype).numpy()

    def _host(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if self.host_buffer is None:
            return torch.empty(shape, dtype=dtype)
        return self.host_buffer(shape, dtype)

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


class EpochThread(threading.Thread):
    """The loading thread of one epoch, and its iterator.

    Runs the compiled pipeline (upstream's ``Graph`` code, called as upstream's
    ``EpochIterator`` calls it) over the epoch's batches, into ``batches_ahead + 3``
    reused buffer slots, and puts them on a queue of ``queue_size``, so the
    consumer may hold two batches. Unlike upstream's iterator it touches no CUDA
    API itself: with a :class:`~.delivery.stage.DeviceStage` (a GPU), that stage
    waits on the host before a slot is refilled, copies each batch to the device
    and hands it out ready on the consumer's stream; without one (``device="cpu"``)
    batches are the slots' CPU tensors. Pipeline errors are raised in the consumer
    as :class:`LoaderError`; :meth:`close` stops the thread and waits for it.

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
        super().__init__(daemon=True, name="ffcv-pairs-epoch")
        self.engine, self.closed = engine, True
        self.error: BaseException | None = None
        self.prefetcher: Prefetcher | None = None
        bs = engine.batch_size
        self.batches = [order[i : i + bs] for i in range(0, len(order), bs)]
        self.terminate_event = threading.Event()
        self.memory_context = engine.memory_manager.schedule_epoch(self.batches)
        self.memory_context.__enter__()
        self.closed = False
        self.storage_state = self.memory_context.state
        self.slots = engine.batches_ahead + 2
        self.buffers = engine.graph.allocate_memory(bs, self.slots)
        self._start_prefetch(engine, order, prefetch, max_in_flight, mode)
        self.output_queue = EpochQueue(queue_size, self.terminate_event, engine.graph, self.slots)
        self.current_batch_slot = engine.graph.next_slot
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
            nbytes = [reader.stored_bytes(name) for name in fields]
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

    def run_pipeline(self, b_ix: int, batch_indices: np.ndarray, slot: int) -> tuple[Any, ...]:
        """Batch ``b_ix`` into buffer ``slot``: its CPU tensors, or its device delivery."""
        if self.prefetcher is not None:
            self.prefetcher.advance(b_ix)
        if self.engine.watch is not None:
            self.engine.watch.check(batch_indices)  # not a byte rewritten in place
        stage = self.engine.stage
        if stage is not None:
            stage.before_fill(slot)
        self.memory_context.start_batch(b_ix)
        n = len(batch_indices)
        args: dict[str, Any] = {
            "batch_indices": batch_indices,
            "storage_state": self.storage_state,
            "metadata": self.engine.reader.metadata,
        }
        for kind, prefix in (("operation", "memory_"), ("shared", "shared_memory_")):
            for node, buffer in self.buffers[kind].items():
                args[f"{prefix}{node}"] = select_buffer(buffer, slot, n)
        code, outputs = self.engine.code
        with kernel_launches():  # numba's workqueue layer aborts on concurrent launches
            for stage_code, defines in code:
                for node, result in zip(defines, stage_code(**args)):
                    args[f"result_{node}"] = result
        batch = tuple(args[f"result_{node}"] for node in outputs)
        return batch if stage is None else stage.send(slot, batch)

    def run(self) -> None:
        try:
            if self.engine.stage is not None:
                self.engine.stage.engine.bind_thread()
            Compiler.set_num_threads(self.engine.num_workers)
            for b_ix, ids in enumerate(self.batches):
                if self.terminate_event.is_set():
                    return
                slot = self.current_batch_slot
                self.current_batch_slot = (slot + 1) % self.slots
                self.output_queue.put((slot, self.run_pipeline(b_ix, ids, slot)))
            self.output_queue.put(None)
        except Full:
            return  # closed while waiting for room
        except BaseException as e:
            self.error = e
            self.output_queue.put(None)
        finally:
            if self.prefetcher is not None:
                self.prefetcher.stop()

    def __iter__(self) -> EpochThread:
        return self

    def __next__(self) -> tuple[torch.Tensor, ...]:
        item = self.output_queue.get()
        if item is None:
            if isinstance(self.error, ValueError):  # says itself what is wrong (file, data)
                raise LoaderError(str(self.error)) from self.error
            if self.error is not None:
                raise LoaderError(f"loading failed: {self.error!r}") from self.error
            raise StopIteration
        batch = item[1]
        stage = self.engine.stage
        return batch if stage is None else stage.hand_out(batch)

    def close(self) -> None:
        """Stop the producer (and its prefetch thread), wait for it, then release the
        epoch's pages. Idempotent."""
        self.terminate_event.set()
        if self.prefetcher is not None:
            self.prefetcher.stop()
        queue = getattr(self, "output_queue", None)
        if queue is not None:
            queue.wake()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(STOP_TIMEOUT_S)
            if self.is_alive():
                log.warning("epoch thread still busy %.0f s after close", STOP_TIMEOUT_S)
        if not self.closed:
            self.closed = True
            self.memory_context.__exit__(None, None, None)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


@dataclass
class LoaderShim:
    """What an epoch thread reads from its loader (the names upstream's loader uses)."""

    reader: DatasetReader
    batch_size: int
    batches_ahead: int
    num_workers: int
    memory_manager: PairOSCacheManager | PairProcessCacheManager
    traversal_order: PairTraversalOrder
    graph: BufferGraph
    stage: DeviceStage | None = None
    code: Any = None
    watch: FileWatch | None = None


def build_graph(reader: DatasetReader, specs: dict[str, PipelineSpec]) -> tuple[BufferGraph, Any]:
    field_ix = {name: i for i, name in enumerate(reader.handlers)}
    # memory_read is None: our decoders read through the metadata pointers.
    graph = BufferGraph(specs, reader.handlers, field_ix, reader.metadata, None)
    _, code = graph.collect_requirements()
    return graph, graph.codegen_all(code)
