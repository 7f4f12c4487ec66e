"""The throughput table: every contestant in its own process, interleaved in rounds.

The machine is small and shared, so contestants take turns: each round runs
every contestant once (the order rotates from round to round), the memcpy limit
included, and the report gives the best round (the median too). A contestant
process lives for the whole measurement, so epochs carry on from round to round
as they would in training; the time-boxed ``.pt`` pack rows are rebuilt each round.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.contest.contestants import CONTESTANTS, build_source
from bench.contest.runner import Builder, Runner
from bench.core.fresh_process import RunnerError, call_fresh
from bench.core.main_data import DataPaths
from bench.core.settings import BenchConfig
from bench.core.timing import run_gaps
from bench.core.tree_memory import MemoryPeaks

__all__ = [
    "first_batches",
    "measure_rounds",
    "measure_single",
    "run_rate",
    "start_built",
    "warm_cache",
    "warm_jit",
]

log = logging.getLogger(__name__)


def run_rate(epochs: list[dict[str, Any]]) -> float | None:
    """Steady samples/s of one run: epochs after the first, or after the first batch."""
    full = [e for e in epochs if e["batches"]]
    if not full:
        return None
    if len(full) >= 2 and all(e["complete"] for e in full):
        dt = full[-1]["last"] - full[0]["last"]
        samples = sum(e["samples"] for e in full[1:])
    else:
        dt = full[-1]["last"] - full[0]["first"]
        samples = sum(e["samples"] for e in full) - full[0]["first_n"]
    return samples / dt if dt > 0 and samples > 0 else None


def first_batches(beton: str, batch_size: int, crop: tuple[int, int]) -> int:
    """One batch of every configuration of this project's loader that the rounds use."""
    from ffcv_pairs import PairAugment, make_loader

    aug = PairAugment(hflip=0.5, crop=crop, crop_padding=4)
    n = 0
    for threads in (1, 2):  # 1: the serial kernels (simulated ranks), 2: the parallel ones
        for augment in (None, aug):
            loader = make_loader(beton, batch_size=batch_size, num_threads=threads, augment=augment)
            n += len(next(iter(loader))[2])
            loader.close()
    return n


def warm_jit(cfg: BenchConfig, paths: DataPaths) -> None:
    """Fill this project's numba cache (in a fresh process) before any contestant runs, so
    that no row, and no memory peak, includes compiling: a user compiles once per machine."""
    call_fresh(first_batches, str(paths.beton), cfg.batch_size, tuple(cfg.shape[1:3]))


