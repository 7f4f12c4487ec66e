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

The background thread compiles under the same lock file as :class:`SharedCompile` (one
process of a node compiles, the others load), and one job at a time: numba compiles one
function at a time per process anyway.

A fork waits for a compile under way (see :mod:`._cache`), so a process forked meanwhile
(a writer's workers) does not inherit numba's compiler lock held by a thread it lacks.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from ._cache import SharedCompile, announce, compile_lock, is_cached

__all__ = ["ParallelSoon", "compile_pending", "wait_for_compiles"]

_PENDING: list[ParallelSoon] = []
_PENDING_LOCK = threading.Lock()
_COMPILERS: list[threading.Thread] = []  # the background threads compile_pending started


class ParallelSoon:
    """Call ``parallel`` when it is compiled (in this process or in the disk cache), else
    ``serial`` while :func:`compile_pending` compiles ``parallel`` in the background.

    ``served`` counts the calls each kernel took, by name.
    """

    def __init__(self, parallel: Any, serial: Any) -> None:
        self.parallel, self.serial = parallel, serial
        self.served: Counter[str] = Counter()
        self._call = SharedCompile()
        self._ready = threading.Event()
        self._types: tuple | None = None
        self._error: BaseException | None = None

    def __call__(self, *args: Any) -> Any:
        kernel = self._choose(args)
        self.served[getattr(kernel, "__name__", "?")] += 1
        return self._call(kernel, *args)

    def _choose(self, args: tuple) -> Any:
        if self._ready.is_set():
            if self._error is not None:
                raise RuntimeError(
                    f"compiling {self.parallel.py_func.__name__} in the background failed"
                ) from self._error
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
            with _PENDING_LOCK:
                _PENDING.append(self)
        return self.serial

    def _compile(self) -> None:
        """Compile ``parallel`` for the types first seen (on the background thread)."""
        assert self._types is not None
        try:
            announce(self.parallel, self._types, background=True)
            with compile_lock(self.parallel):
                self.parallel.compile(self._types)
        except BaseException as e:  # re-raised at the next call, on the loader's thread
            self._error = e
        finally:
            self._ready.set()


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


def _compile_all(jobs: list[ParallelSoon]) -> None:
    for job in jobs:
        job._compile()
