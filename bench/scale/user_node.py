"""Run one row of simulated ranks on this node: spawn, watch memory, stop everything.

While the ranks run, two threads of the harness watch them:

* a sampler sums RSS, USS and PSS over every rank and all its descendants
  (DataLoader workers) about twice a second (less often when one sample is slow:
  at most a third of one core), with ``pss_own`` (PSS without mapped dataset files,
  see :mod:`bench.core.tree_memory`) for rows that map their data;
* a watchdog reads ``MemAvailable`` five times a second and, below the floor, kills
  every process of the row at once: the row is reported as stopped, with the PSS
  it had reached.

Whatever happens (the ranks finish, the deadline passes, the watchdog fires,
Ctrl-C), every process of the row is killed before :func:`run_row` returns. The deadline
is ``spec.cap`` (start-up allowance + time box) plus ``ROW_MARGIN_S`` after launch: a row
that never gets a batch, or crawls just above the memory floor, ends there.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import socket
import threading
import time
from typing import Any

import psutil

from bench.core.tree_memory import own_pss
from bench.scale.user_ranks import RowSpec, rank_main

__all__ = ["ROW_MARGIN_S", "kill_trees", "run_row"]

GIB = 1 << 30
MIB = 1 << 20
_FIELDS = ("rss", "uss", "pss", "pss_own")
ROW_MARGIN_S = 10.0  # after spec.cap: the ranks' own stop, their last report


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tree(roots: list[psutil.Process]) -> list[psutil.Process]:
    """``roots`` and their descendants; a root whose pid now names another process (it
    exited and was reaped) is skipped, as psutil compares creation times."""
    out: list[psutil.Process] = []
    for root in roots:
        with contextlib.suppress(psutil.Error):
            if root.is_running():
                out += [root, *root.children(recursive=True)]
    return out


def kill_trees(roots: list[psutil.Process], extra: tuple[psutil.Process, ...] = ()) -> int:
    """SIGKILL every process under (and including) ``roots``, and ``extra`` (processes
    seen in the tree earlier: a worker whose rank exited leaves the tree); returns how
    many are still alive (0 when all are gone)."""
    for _ in range(3):
        procs = _tree(roots) + [p for p in extra if p.is_running()]
        if not procs:
            return 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()  # psutil refuses when the pid was reused
        psutil.wait_procs(procs, timeout=5)
    return len(_tree(roots)) + sum(p.is_running() for p in extra)


def _memory(
    roots: list[psutil.Process], maps: bool, seen: dict[int, psutil.Process]
) -> dict[str, int]:
    out = dict.fromkeys(("procs", *_FIELDS), 0)
    for p in _tree(roots):
        seen.setdefault(p.pid, p)
        try:
            info = p.memory_full_info()
        except psutil.Error:
            continue
        pss = getattr(info, "pss", 0)
        out["rss"] += info.rss
        out["uss"] += info.uss
        out["pss"] += pss
        out["pss_own"] += own_pss(p, pss) if maps else pss
        out["procs"] += 1
    return out


class _Watch:
    """The sampler and the watchdog threads of one row."""

    def __init__(self, roots: list[psutil.Process], maps: bool, floor: int):
        self.roots, self.maps, self.floor = roots, maps, floor
        self.series: list[tuple[float, dict[str, int]]] = []
        self.seen: dict[int, psutil.Process] = {}
        self.min_available = psutil.virtual_memory().available
        self.tripped: int | None = None
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=f, daemon=True) for f in (self._sample, self._guard)
        ]

    def _sample(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            m = _memory(self.roots, self.maps, self.seen)
            if m["procs"]:
                self.series.append((t, m))
            cost = time.perf_counter() - t
            self._stop.wait(max(0.5, 3 * cost))

    def _guard(self) -> None:
        while not self._stop.is_set():
            avail = psutil.virtual_memory().available
            self.min_available = min(self.min_available, avail)
            if avail < self.floor:
                self.tripped = avail
                kill_trees(self.roots, tuple(self.seen.values()))
                return
            self._stop.wait(0.2)

    def __enter__(self) -> _Watch:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def _rank_rate(st: dict[str, Any]) -> float | None:
    dt = st.get("t_last", 0.0) - st.get("t_first", 0.0)
    samples = st.get("samples", 0) - st.get("first_n", 0)
    return samples / dt if dt > 0 and samples > 0 else None


def _summary(series: list[tuple[float, dict[str, int]]], since: float | None) -> dict[str, Any]:
    if not series:
        return {}
    peak: dict[str, float] = {k: max(m[k] for _, m in series) / MIB for k in _FIELDS}
    peak["procs"] = max(m["procs"] for _, m in series)
    steady = [m for t, m in series if since is None or t >= since] or [series[-1][1]]
    mean = {k: sum(m[k] for m in steady) / len(steady) / MIB for k in _FIELDS}
    last = series[-1][1]["pss"] / MIB
    return {"peak_mb": peak, "mean_mb": mean, "samples": len(series), "last_pss_mb": last}


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie. (``multiprocessing``'s ``is_alive()`` stays True for a
    child that psutil reaped after killing it.)"""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _gather(
    results: Any, roots: list[psutil.Process], deadline: float, watch: _Watch
) -> tuple[dict, str | None]:
    """The last counters of every rank, until all finished (or died), the watchdog fired or
    the deadline passed; and why it stopped early (``None``: it did not)."""
    latest: dict[int, dict[str, Any]] = {}
    dead: set[int] = set()
    while True:
        with contextlib.suppress(queue.Empty):
            while True:
                msg = results.get(timeout=0.25)
                latest[msg["rank"]] = msg
        for r, root in enumerate(roots):
            final = latest.get(r, {}).get("done") or "error" in latest.get(r, {})
            if not final and r in dead:  # dead, and the queue drained once since
                latest.setdefault(r, {"rank": r})["error"] = "rank exited without an answer"
            elif not final and not _alive(root):
                dead.add(r)
        finished = [st for st in latest.values() if st.get("done") or "error" in st]
        if len(finished) == len(roots):
            return latest, None
        if watch.tripped is not None:
            return latest, "memory"
        if time.perf_counter() > deadline:
            return latest, "deadline"


