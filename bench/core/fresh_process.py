"""Fresh processes forked from a preloaded forkserver, and what their failures raise.

Every process of the project's venv that the benchmark measures (a contestant, a start-up
row, a data writer) is forked from one forkserver that has imported torch, ffcv and
ffcv_pairs once (:mod:`bench.core.preload`), so that no row pays for imports.
:func:`call_fresh` runs one function in such a process and samples its memory.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from bench.core.tree_memory import MemoryPeaks, TreeSampler

__all__ = ["RunnerError", "call_fresh", "forkserver"]

_CTX: Any = None


class RunnerError(RuntimeError):
    """A measured process (a contestant, or a :func:`call_fresh` call) failed or did not
    answer; the message says why."""


def forkserver() -> Any:
    """The forkserver context, preloaded with :mod:`bench.core.preload`; starts the server.

    The server imports in the background, so calling this early overlaps its
    imports with other work.
    """
    global _CTX
    if _CTX is None:
        from multiprocessing import forkserver as server

        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["bench.core.preload"])
        server.ensure_running()
    return _CTX


def _call_child(conn: Any, func: Any, args: tuple[Any, ...]) -> None:
    import traceback

    try:
        conn.send({"result": func(*args)})
    except Exception as e:
        lines = traceback.format_exception_only(type(e), e)
        conn.send({"error": lines[-1].strip(), "traceback": traceback.format_exc()})


def call_fresh(
    func: Any, *args: Any, timeout: float = 900.0, interval: float = 0.25
) -> tuple[Any, MemoryPeaks]:
    """``func(*args)`` in a fresh process (forked from the preloaded forkserver).

    Returns its result and the memory peaks of its process tree while it ran, sampled
    every ``interval`` seconds (reading ``smaps`` of a process that maps tens of GiB
    costs a core at the default).

    Raises:
        RunnerError: it raised (the message names the exception), died or timed out.
    """
    ctx = forkserver()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_call_child, args=(child, func, args))
    proc.start()
    child.close()
    try:
        with TreeSampler(proc.pid, interval) as sampler:
            if not parent.poll(timeout):
                raise RunnerError(f"{func.__name__}: no answer in {timeout:.0f} s")
            try:
                answer = parent.recv()
            except EOFError:
                raise RunnerError(f"{func.__name__}: process died") from None
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    if "error" in answer:
        raise RunnerError(f"{func.__name__}: {answer['error']}")
    return answer["result"], sampler.peaks
