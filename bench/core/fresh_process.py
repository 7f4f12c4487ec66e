"""Fresh processes forked from a preloaded forkserver, new interpreters, and what their
failures raise.

Every process of the project's venv that the benchmark measures (a contestant, a start-up
row, a data writer) is forked from one forkserver that has imported torch, ffcv and
ffcv_pairs once (:mod:`bench.core.preload`), so that no row pays for imports.
:func:`call_fresh` runs one function in such a process and samples its memory.
Where the imports are what is measured (the first-batch report), :func:`run_interpreter`
starts a new interpreter instead and times it from outside.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.core.tree_memory import MemoryPeaks, TreeSampler

__all__ = ["Interpreted", "RunnerError", "call_fresh", "forkserver", "run_interpreter"]

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


@dataclass(frozen=True)
class Interpreted:
    """What :func:`run_interpreter` saw: wall seconds from start to exit, CPU seconds (user
    plus system) of the process and of every child it waited for, and its stdout."""

    wall_s: float
    cpu_s: float
    stdout: str


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_interpreter(
    args: list[str], env: dict[str, str], cwd: str | os.PathLike[str], timeout: float = 900.0
) -> Interpreted:
    """``python *args`` in a new interpreter of this venv (started, not forked: it imports
    everything itself), with exactly ``env``; one at a time (its CPU seconds are this
    process's children's, before and after).

    Raises:
        RunnerError: it exited with an error (the message ends with its stderr's last
            line) or ran past ``timeout`` seconds.
    """
    cpu, t0 = _children_cpu(), time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, *args],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise RunnerError(f"python {' '.join(args)[:80]}: no exit in {timeout:.0f} s") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no stderr"])[-1]
        raise RunnerError(f"exit {proc.returncode}: {last}")
    return Interpreted(wall, _children_cpu() - cpu, proc.stdout)
