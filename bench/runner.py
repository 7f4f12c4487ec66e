"""Contestant processes, and the orchestrator's handle on each.

A contestant of the project's venv is a process forked from a forkserver that
has imported torch, ffcv and ffcv_pairs once (:mod:`bench.preload`); an extra
is a subprocess of its own venv's python (:mod:`bench.ext_runner`). Both answer
the commands of :func:`bench.timing.serve`; the handle samples the memory of the
process tree while a command runs.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

from .config import BENCH_DIR, BenchConfig
from .contestants import is_rank_group
from .data import DataPaths
from .extras import EXTRAS, extra_env
from .memory import MemoryPeaks, TreeSampler, snapshot

__all__ = ["Runner", "RunnerError", "call_fresh", "ext_spec", "forkserver"]

_CTX: Any = None
MARK = "@@BENCH "


class RunnerError(RuntimeError):
    """A contestant process failed or did not answer; the message says why."""


def forkserver() -> Any:
    """The forkserver context, preloaded with :mod:`bench.preload`; starts the server.

    The server imports in the background, so calling this early overlaps its
    imports with other work.
    """
    global _CTX
    if _CTX is None:
        from multiprocessing import forkserver as server

        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["bench.preload"])
        server.ensure_running()
    return _CTX


def _child_main(conn: Any, key: str, cfg: BenchConfig, paths: DataPaths) -> None:
    from .contestants import CONTESTANTS, build_source
    from .timing import serve

    slow = key in CONTESTANTS and CONTESTANTS[key].slow
    conn.send({"ready": True})
    serve(conn.recv, conn.send, lambda: build_source(key, cfg, paths), rebuild_each_run=slow)


def ext_spec(key: str, cfg: BenchConfig, paths: DataPaths) -> dict[str, Any]:
    out = paths.litdata_dir if key == "litdata" else paths.mds_dir
    return {
        "n": cfg.n,
        "batch_size": cfg.batch_size,
        "seed": cfg.seed,
        "workers": 2,
        "npy_dir": str(paths.npy_dir),
        "out_dir": str(out),
    }


def _ext_cmd(key: str, action: str, cfg: BenchConfig, paths: DataPaths) -> list[str]:
    spec = json.dumps(ext_spec(key, cfg, paths))
    return [str(EXTRAS[key].python), str(BENCH_DIR / "ext_runner.py"), key, action, spec]


class Runner:
    """One contestant process. ``request`` sends a command and waits for its answer.

    Attributes:
        baseline: Memory of the process tree before ``build`` (after imports).
        peaks: Largest memory seen over all requests.
    """

    def __init__(self, key: str, cfg: BenchConfig, paths: DataPaths, log_file: Path):
        self.key = key
        # A group of simulated ranks: count the ranks, not the harness that spawned them.
        self.include_root = not is_rank_group(key)
        self._lines: queue.Queue[str] = queue.Queue()
        if key in EXTRAS:
            self._err = open(log_file, "a")  # noqa: SIM115 - closed in stop()
            self._proc: Any = subprocess.Popen(
                _ext_cmd(key, "serve", cfg, paths),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err,
                text=True,
                env=extra_env(),
            )
            threading.Thread(target=self._pump, daemon=True).start()
            self.pid = self._proc.pid
        else:
            ctx = forkserver()
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_child_main, args=(child, key, cfg, paths))
            self._proc.start()
            child.close()
            self.pid = self._proc.pid
        self.ready = self._receive(900.0)  # imports done (extras: their format written)
        self.baseline = snapshot(self.pid, self.include_root)
        self.peaks = MemoryPeaks()

    def _pump(self) -> None:
        for line in self._proc.stdout:
            if line.startswith(MARK):
                self._lines.put(line[len(MARK) :])
        self._lines.put("")

    def _send(self, msg: dict[str, Any]) -> None:
        if self.key in EXTRAS:
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
        else:
            self._conn.send(msg)

    def _receive(self, timeout: float) -> dict[str, Any]:
        if self.key in EXTRAS:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise RunnerError(f"{self.key}: no answer in {timeout:.0f} s") from None
            if not line:
                raise RunnerError(f"{self.key}: process exited ({self._proc.poll()})")
            return json.loads(line)
        if not self._conn.poll(timeout):
            raise RunnerError(f"{self.key}: no answer in {timeout:.0f} s")
        try:
            return self._conn.recv()
        except EOFError:
            raise RunnerError(f"{self.key}: process exited ({self._proc.exitcode})") from None

    def request(self, msg: dict[str, Any], timeout: float = 900.0) -> dict[str, Any]:
        """Send ``msg``; returns the answer with ``memory`` (this request's peaks, bytes)."""
        with TreeSampler(self.pid, include_root=self.include_root) as sampler:
            self._send(msg)
            answer = self._receive(timeout)
        self.peaks.update(sampler.peaks)
        if "error" in answer:
            raise RunnerError(f"{self.key}: {answer['error']}")
        answer["memory"] = sampler.peaks
        return answer

    def stop(self) -> None:
        try:
            self._send({"cmd": "stop"})
            self._receive(60.0)
        except (RunnerError, OSError, BrokenPipeError):
            pass
        if self.key in EXTRAS:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._err.close()
        else:
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.kill()


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
