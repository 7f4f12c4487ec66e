"""A parallel kernel served by its serial twin while it compiles in the background.

On an empty kernel cache a parallel kernel (a ``prange`` loop) costs its serial twin's
compile and then a quarter as much again: numba builds the parallel loop's gufunc and its
wrapper over the whole sample kernel (7.8 s of one core for the fused kernel, here). The
first batches need not wait for that. :class:`ParallelSoon` calls the serial twin (compiling
it, if need be, in the foreground), and once a batch is done the loader calls
:func:`compile_pending`, which compiles the parallel kernel on a background thread; later
batches switch to it as soon as it is ready. The serial and the parallel kernel give the
same bytes (a sample's output depends on its key, not on the thread that makes it), so the
switch changes the speed only.

Some kernels have a *stand-in* too: plain numpy over the batch, no compile at all, writing
the same bytes (:mod:`.numpy_ops`: the copy of an unaugmented batch; flips, padded crops,
brightness and contrast of the fused kernel). With one, the chain is stand-in, then the
serial kernel (compiled in the background while the stand-in serves), then the parallel one.

The background thread compiles under the same lock file as :class:`SharedCompile` (one
process of a node compiles, the others load), and one job at a time: numba compiles one
function at a time per process anyway.

A fork waits for a compile under way (see :mod:`._cache`), so a process forked meanwhile
(a writer's workers) does not inherit numba's compiler lock held by a thread it lacks.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from typing import Any

from ._cache import SharedCompile, announce, compile_lock, is_cached

__all__ = [
    "ParallelSoon",
    "compile_pending",
    "kernel_ready",
    "settled",
    "types_ready",
    "wait_for_compiles",
]

_PENDING: list[tuple[_Compile, threading.Event | None]] = []
_PENDING_LOCK = threading.Lock()
_COMPILERS: list[threading.Thread] = []  # the background threads compile_pending started
_LIVE: weakref.WeakSet[ParallelSoon] = weakref.WeakSet()  # every ParallelSoon not yet freed
_QUEUED: set[tuple[Any, tuple]] = set()  # the kernels types_ready queued


class _Compile:
    """One background compile: ``kernel`` for argument ``types``; ``done`` once it ended
    (``error``: what it raised)."""

    def __init__(self, kernel: Any, types: tuple, stand_in: bool, quiet: bool = False) -> None:
        self.kernel, self.types, self.stand_in, self.quiet = kernel, types, stand_in, quiet
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if not self.quiet:
                announce(self.kernel, self.types, background=True, stand_in=self.stand_in)
            with compile_lock(self.kernel):
                self.kernel.compile(self.types)
        except BaseException as e:  # re-raised at the next call, on the loader's thread
            self.error = e
        finally:
            self.done.set()

    def check(self) -> None:
        if self.error is not None:
            name = self.kernel.py_func.__name__
            raise RuntimeError(f"compiling {name} in the background failed") from self.error


class ParallelSoon:
    """Call ``parallel`` when it is compiled (in this process or in the disk cache), else
    ``serial`` while :func:`compile_pending` compiles ``parallel`` in the background.

    With a ``stand_in`` (a plain numpy function of the same arguments that writes the same
    bytes, or None where it cannot serve these arguments), the first batches do not wait for
    ``serial`` either: while neither kernel is compiled the stand-in serves and ``serial``
    compiles in the background, then ``serial`` serves while ``parallel`` does. ``parallel``
    may be ``serial`` itself (one thread: the chain is stand-in, then the kernel).

    ``served`` counts the calls each kernel took, by name (the stand-in's by its function's).
    """

    def __init__(self, parallel: Any, serial: Any, stand_in: Any = None) -> None:
        self.parallel, self.serial, self.stand_in = parallel, serial, stand_in
        self.served: Counter[str] = Counter()
        self._call = SharedCompile()
        self._ready = threading.Event()
        self._types: tuple | None = None
        self._serial_ok = stand_in is None
        self._serial_job: _Compile | None = None
        self._parallel_job: _Compile | None = None
        _LIVE.add(self)

    def __call__(self, *args: Any) -> Any:
        kernel = self._choose(args)
        self.served[getattr(kernel, "__name__", "?")] += 1
        if kernel is self.stand_in:
            return kernel(*args)
        return self._call(kernel, *args)

    def _choose(self, args: tuple) -> Any:
        if self._ready.is_set():
            if self._parallel_job is not None:
                self._parallel_job.check()
            return self.parallel
        if self._types is None:
            try:
                types = tuple(self.parallel.typeof_pyval(a) for a in args)
            except Exception:  # an argument numba cannot type: the call raises its own error
                self._ready.set()
                return self.parallel
            if types in self.parallel.overloads or is_cached(self.parallel, types):
                self._ready.set()
                return self.parallel
            self._types = types
        if not self._serial_ok:
            job = self._serial_job
            if job is None:
                if self._types in self.serial.overloads or is_cached(self.serial, self._types):
                    self._serial_ok = True
                else:
                    self._serial_job = _Compile(self.serial, self._types, stand_in=True)
                    _queue(self._serial_job)
                    return self.stand_in
            elif not job.done.is_set():
                return self.stand_in
            else:
                job.check()
                self._serial_ok = True
        if self.parallel is self.serial:  # one thread: no parallel kernel to wait for
            self._ready.set()
            return self.parallel
        if self._parallel_job is None:
            self._parallel_job = _Compile(self.parallel, self._types, stand_in=False)
            _queue(self._parallel_job, self._ready)
        return self.serial


def kernel_ready(kernel: Any, *args: Any) -> bool:
    """Whether ``kernel`` has machine code for ``args``' types, in this process or in the
    disk cache (then a call only loads it). If not, its compile is queued, once, for the
    next :func:`compile_pending`, without a word: the caller computes the same values
    without it meanwhile (the order twins of ``load/small_orders``)."""
    try:
        types = tuple(kernel.typeof_pyval(a) for a in args)
    except Exception:  # numba cannot type an argument: the kernel's call says why
        return True
    return types_ready(kernel, types)


def types_ready(kernel: Any, types: tuple, quiet: bool = True) -> bool:
    """:func:`kernel_ready` for argument ``types``; ``quiet=False``: the queued compile says
    so once, as a stand-in's does (the drawn ops' numpy twins of ``augment/photo_ops``)."""
    if types in kernel.overloads:
        return True
    with _PENDING_LOCK:
        if (kernel, types) in _QUEUED:
            return False
    if is_cached(kernel, types):
        return True
    with _PENDING_LOCK:
        _QUEUED.add((kernel, types))
    _queue(_Compile(kernel, types, stand_in=True, quiet=quiet))
    return False


def _queue(job: _Compile, ready: threading.Event | None = None) -> None:
    """Compile ``job`` at the next :func:`compile_pending` (then set ``ready``)."""
    with _PENDING_LOCK:
        _PENDING.append((job, ready))


def compile_pending() -> None:
    """Compile, on one background thread, every parallel kernel a :class:`ParallelSoon` has
    served by its twin so far. Call it when a batch is done, so the foreground's own first
    compiles (which numba runs one at a time) are not kept waiting."""
    with _PENDING_LOCK:
        jobs = list(_PENDING)
        _PENDING.clear()
    if jobs:
        thread = threading.Thread(
            target=_compile_all, args=(jobs,), name="ffcv-pairs-compile", daemon=True
        )
        thread.start()
        with _PENDING_LOCK:
            _COMPILERS.append(thread)


def wait_for_compiles() -> None:
    """Return once every background compile :func:`compile_pending` started has ended, so
    later batches come from the parallel kernels (a benchmark's timed epoch, say)."""
    with _PENDING_LOCK:
        threads = list(_COMPILERS)
        _COMPILERS.clear()
    for thread in threads:
        thread.join()


def settled() -> bool:
    """Whether every :class:`ParallelSoon` that has served calls now calls its final kernel
    (compiled or cached), and no background compile is under way or pending: what
    ``ffcv-pairs warmup`` runs batches until, so that it leaves every kernel cached."""
    with _PENDING_LOCK:
        if _PENDING or any(t.is_alive() for t in _COMPILERS):
            return False
    return all(s._ready.is_set() for s in list(_LIVE) if s._types is not None)


def _compile_all(jobs: list[tuple[_Compile, threading.Event | None]]) -> None:
    for job, ready in jobs:
        job.run()
        if ready is not None:
            ready.set()
