"""A GPU simulated on the CPU: streams whose work runs later, on threads of their own.

Each :class:`SimStream` is a FIFO of work run by one background thread, each item
after ``delay`` seconds, so enqueued copies land long after the host moved on,
as they do behind a busy GPU. Events are set by their stream's thread when it
reaches them. "Device" buffers are ordinary CPU tensors.

Driven through the same :class:`~.engines.CopyEngine` calls as CUDA, it turns
every missing or misplaced wait of :class:`~.stage.DeviceStage` into wrong
batches in an ordinary test: a host that refills a pinned buffer before its
copy ran, an event recorded before the copy, a consumer that reads before the
copy. The consumer's work goes to :meth:`SimulatedEngine.consumer_stream` (the
default stream, or the one made current with :meth:`SimulatedEngine.stream`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["SimEvent", "SimStream", "SimulatedEngine"]

#: A wait that takes longer than this is a bug (a deadlock), not a slow stream.
WAIT_LIMIT_S = 60.0


class SimEvent:
    """Completes when its stream's thread reaches it."""

    def __init__(self) -> None:
        self._done = threading.Event()

    def set(self) -> None:
        self._done.set()

    def wait(self) -> None:
        if not self._done.wait(WAIT_LIMIT_S):
            raise TimeoutError(f"a simulated event was not reached in {WAIT_LIMIT_S:.0f} s")

    def query(self) -> bool:
        return self._done.is_set()


class SimStream:
    """Work run in order by one daemon thread, each item ``delay()`` seconds late."""

    def __init__(self, name: str, delay: Callable[[], float]):
        self.name, self._delay = name, delay
        self._work: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"sim-{name}", daemon=True)
        self._thread.start()

    def put(self, fn: Callable[[], object]) -> None:
        if self.error is not None:
            raise RuntimeError(f"simulated stream {self.name} failed") from self.error
        self._work.put(fn)

    def _run(self) -> None:
        while (fn := self._work.get()) is not None:
            pause = self._delay()
            if pause > 0:
                time.sleep(pause)
            try:
                fn()
            except BaseException as e:  # kept, and raised by the next put or synchronize
                self.error = e

    def synchronize(self) -> None:
        """Block until everything enqueued so far has run."""
        done = SimEvent()
        self.put(done.set)
        done.wait()
        if self.error is not None:
            raise RuntimeError(f"simulated stream {self.name} failed") from self.error

    def close(self) -> None:
        self._work.put(None)


class SimulatedEngine:
    """:class:`~.engines.CopyEngine` on the CPU, with late copies.

    Args:
        copy_delay: Seconds each item on a stream made by :meth:`new_stream` (the
            stage's copy stream) waits before it runs.
        consumer_delay: The same for the consumer's streams (:meth:`consumer_stream`).
    """

    device = torch.device("cpu")

    def __init__(self, copy_delay: float = 0.002, consumer_delay: float = 0.0):
        self.copy_delay, self.consumer_delay = copy_delay, consumer_delay
        self.default_stream = SimStream("default", lambda: self.consumer_delay)
        self._current = threading.local()
        self.streams = [self.default_stream]

    # -- the consumer's side -------------------------------------------------------------
    def consumer_stream(self) -> SimStream:
        return getattr(self._current, "stream", None) or self.default_stream

    @contextlib.contextmanager
    def stream(self, stream: SimStream) -> Iterator[SimStream]:
        """Make ``stream`` current in this thread, as ``torch.cuda.stream`` does."""
        before = getattr(self._current, "stream", None)
        self._current.stream = stream
        try:
            yield stream
        finally:
            self._current.stream = before

    def side_stream(self) -> SimStream:
        """Another consumer stream (``torch.cuda.Stream()``), with the consumer's delay."""
        stream = SimStream(f"side-{len(self.streams)}", lambda: self.consumer_delay)
        self.streams.append(stream)
        return stream

    def synchronize(self) -> None:
        """Wait for every stream (``torch.cuda.synchronize``)."""
        for stream in self.streams:
            stream.synchronize()

    def close(self) -> None:
        for stream in self.streams:
            stream.close()

    # -- CopyEngine ----------------------------------------------------------------------
    def bind_thread(self) -> None:
        pass

    def new_stream(self) -> SimStream:
        stream = SimStream(f"copy-{len(self.streams)}", lambda: self.copy_delay)
        self.streams.append(stream)
        return stream

    def copy(self, dst: torch.Tensor, src: torch.Tensor, stream: SimStream) -> None:
        stream.put(lambda: dst.copy_(src))

    def run(self, fn: Callable[[], object], stream: SimStream) -> None:
        stream.put(fn)

    def record(self, stream: SimStream) -> SimEvent:
        event = SimEvent()
        stream.put(event.set)
        return event

    def host_wait(self, event: SimEvent) -> None:
        event.wait()

    def stream_wait(self, stream: SimStream, event: SimEvent) -> None:
        stream.put(event.wait)

    def keep_until(self, tensor: torch.Tensor, stream: Any) -> None:
        pass  # "device" tensors are ordinary tensors: freed only when unreferenced

    def host_buffer(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype)

    def device_buffer(
        self, shape: tuple[int, ...], dtype: torch.dtype, stream: SimStream
    ) -> torch.Tensor:
        # Filled with a marker, so a batch read before its copy ran is visibly wrong.
        return torch.full(shape, 77, dtype=dtype)