def run_row(spec: RowSpec, *, floor_gib: float) -> dict[str, Any]:
    """Run ``spec`` on ``spec.world_size`` spawned ranks; every process is gone afterwards,
    at the latest ``spec.cap + ROW_MARGIN_S`` seconds after launch (plus killing them).

    Args:
        spec: The row.
        floor_gib: Stop the row when ``MemAvailable`` drops below this.

    Returns:
        Per-rank counters and times, the node's samples/s (sum over ranks, after each
        rank's first batch), ``life_rate``: the samples ``delivered`` by all ranks over ``life_s``,
        the seconds from launch until the row finished or was stopped (start-up included:
        what a row that was stopped before its ranks' second batch still tells), memory
        (peak and mean, MiB), ``stopped`` (``None``, ``"memory"`` or ``"deadline"``).
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=rank_main, args=(spec, r, port, results), name=f"user-rank{r}")
        for r in range(spec.world_size)
    ]
    t0 = time.perf_counter()
    roots: list[psutil.Process] = []
    watch = _Watch(roots, spec.kind == "ours", int(floor_gib * GIB))
    try:
        for p in procs:
            p.start()
            roots.append(psutil.Process(p.pid))  # before anything can reap it
        with watch:
            latest, stopped = _gather(results, roots, t0 + spec.cap + ROW_MARGIN_S, watch)
        life_s = time.perf_counter() - t0
    finally:
        left = kill_trees(roots, tuple(watch.seen.values()))
        for p in procs:
            p.join(timeout=10)
        results.close()
    ranks = [latest.get(r, {"rank": r, "error": "no answer"}) for r in range(spec.world_size)]
    for st in ranks:
        st["rate"] = _rank_rate(st)
        if "build_s" in st and "first_batch_s" in st:
            st["startup_s"] = st["build_s"] + st["first_batch_s"]
    rates = [st["rate"] for st in ranks]
    firsts = [st["t_first"] for st in ranks if "t_first" in st]
    delivered = sum(st.get("samples", 0) for st in ranks)
    return {
        "kind": spec.kind,
        "title": spec.title,
        "workers": spec.workers,
        "ranks": ranks,
        "rate": sum(r for r in rates if r) if all(rates) else None,
        "life_rate": delivered / life_s if delivered else None,
        "life_s": life_s,
        "delivered": delivered,
        "memory": _summary(watch.series, max(firsts) if len(firsts) == len(ranks) else None),
        "series": [(t - t0, m["pss"] / MIB) for t, m in watch.series],
        "stopped": stopped,
        "min_available_gib": watch.min_available / GIB,
        "tripped_gib": None if watch.tripped is None else watch.tripped / GIB,
        "left_alive": left,
        "budget_s": spec.cap + ROW_MARGIN_S,
        "wall_s": time.perf_counter() - t0,
    }
