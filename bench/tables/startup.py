"""Start-up at scale: loader construction, first batch and added memory at 30k .. 3M samples.

Each measurement runs in a fresh process (forked from the preloaded forkserver,
so imports are not timed). One warm-up run of this project's loader comes first
so that its numba cache exists; upstream FFCV compiles its pipeline in every
process, which is part of its first batch.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from bench.core.fresh_process import RunnerError, call_fresh
from bench.core.main_data import write_tiny_beton
from bench.core.settings import BenchConfig
from bench.core.tree_memory import MB, vm_hwm

__all__ = ["STARTUP_KINDS", "measure_startup", "startup_once"]

log = logging.getLogger(__name__)

STARTUP_KINDS = {
    "ffcv_random": "upstream ffcv Loader, RANDOM",
    "ffcv_quasi": "upstream ffcv Loader, QUASI_RANDOM",
    "ours": "ffcv-pairs make_loader, quasi_random",
}


def startup_once(kind: str, path: str, batch_size: int) -> dict[str, Any]:
    """Build one loader and take one batch; seconds and memory added (MB)."""
    import psutil

    me = psutil.Process()
    before = me.memory_full_info()
    t0 = time.perf_counter()
    if kind == "ours":
        from ffcv_pairs import make_loader

        loader: Any = make_loader(path, batch_size=batch_size, order="quasi_random", seed=0)
    else:
        from ffcv.loader import Loader, OrderOption

        order = OrderOption.RANDOM if kind == "ffcv_random" else OrderOption.QUASI_RANDOM
        cores = len(os.sched_getaffinity(0))
        loader = Loader(path, batch_size=batch_size, num_workers=cores, order=order, os_cache=True)
    t1 = time.perf_counter()
    it = iter(loader)
    batch = next(it)
    t2 = time.perf_counter()
    after = me.memory_full_info()
    rows = int(batch[2].shape[0])
    del batch, it
    return {
        "build_s": t1 - t0,
        "first_batch_s": t2 - t1,
        "total_s": t2 - t0,
        "rss_added_mb": (after.rss - before.rss) / MB,
        "peak_rss_added_mb": (vm_hwm(os.getpid()) - before.rss) / MB,
        "uss_added_mb": (after.uss - before.uss) / MB,
        "batch_rows": rows,
    }


def measure_startup(cfg: BenchConfig) -> dict[str, Any]:
    """Rows ``{size: {kind: measurement}}`` plus the file sizes and write times."""
    root = cfg.work / "startup"
    root.mkdir(parents=True, exist_ok=True)
    files: dict[int, Path] = {}
    write_s: dict[int, float] = {}
    for n in cfg.startup_sizes:
        t = time.perf_counter()
        files[n] = write_tiny_beton(root / f"tiny_{n}.beton", n, cfg.startup_shape, cfg.seed)
        write_s[n] = time.perf_counter() - t
        log.info("startup: %d samples ready in %.1f s", n, write_s[n])
    smallest = files[min(files)]
    call_fresh(startup_once, "ours", str(smallest), cfg.batch_size)  # numba cache warm-up
    rows: dict[str, dict[str, Any]] = {}
    for n, path in files.items():
        rows[str(n)] = {}
        for kind in STARTUP_KINDS:
            try:
                result, _ = call_fresh(startup_once, kind, str(path), cfg.batch_size)
            except RunnerError as e:
                result = {"error": str(e)}
            rows[str(n)][kind] = result
            log.info("startup: %d %s %s", n, kind, result.get("total_s", result.get("error")))
    return {
        "rows": rows,
        "shape": list(cfg.startup_shape),
        "file_mb": {str(n): p.stat().st_size / MB for n, p in files.items()},
        "write_s": {str(n): s for n, s in write_s.items()},
    }
