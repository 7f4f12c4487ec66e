"""The four calls the device stage is written against, and their CUDA implementation.

A :class:`CopyEngine` enqueues work on streams and orders it with events:

* ``copy(dst, src, stream)``: enqueue ``dst.copy_(src)`` on ``stream``;
* ``record(stream)``: an event that completes once everything enqueued on ``stream``
  so far has run;
* ``host_wait(event)``: block this thread until ``event`` has completed;
* ``stream_wait(stream, event)``: work enqueued on ``stream`` from now on runs only
  after ``event`` has completed (the host does not wait).

Besides those four: ``run(fn, stream)`` enqueues other device work (the
normalisation), ``consumer_stream()`` is the stream the calling thread's work
goes to, ``keep_until(tensor, stream)`` keeps a tensor's memory from reuse until
the work enqueued on ``stream`` has run, and ``host_buffer``/``device_buffer``
allocate. :class:`~.stage.DeviceStage` uses nothing else, so the same stage code
runs on a GPU (:class:`CudaEngine`) and on the CPU simulation that tests its
ordering in every CI run (:class:`~.simulated.SimulatedEngine`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

__all__ = ["CopyEngine", "CudaEngine"]


class CopyEngine(Protocol):
    """Streams, events and buffers of one device (see the module docstring)."""

    device: torch.device

    def new_stream(self) -> Any: ...

    def consumer_stream(self) -> Any: ...

    def copy(self, dst: torch.Tensor, src: torch.Tensor, stream: Any) -> None: ...

    def run(self, fn: Callable[[], object], stream: Any) -> None: ...

    def record(self, stream: Any) -> Any: ...

    def host_wait(self, event: Any) -> None: ...

    def stream_wait(self, stream: Any, event: Any) -> None: ...

    def keep_until(self, tensor: torch.Tensor, stream: Any) -> None: ...

    def host_buffer(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor: ...

    def device_buffer(
        self, shape: tuple[int, ...], dtype: torch.dtype, stream: Any
    ) -> torch.Tensor: ...

    def bind_thread(self) -> None: ...


class CudaEngine:
    """:class:`CopyEngine` on one GPU. Every call runs with ``device`` current, so a rank
    creates its CUDA context on its own GPU only, from any thread."""

    def __init__(self, device: torch.device):
        if device.type != "cuda" or device.index is None:
            raise ValueError(f"CudaEngine needs a definite CUDA device, got {device}")
        self.device = device

    def bind_thread(self) -> None:
        """Make ``device`` current in the calling thread (threads start on GPU 0)."""
        torch.cuda.set_device(self.device)

    def new_stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream(self.device)

    def consumer_stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream(self.device)

    def copy(self, dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)

    def run(self, fn: Callable[[], object], stream: torch.cuda.Stream) -> None:
        with torch.cuda.stream(stream):
            fn()

    def record(self, stream: torch.cuda.Stream) -> torch.cuda.Event:
        # blocking: a host wait sleeps instead of spinning a core the pipeline needs.
        event = torch.cuda.Event(blocking=True)
        event.record(stream)
        return event

    def host_wait(self, event: torch.cuda.Event) -> None:
        event.synchronize()

    def stream_wait(self, stream: torch.cuda.Stream, event: torch.cuda.Event) -> None:
        stream.wait_event(event)

    def keep_until(self, tensor: torch.Tensor, stream: torch.cuda.Stream) -> None:
        # The caching allocator gives a freed block to new work only once the work
        # enqueued on ``stream`` before the free has run.
        tensor.record_stream(stream)

    def host_buffer(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        with torch.cuda.device(self.device):
            return torch.empty(shape, dtype=dtype, pin_memory=True)

    def device_buffer(
        self, shape: tuple[int, ...], dtype: torch.dtype, stream: torch.cuda.Stream
    ) -> torch.Tensor:
        # Allocated on ``stream``: the allocator orders a block's reuse on the stream
        # it was allocated on, and the copy into it runs there.
        with torch.cuda.stream(stream):
            return torch.empty(shape, dtype=dtype, device=self.device)
