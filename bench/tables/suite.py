"""Every table of ``python -m bench``, in order, into one report (the CLI is :mod:`bench.run`).

It generates the data (seeded) under ``cfg.work``, runs the contestants interleaved in
rounds (the throughput table), then the tables asked for: a start-up, b writer, c memory,
d cold cache and read amplification, e augmentation ops. It judges the targets and writes
``<kind>-<date>.md``, ``.json``, ``-throughput.png`` and ``-memory.png`` into ``cfg.out``
(:func:`report_kind`; ``bench/results/README.md`` lists the latest of each kind).
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.core.settings import BenchConfig

__all__ = ["TABLES", "TABLE_NAMES", "render_again", "report_kind", "run_suite"]

#: The ``--tables`` letters, and each table's name: the kind of a report of it alone.
TABLE_NAMES = {"a": "startup", "b": "writer", "c": "memory", "d": "cold", "e": "augops"}
TABLES = "".join(TABLE_NAMES)


def report_kind(keys: list[str], tables: str) -> str:
    """The first part of a report's name: ``bench``, unless only the memcpy limit raced.

    A run of ``--only memcpy`` (the limit every table reads beside it) is named for its
    tables, in table order: ``--tables e`` gives ``augops``, ``--tables eb``
    ``writer-augops``; with no table it is ``bench`` again.
    """
    if keys == ["memcpy"] and tables:
        return "-".join(name for letter, name in TABLE_NAMES.items() if letter in tables)
    return "bench"


def _extras(cfg: BenchConfig) -> tuple[dict[str, Any], dict[str, str]]:
    """Status of each extra, and why each one that cannot run cannot."""
    from bench.extras.venvs import extras_status

    status = extras_status(cfg.extras)
    return status, {n: st["why"] for n, st in status.items() if not st["version"]}


def _image_bytes(cfg: BenchConfig) -> int:
    import numpy as np

    return int(np.prod(cfg.shape)) * np.dtype(cfg.dtype).itemsize


def run_suite(cfg: BenchConfig, keys: list[str], tables: str, command: str, date: str) -> Path:
    """Everything ``keys`` and ``tables`` ask for; returns the markdown report's path."""
    from bench.contest.rounds import measure_rounds, start_built, warm_cache, warm_jit
    from bench.core.fresh_process import forkserver
    from bench.core.machine import describe_machine
    from bench.core.main_data import prepare_data
    from bench.tables.amplification import measure_amplification
    from bench.tables.augops import measure_augops
    from bench.tables.charts import draw_charts
    from bench.tables.cold import measure_cold_table
    from bench.tables.memory_table import measure_memory_table
    from bench.tables.report import write_report
    from bench.tables.startup import measure_startup
    from bench.tables.targets import evaluate_targets
    from bench.tables.writer_table import measure_writer

    t0 = time.perf_counter()
    forkserver()
    cfg.work.mkdir(parents=True, exist_ok=True)
    log_file = cfg.work / "extras.log"
    paths, data_s = prepare_data(cfg)
    warm_jit(cfg, paths)
    # The simulated ranks import for long: start them while the others start and warm up.
    early_pool = ThreadPoolExecutor(1)
    early = {}
    if "ours_4ranks" in keys:
        early["ours_4ranks"] = early_pool.submit(start_built, "ours_4ranks", cfg, paths, log_file)
    extras, unavailable = _extras(cfg)
    warm_cache(paths)
    res: dict[str, Any] = {
        "date": date,
        "label": cfg.label,
        "command": command,
        "config": asdict(cfg),
        "machine": describe_machine(),
        "extras": extras,
        "data": {"seconds": data_s, "sample_bytes": 2 * _image_bytes(cfg)},
    }
    unavailable = {k: v for k, v in unavailable.items() if k in keys}
    res["throughput"] = measure_rounds(cfg, paths, keys, unavailable, log_file, early)
    early_pool.shutdown()
    if "a" in tables:
        res["startup"] = measure_startup(cfg)
    if "b" in tables:
        res["writer"] = measure_writer(cfg)
    if "c" in tables:
        res["memory"] = measure_memory_table(cfg, paths, res["throughput"], log_file)
    if "d" in tables:
        res["cold"] = measure_cold_table(cfg.work, cfg.cold_gib, cfg.cold_cache)
        res["amplification"] = measure_amplification(cfg, paths)
    if "e" in tables:
        res["augops"] = measure_augops(cfg, log_file)
    res["targets"] = evaluate_targets(res)
    res["elapsed_s"] = time.perf_counter() - t0
    name = f"{report_kind(keys, tables)}-{date}"
    md = write_report(res, cfg.out, name, draw_charts(res, cfg.out, name))
    if not cfg.keep_data:
        shutil.rmtree(cfg.work / "data", ignore_errors=True)
        shutil.rmtree(cfg.work / "startup", ignore_errors=True)
    return md


def render_again(path: Path, out: Path | None = None) -> Path:
    """Re-write the report and charts of a finished run from its JSON (no measuring), named
    as the JSON is, into ``out`` (default: beside it); returns the markdown's path."""
    from bench.tables.charts import draw_charts
    from bench.tables.report import write_report
    from bench.tables.targets import evaluate_targets

    res = json.loads(path.read_text())
    res["targets"] = evaluate_targets(res)
    out = out or path.parent
    return write_report(res, out, path.stem, draw_charts(res, out, path.stem))
