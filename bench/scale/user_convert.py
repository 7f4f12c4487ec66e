"""Step 2 of ``--user-scale``: the writer's command line as the user runs it, measured (once
per size, with ``--limit N``).

Wall time, pairs/s, the writer's own time inside ``write_pairs`` (parsed from its
summary line) and before it (interpreter, imports, listing the folder), a separate
``os.scandir`` of the folder and a separate import of the writer's modules, the
peak RSS of the writer or its largest worker (``wait4``'s ``ru_maxrss``) and RSS/PSS
sums over its process tree (sampled). Stopped, with its workers, at a time cap or
on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from bench.core.settings import BENCH_DIR
from bench.core.tree_memory import MB, TreeSampler
from bench.scale.user_node import kill_trees

__all__ = ["SUMMARY", "WRITER_IMPORTS", "convert", "listing"]

REPO = BENCH_DIR.parent

log = logging.getLogger(__name__)


def listing(src: Path) -> dict[str, Any]:
    t = time.perf_counter()
    with os.scandir(src) as it:
        count = sum(1 for _ in it)
    return {"seconds": time.perf_counter() - t, "entries": count}


WRITER_IMPORTS = "import torch, ffcv_pairs.cli, ffcv_pairs.write.writer, ffcv_pairs.write.sources"


def _import_s() -> float:
    """Seconds a fresh interpreter takes to import what the writer's command imports."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", WRITER_IMPORTS], check=True, env=_env(), cwd=REPO)
    return time.perf_counter() - t


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


SUMMARY = re.compile(r"wrote (\S+): (\d+) pairs .* in ([\d.]+) s \(([\d,]+) pairs/s[,)]")
_PROGRESS = re.compile(r"(\d+)/(\d+) \[")


def _wait(pid: int, deadline: float) -> tuple[int | None, Any]:
    """``(status, rusage)`` of child ``pid`` once it exits; ``(None, None)`` at the deadline."""
    while time.perf_counter() < deadline:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage
        time.sleep(0.2)
    return None, None


def _stop(pid: int) -> tuple[int, Any]:
    """SIGKILL child ``pid`` and its workers; reap it here (for its rusage), then make sure
    the workers, now orphans, are gone."""
    root = psutil.Process(pid)
    workers = tuple(root.children(recursive=True))
    for p in (root, *workers):
        with contextlib.suppress(psutil.Error):
            p.kill()
    status, usage = os.wait4(pid, 0)[1:]
    if kill_trees([], workers):
        log.error("user-scale: a worker of the writer (pid %d) did not stop", pid)
    return status, usage


def convert(
    src: Path,
    beton: Path,
    n: int,
    workers: int,
    cap: float,
    *,
    limit: int | None = None,
    probe: bool = True,
) -> dict[str, Any]:
    """``writers/write_beton.py SRC OUT --split train --workers W [--limit N]`` as a
    subprocess, timed, its process tree's memory sampled, stopped after ``cap`` seconds; writes
    ``beton`` (its folder is ``OUT``) and the writer's stdout and stderr beside that folder
    (``<OUT>-writer.out``, ``.err``). ``n``: the pairs it writes (for pairs/s). ``probe``: time
    an ``os.scandir`` of ``src`` and the writer's imports apart, first."""
    out_dir = beton.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(REPO / "writers" / "write_beton.py"), str(src), str(out_dir)]
    cmd += ["--split", beton.stem, "--workers", str(workers)]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    res: dict[str, Any] = {"command": " ".join(["writers/write_beton.py", *cmd[2:]]), "cap_s": cap}
    if probe:
        res["listing"] = listing(src)
        res["import_s"] = _import_s()
    logs = tuple(out_dir.parent / f"{out_dir.name}-writer.{k}" for k in ("out", "err"))
    status: int | None = None
    with open(logs[0], "w") as fo, open(logs[1], "w") as fe:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=REPO, env=_env())
        try:
            with TreeSampler(proc.pid) as sampler:
                status, usage = _wait(proc.pid, t + cap)
        finally:  # the cap, Ctrl-C: stop the writer and its workers (not yet reaped)
            if status is None:
                status, usage = _stop(proc.pid)
                res["stopped"] = f"stopped at the cap of {cap:.0f} s"
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t
    out, err = (p.read_text(errors="replace") for p in logs)
    res.update(
        wall_s=wall,
        rate=n / wall if proc.returncode == 0 else None,
        returncode=proc.returncode,
        maxrss_mb=usage.ru_maxrss * 1024 / MB,  # the writer or its largest reaped worker
        tree=sampler.peaks.to_mb(),
        beton_bytes=beton.stat().st_size if beton.exists() else None,
    )
    m = SUMMARY.search(out)
    if m:
        res["pairs"] = int(m.group(2))
        res["inside_s"] = float(m.group(3))
        res["outside_s"] = wall - res["inside_s"]
    elif proc.returncode and proc.returncode < 0:
        res["error"] = f"killed by signal {-proc.returncode}"
    elif proc.returncode:
        res["error"] = (err.strip().splitlines() or ["no output"])[-1][-300:]
    done = _PROGRESS.findall(err.replace("\r", "\n"))
    if done and "inside_s" not in res:
        res["progress"] = f"{int(done[-1][0]):,} of {int(done[-1][1]):,} pairs"
    return res
