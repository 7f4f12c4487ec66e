"""Contestant processes, and the orchestrator's handle on each.

A contestant of the project's venv is a process forked from the preloaded forkserver
(:mod:`bench.core.fresh_process`); an extra is a subprocess of its own venv's python
(:mod:`bench.extras.extra_process`). Both answer the commands of
:func:`bench.core.timing.serve`; the handle samples the memory of the process tree while
a command runs.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.contest.contestants import CONTESTANTS, build_source, is_rank_group
from bench.core.fresh_process import RunnerError, forkserver
from bench.core.main_data import DataPaths
from bench.core.settings import BENCH_DIR, BenchConfig
from bench.core.tree_memory import MemoryPeaks, TreeSampler, snapshot
from bench.extras.venvs import EXTRAS, extra_env

__all__ = ["Builder", "Runner", "ext_spec"]

MARK = "@@BENCH "
#: Builds contestant ``key``'s :class:`bench.core.timing.EpochSource` inside its process;
#: a module-level function, so that it travels to the forked process by name.
Builder = Callable[[str, BenchConfig, DataPaths], Any]


def _child_main(
    conn: Any, key: str, cfg: BenchConfig, paths: DataPaths, build: Builder, slow: bool
) -> None:
    from bench.core.timing import serve

    conn.send({"ready": True})
    serve(conn.recv, conn.send, lambda: build(key, cfg, paths), rebuild_each_run=slow)


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
    entry = BENCH_DIR / "extras" / "extra_process.py"
    return [str(EXTRAS[key].python), str(entry), key, action, spec]


class Runner:
    """One contestant process. ``request`` sends a command and waits for its answer.

    ``build`` makes the contestant in its process (default: the throughput table's
    :func:`bench.contest.contestants.build_source`; a table passes its own for its rows).

    Attributes:
        baseline: Memory of the process tree before ``build`` (after imports).
        peaks: Largest memory seen over all requests.
    """

    def __init__(
        self,
        key: str,
        cfg: BenchConfig,
        paths: DataPaths,
        log_file: Path,
        build: Builder = build_source,
    ):
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
            slow = key in CONTESTANTS and CONTESTANTS[key].slow
            args = (child, key, cfg, paths, build, slow)
            self._proc = ctx.Process(target=_child_main, args=args)
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
