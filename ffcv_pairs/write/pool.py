"""Run the writer's tasks on worker processes without ever hanging.

``multiprocessing.Pool`` waits forever for a task whose worker died (SIGKILL, the
OOM killer, a segfault in ``torch.load``). :func:`run_tasks` uses
``concurrent.futures.ProcessPoolExecutor``, which fails every pending task with
``BrokenProcessPool`` as soon as a worker dies; it then names the dead worker and
how it died. It gives up when nothing has moved for ``stall_seconds`` (no task
finished and no worker went on to its next step, see :class:`Watch`), saying what
each busy worker is doing. On any way out it stops the remaining workers.

Signals. SIGINT and SIGTERM become exceptions (:func:`signals_as_exceptions`), but
never inside the executor's machinery: raised at an arbitrary bytecode there, an
exception can leave a future's lock held by the main thread (``wait`` takes them
one by one) or a forked worker unregistered, and the executor's shutdown, or the
interpreter's exit that joins every child, then waits forever. So while tasks run
a signal is only recorded, and the wait loop, which wakes every 0.2 s, raises it.
Workers fork with both signals blocked, so that none reaches the handlers they
inherit, and unblock them once SIGTERM kills and SIGINT is ignored (the writer
handles Ctrl-C and stops them).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from multiprocessing.process import BaseProcess
from typing import Any, Protocol, TypeVar

from ..errors import FfcvPairsError

__all__ = ["Watch", "WriteError", "WriteInterrupted", "run_tasks", "signals_as_exceptions"]

T = TypeVar("T")
R = TypeVar("R")

_POLL_SECONDS = 0.2
_JOIN_SECONDS = 5.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1
_HINTS = {
    signal.SIGKILL: " (out of memory? see dmesg)",
    signal.SIGSEGV: " (a crash in native code, e.g. in torch.load)",
    signal.SIGBUS: " (a file changed or vanished while mapped?)",
}


class WriteError(FfcvPairsError, RuntimeError):
    """The writer could not finish: a worker died or made no progress, or the disk is
    full. The message says why, and what ``--resume`` can continue from."""


class WriteInterrupted(WriteError):
    """SIGTERM stopped the writer (Ctrl-C stays a ``KeyboardInterrupt``).

    Attributes:
        signum: The signal.
    """

    def __init__(self, signum: int, message: str = ""):
        super().__init__(message or f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.signum, str(self))


@dataclass
class _Stopping:
    """The first SIGINT or SIGTERM, while :func:`signals_as_exceptions` is active."""

    signum: int | None = None
    raised: bool = False
    held: int = 0  # > 0: inside _held(), where a signal is recorded, not raised


_STOPPING: _Stopping | None = None


def _interruption(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else WriteInterrupted(signum)


def _on_signal(signum: int, frame: object) -> None:
    stopping = _STOPPING
    if stopping is None:
        raise _interruption(signum)
    if stopping.signum is not None:
        return  # stopping already: the way out is bounded, a second signal changes nothing
    stopping.signum = signum
    if not stopping.held:
        stopping.raised = True
        raise _interruption(signum)


def _raise_if_signalled() -> None:
    stopping = _STOPPING
    if stopping is not None and stopping.signum is not None and not stopping.raised:
        stopping.raised = True
        raise _interruption(stopping.signum)


@contextmanager
def _held() -> Iterator[None]:
    """Inside, a signal is recorded; it is raised by :func:`_raise_if_signalled`, or on
    the way out, instead of any other exception (its exit status wins)."""
    stopping = _STOPPING
    if stopping is None:
        yield
        return
    stopping.held += 1
    try:
        yield
    except BaseException:
        if stopping.signum is not None and not stopping.raised:
            stopping.raised = True
            raise _interruption(stopping.signum) from None
        raise
    finally:
        stopping.held -= 1
    _raise_if_signalled()


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """While active (main thread only): SIGINT raises ``KeyboardInterrupt`` and SIGTERM
    :class:`WriteInterrupted`, at once, or, while :func:`run_tasks` runs workers, within
    0.2 s. A signal that was ignored (SIGINT of a background job) stays ignored."""
    global _STOPPING
    if threading.current_thread() is not threading.main_thread() or _STOPPING is not None:
        yield
        return
    previous: dict[int, Any] = {}
    _STOPPING = _Stopping()
    try:
        for signum in _STOP_SIGNALS:
            previous[signum] = signal.getsignal(signum)
            if previous[signum] != signal.SIG_IGN:
                signal.signal(signum, _on_signal)
        yield
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, signal.SIG_DFL if handler is None else handler)
        _STOPPING = None


def _cause(processes: list[BaseProcess]) -> str:
    """Which worker died and how, from the exit codes (the others were terminated)."""
    codes = [(p.pid, p.exitcode) for p in processes if p.exitcode is not None]
    dead = [c for c in codes if c[1] != -signal.SIGTERM] or codes
    if not dead:
        return "a worker process died"
    pid, code = dead[0]
    if code is not None and code < 0:
        sig = signal.Signals(-code)
        return f"worker process {pid} was killed by {sig.name}{_HINTS.get(sig, '')}"
    return f"worker process {pid} exited with status {code}"


def _stop(processes: list[BaseProcess]) -> None:
    """SIGTERM every live worker, then SIGKILL whatever is left after a grace period."""
    for p in processes:
        if p.exitcode is None:
            p.terminate()
    deadline = time.monotonic() + _JOIN_SECONDS
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join(1.0)


class Watch(Protocol):
    """What the workers are doing (see :class:`~ffcv_pairs.write.activity.Board`)."""

    def last_change(self) -> float:
        """When a worker last went on to another step (``time.monotonic``)."""
        ...

    def describe(self, now: float) -> str:
        """What each busy worker is doing, in words."""
        ...


def _start_worker(parent: int, initializer: Callable[[], None] | None) -> None:
    """In a fresh worker (SIGINT and SIGTERM still blocked): SIGTERM kills it, SIGINT
    is ignored (the writer handles Ctrl-C), it dies with the writer; then
    ``initializer``; then the signals are let through."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Not on Linux: a killed writer leaves its workers to finish their task.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # the writer died before prctl took effect
    if initializer is not None:
        initializer()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def _hand_over(
    done: set[Future[R]], pending: dict[Future[R], int], on_done: Callable[[int, R], None]
) -> None:
    """Pass finished tasks to ``on_done`` in task order, then raise the first error:
    a result that arrived is never dropped for another task's failure."""
    error: BaseException | None = None
    for future in sorted(done, key=pending.__getitem__):
        index = pending.pop(future)
        failed = future.exception()
        if failed is None:
            on_done(index, future.result())
        elif error is None:
            error = failed
    if error is not None:
        raise error


