"""Run the writer's tasks on worker processes without ever hanging.

``multiprocessing.Pool`` waits forever for a task whose worker died (SIGKILL, the
OOM killer, a segfault in ``torch.load``). :func:`run_tasks` uses
``concurrent.futures.ProcessPoolExecutor``, which fails every pending task with
``BrokenProcessPool`` as soon as a worker dies; it then names the dead worker and
how it died. It also gives up when no task has finished for ``stall_seconds``,
and it waits in short slices, so SIGTERM and Ctrl-C reach the writer within a
fraction of a second. On any way out it stops the remaining workers.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

__all__ = ["WriteError", "WriteInterrupted", "run_tasks", "signals_as_exceptions"]

T = TypeVar("T")
R = TypeVar("R")

_POLL_SECONDS = 0.2
_JOIN_SECONDS = 5.0
_HINTS = {
    signal.SIGKILL: " (out of memory? see dmesg)",
    signal.SIGSEGV: " (a crash in native code, e.g. in torch.load)",
    signal.SIGBUS: " (a file changed or vanished while mapped?)",
}


class WriteError(RuntimeError):
    """The writer could not finish: a worker died or hung. The message says why."""


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


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """While active (main thread only): SIGTERM raises :class:`WriteInterrupted`."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise WriteInterrupted(signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


def run_tasks(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int,
    on_done: Callable[[int, R], None],
    *,
    initializer: Callable[[], None] | None = None,
    stall_seconds: float = 600.0,
) -> None:
    """Run ``fn(task)`` for every task on ``workers`` processes (in-process when 1).

    ``on_done(index, result)`` runs in this process as results arrive. ``fn`` must
    be a module-level function; its job is inherited through ``fork``.

    Raises:
        WriteError: a worker died, or no task finished in ``stall_seconds``.
        WriteInterrupted: SIGTERM (see :func:`signals_as_exceptions`).
        KeyboardInterrupt: Ctrl-C.
        Exception: whatever ``fn`` raised (e.g. ``SourceError``), unchanged.
    """
    if workers <= 1:
        for i, task in enumerate(tasks):
            on_done(i, fn(task))
        return
    executor = ProcessPoolExecutor(
        workers, mp_context=mp.get_context("fork"), initializer=initializer
    )
    processes: list[BaseProcess] = []
    pending: dict[Future[R], int] = {}
    upcoming = iter(enumerate(tasks))
    clean = False

    def refill() -> None:
        for i, task in upcoming:
            pending[executor.submit(fn, task)] = i
            if len(pending) >= 2 * workers:
                return

    try:
        refill()
        # With fork, the first submit starts every worker; keep them to name a dead one.
        processes = list(getattr(executor, "_processes", {}).values())
        last = time.monotonic()
        while pending:
            done, _ = wait(pending, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED)
            if not done:
                if time.monotonic() - last > stall_seconds:
                    raise WriteError(
                        f"no task finished in {stall_seconds:.0f} s: a worker hung "
                        f"(a stuck file system?)"
                    )
                continue
            for future in done:
                on_done(pending.pop(future), future.result())
            last = time.monotonic()
            refill()
        clean = True
    except BrokenProcessPool:
        executor.shutdown(wait=True, cancel_futures=True)
        raise WriteError(_cause(processes)) from None
    finally:
        if not clean:
            _stop(processes)
        executor.shutdown(wait=True, cancel_futures=True)