def warm_cache(paths: DataPaths) -> int:
    """Read every data file once so that throughput rows start with a warm page cache."""
    total = 0
    for p in sorted(Path(paths.root).rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while chunk := f.read(8 << 20):
                    total += len(chunk)
    return total


def _row(key: str) -> dict[str, Any]:
    c = CONTESTANTS.get(key)
    return {
        "key": key,
        "title": c.title if c else key,
        "ours": bool(c and c.ours),
        "slow": bool(c and c.slow),
        "status": "ok",
        "runs": [],
    }


def _run_kwargs(
    cfg: BenchConfig, key: str, time_box: float | None = None, min_batches: int = 1
) -> dict[str, Any]:
    slow = key in CONTESTANTS and CONTESTANTS[key].slow
    return {
        "cmd": "run",
        "min_epochs": 1 if slow else cfg.min_epochs,
        "min_seconds": cfg.min_seconds,
        "time_box": cfg.time_box if time_box is None else time_box,
        "abandon": slow or time_box is not None,
        "min_batches": 3 if slow else min_batches,
    }


def _finish(row: dict[str, Any], runner: Runner | None) -> None:
    rates = [r["rate"] for r in row["runs"] if r["rate"]]
    gaps = [g for r in row["runs"] for g in r["gaps"]]
    row["best"] = max(rates) if rates else None
    row["median"] = statistics.median(rates) if rates else None
    row["gap_s"] = statistics.median(gaps) if gaps else None
    if row["runs"] and row["runs"][0]["epochs"]:
        first = row["runs"][0]["epochs"][0]
        if first["first"] is not None:
            row["first_batch_s"] = first["first"] - first["start"]
    if runner is not None:
        peaks: MemoryPeaks = runner.peaks
        row["memory_mb"] = peaks.to_mb()
        row["baseline_mb"] = runner.baseline.to_mb()
        row["uss_added_mb"] = (peaks.uss - runner.baseline.uss) / (1 << 20)


def _start(
    key: str, cfg: BenchConfig, paths: DataPaths, log_file: Path, build: Builder = build_source
) -> Runner:
    runner = Runner(key, cfg, paths, log_file, build)
    log.info("%s: started (pid %d)", key, runner.pid)
    return runner


def _try_start(
    key: str, cfg: BenchConfig, paths: DataPaths, log_file: Path, build: Builder = build_source
) -> Runner | str:
    try:
        return _start(key, cfg, paths, log_file, build)
    except RunnerError as e:
        return str(e)


def _build(runner: Runner | str) -> tuple[Runner | None, float | str]:
    """``(runner, build seconds)``, or ``(None, why)``."""
    if isinstance(runner, str):
        return None, runner
    try:
        return runner, runner.request({"cmd": "build"})["build_s"]
    except RunnerError as e:
        runner.stop()
        return None, str(e)


def start_built(
    key: str, cfg: BenchConfig, paths: DataPaths, log_file: Path
) -> tuple[Runner | None, float | str]:
    """Start ``key``'s process and build its loader (to run beside other work)."""
    return _build(_try_start(key, cfg, paths, log_file))


def measure_rounds(
    cfg: BenchConfig,
    paths: DataPaths,
    keys: list[str],
    unavailable: dict[str, str],
    log_file: Path,
    early: dict[str, Future[tuple[Runner | None, float | str]]] | None = None,
    after_round: Callable[[], None] | None = None,
    build: Builder = build_source,
) -> dict[str, dict[str, Any]]:
    """Rows of the throughput table, keyed by contestant; ``unavailable`` rows say why.

    ``early``: contestants already being started by :func:`start_built` (the
    simulated ranks, whose interpreters take long to import). ``after_round()``
    runs after each round of every row, while the rows' loaders wait. ``build`` makes
    each row's source in its process (a table with rows of its own passes its builder).
    """
    early = early or {}
    rows = {key: _row(key) for key in keys}
    runners: dict[str, Runner] = {}
    for key, why in unavailable.items():
        rows[key]["status"] = f"could not run: {why}"
    try:
        # Processes start together (extras import in parallel); loaders build one at a time.
        wanted = [k for k in keys if k not in unavailable and k not in early]
        with ThreadPoolExecutor(len(wanted) or 1) as pool:
            started = dict(
                zip(wanted, pool.map(lambda k: _try_start(k, cfg, paths, log_file, build), wanted))
            )
        for key in keys:
            if key in unavailable:
                continue
            runner, built = early[key].result() if key in early else _build(started[key])
            if runner is None:
                rows[key]["status"] = f"could not run: {built}"
                continue
            runners[key] = runner
            rows[key]["build_s"] = built
            rows[key]["info"] = {k: v for k, v in runner.ready.items() if k != "ready"}
        for rnd in range(cfg.rounds):
            live = [k for k in keys if k in runners and rows[k]["status"] == "ok"]
            shift = rnd % max(1, len(live))
            for key in live[shift:] + live[:shift]:
                try:
                    answer = runners[key].request(_run_kwargs(cfg, key))
                except RunnerError as e:
                    rows[key]["status"] = f"failed in round {rnd + 1}: {e}"
                    continue
                epochs = answer["epochs"]
                gaps = answer.get("gaps", run_gaps(epochs))
                run = {"round": rnd + 1, "rate": run_rate(epochs), "gaps": gaps}
                run["epochs"] = epochs
                rows[key]["runs"].append(run)
                log.info("round %d %-14s %s samples/s", rnd + 1, key, _fmt(run["rate"]))
            if after_round is not None:
                after_round()
    finally:
        with ThreadPoolExecutor(len(runners) or 1) as pool:
            list(pool.map(Runner.stop, runners.values()))
    for key in keys:
        _finish(rows[key], runners.get(key))
    return rows


def measure_single(
    key: str, cfg: BenchConfig, paths: DataPaths, seconds: float, log_file: Path
) -> dict[str, Any]:
    """One time-boxed run of ``key`` in a fresh process (the memory table)."""
    row = _row(key)
    runner = None
    try:
        runner = _start(key, cfg, paths, log_file)
        row["build_s"] = runner.request({"cmd": "build"})["build_s"]
        kw = _run_kwargs(cfg, key, time_box=seconds, min_batches=cfg.memory_min_batches)
        answer = runner.request(kw)
        row["killed"] = bool(answer.get("killed"))
        epochs = answer["epochs"]
        row["runs"].append({"round": 1, "rate": run_rate(epochs), "gaps": [], "epochs": epochs})
    except RunnerError as e:
        row["status"] = f"could not run: {e}"
    finally:
        if runner is not None:
            runner.stop()
    _finish(row, runner)
    return row


def _fmt(rate: float | None) -> str:
    return f"{rate:,.0f}" if rate else "-"