def _stalled(stall_seconds: float, watch: Watch | None, now: float) -> WriteError:
    doing = "no task finished" if watch is None else watch.describe(now)
    return WriteError(f"no progress for {stall_seconds:.0f} s: {doing}")


def run_tasks(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int,
    on_done: Callable[[int, R], None],
    *,
    initializer: Callable[[], None] | None = None,
    stall_seconds: float = 600.0,
    watch: Watch | None = None,
) -> None:
    """Run ``fn(task)`` for every task on ``workers`` processes (in-process when 1).

    ``on_done(index, result)`` runs in this process as results arrive. ``fn`` must
    be a module-level function; its job is inherited through ``fork``.

    Raises:
        WriteError: a worker died, or nothing moved for ``stall_seconds``: no task
            finished, nor did any worker go on to another step of ``watch``.
        WriteInterrupted: SIGTERM (see :func:`signals_as_exceptions`).
        KeyboardInterrupt: Ctrl-C.
        Exception: whatever ``fn`` raised (e.g. ``SourceError``), unchanged.
    """
    if workers <= 1:
        for i, task in enumerate(tasks):
            on_done(i, fn(task))
        return
    with _held():
        _run_on_workers(
            fn,
            tasks,
            workers,
            on_done,
            initializer=initializer,
            stall_seconds=stall_seconds,
            watch=watch,
        )


def _run_on_workers(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int,
    on_done: Callable[[int, R], None],
    *,
    initializer: Callable[[], None] | None,
    stall_seconds: float,
    watch: Watch | None,
) -> None:
    start = partial(_start_worker, os.getpid(), initializer)
    executor = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=start)
    processes: list[BaseProcess] = []
    pending: dict[Future[R], int] = {}
    upcoming = iter(enumerate(tasks))
    clean = False

    def refill() -> None:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)  # workers fork here
        try:
            for i, task in upcoming:
                pending[executor.submit(fn, task)] = i
                if len(pending) >= 2 * workers:
                    return
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    try:
        refill()
        # With fork, the first submit starts every worker; keep them to name a dead one.
        processes = list(getattr(executor, "_processes", {}).values())
        last = time.monotonic()
        while pending:
            done, _ = wait(pending, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED)
            _raise_if_signalled()
            now = time.monotonic()
            if done:
                _hand_over(done, pending, on_done)
                last = now
                refill()
            elif now - max(last, watch.last_change() if watch else 0.0) > stall_seconds:
                raise _stalled(stall_seconds, watch, now)
        clean = True
    except BrokenProcessPool:
        executor.shutdown(wait=True, cancel_futures=True)
        raise WriteError(_cause(processes)) from None
    finally:
        if not clean:
            _stop(processes)
        executor.shutdown(wait=True, cancel_futures=True)
