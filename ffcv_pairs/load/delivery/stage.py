"""The host-to-device stage: pinned slots to device tensors, ordered by events.

The CPU pipeline writes each batch into one of a ring of pinned host slots;
this stage copies it to the device on a stream of its own and runs the device
ops (normalisation) there. Three rules make it correct whatever the GPU's lag:

1. **Back-pressure on the host.** Before the pipeline refills a slot, the loading
   thread waits *on the host* for the event recorded right after that slot's
   last copy (:meth:`DeviceStage.before_fill`). Upstream FFCV makes a stream
   wait there instead, so a host running ahead of a lagging GPU rewrites pinned
   memory that a queued copy has not read yet (FFCV issues #198, #37).
2. **Ready on the consumer's stream.** :meth:`DeviceStage.hand_out` makes the
   stream current in the consumer's thread at ``next()`` (the default stream,
   or the one under ``torch.cuda.stream(...)``) wait for the batch's copies.
3. **No device memory reused under the consumer.** Every batch gets device
   tensors of its own, allocated on the copy stream, and marked with the
   consumer's stream at hand-out (``record_stream``): PyTorch's caching allocator
   reuses their memory only after the work the consumer had queued on them
   when it dropped them has run (the rule timm's prefetcher broke, PR #2784).

**Holding contract on a GPU:** any number of batches; each is its own set of
device tensors, returned to PyTorch's allocator when the caller drops it. Work on
a batch under another stream than the one current at ``next()`` needs
``tensor.record_stream(that_stream)``, as for any tensor made on one stream and
used on another.

The calls go through a :class:`~.engines.CopyEngine`, so the same code runs on a
GPU and in the CPU simulation that tests the ordering in every CI run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from .engines import CopyEngine

__all__ = ["Delivery", "DeviceStage", "Finisher"]

#: Device work on one field after its copy (normalise and cast): tensor in, tensor out.
Finisher = Callable[[torch.Tensor], torch.Tensor]


class Delivery(NamedTuple):
    """A batch on its way: the device tensors, and the event after their last write."""

    tensors: tuple[torch.Tensor, ...]
    ready: Any


def _chain(steps: Sequence[Finisher]) -> Finisher:
    def run(x: torch.Tensor) -> torch.Tensor:
        for step in steps:
            x = step(x)
        return x

    return run


def _finish_into(dst: torch.Tensor, raw: torch.Tensor, finish: Finisher) -> Callable[[], object]:
    return lambda: dst.copy_(finish(raw))


class DeviceStage:
    """Moves batches from ``slots`` pinned host slots to the device of ``engine``.

    Args:
        engine: The streams and events (CUDA, or the CPU simulation).
        slots: Host slots in the pipeline's ring.
        finishers: For each output of the pipeline, the device ops to run after the
            copy, in order (empty: the copy is the output).
    """

    def __init__(
        self, engine: CopyEngine, slots: int, finishers: Sequence[Sequence[Finisher]]
    ) -> None:
        if slots < 2:
            raise ValueError(f"slots must be at least 2, got {slots}")
        self.engine = engine
        self.stream = engine.new_stream()
        self.copied: list[Any] = [None] * slots
        self._finish = [_chain(steps) if steps else None for steps in finishers]
        self._out_dtypes: dict[tuple[int, torch.dtype], torch.dtype] = {}

    def host_buffer(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A host buffer the copies can read asynchronously (pinned on a GPU)."""
        return self.engine.host_buffer(shape, dtype)

    def before_fill(self, slot: int) -> None:
        """Loading thread, before the pipeline writes ``slot``: wait until the last copy
        out of it has run."""
        event = self.copied[slot]
        if event is not None:
            self.engine.host_wait(event)

    def _out_dtype(self, field: int, x: torch.Tensor, finish: Finisher) -> torch.dtype:
        key = (field, x.dtype)
        if key not in self._out_dtypes:
            self._out_dtypes[key] = finish(torch.empty((0, *x.shape[1:]), dtype=x.dtype)).dtype
        return self._out_dtypes[key]

    def send(self, slot: int, batch: Sequence[torch.Tensor]) -> Delivery:
        """Loading thread, after the pipeline wrote ``batch`` into ``slot``: enqueue its
        copies and device ops, and record the event that ends them."""
        engine, stream = self.engine, self.stream
        out: list[torch.Tensor] = []
        for field, (x, finish) in enumerate(zip(batch, self._finish, strict=True)):
            raw = engine.device_buffer(tuple(x.shape), x.dtype, stream)
            engine.copy(raw, x, stream)
            if finish is None:
                out.append(raw)
                continue
            dst = engine.device_buffer(tuple(x.shape), self._out_dtype(field, x, finish), stream)
            engine.run(_finish_into(dst, raw, finish), stream)
            out.append(dst)
        ready = engine.record(stream)
        self.copied[slot] = ready
        return Delivery(tuple(out), ready)

    def hand_out(self, delivery: Delivery) -> tuple[torch.Tensor, ...]:
        """Consumer's thread, at ``next()``: the batch, ready on its current stream."""
        consumer = self.engine.consumer_stream()
        self.engine.stream_wait(consumer, delivery.ready)
        for tensor in delivery.tensors:
            self.engine.keep_until(tensor, consumer)
        return delivery.tensors
