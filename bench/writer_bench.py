"""Writer throughput: ``write_pairs`` on the per-sample ``.pt`` folder vs only reading it.

Both sides use 2 processes and read the first ``n`` samples (three ``torch.load``
calls each). Run at two ``n`` to show the writer's peak RSS does not grow with
``n``. Each measurement runs in a fresh process.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import resource
import time
from pathlib import Path
from typing import Any

from .config import BenchConfig
from .data import DataPaths
from .memory import MB
from .runner import RunnerError, call_fresh

__all__ = ["measure_writer", "read_sources", "write_once"]

log = logging.getLogger(__name__)

_ROOT = ""


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _peaks(rss0: int) -> dict[str, float]:
    """Peak RSS of this process and of its largest (forked) worker, absolute and added.

    Added = peak - this process's RSS before the job (what a fork starts with).
    """
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {
        "peak_rss_mb": own / MB,
        "worker_peak_rss_mb": kids / MB,
        "peak_rss_added_mb": (own - rss0) / MB,
        "worker_peak_rss_added_mb": max(0, kids - rss0) / MB,
    }


def write_once(pt_dir: str, out: str, n: int) -> dict[str, Any]:
    """``write_pairs(open_source(pt_dir, "train"), out, workers=2, limit=n)``."""
    from ffcv_pairs import open_source, write_pairs

    rss0 = _rss()
    t = time.perf_counter()
    report = write_pairs(open_source(pt_dir, "train"), out, workers=2, limit=n, progress=False)
    seconds = time.perf_counter() - t
    Path(out).unlink()
    Path(out + ".json").unlink(missing_ok=True)
    size = report.file_size / MB
    return {"seconds": seconds, "rate": n / seconds, "file_mb": size, **_peaks(rss0)}


def _load_range(bounds: tuple[int, int]) -> int:
    import torch

    for i in range(*bounds):
        for kind in ("A_images", "B_images", "labels"):
            torch.load(f"{_ROOT}/train_{kind}_{i}.pt", weights_only=True)
    return bounds[1] - bounds[0]


def read_sources(pt_dir: str, n: int) -> dict[str, Any]:
    """Only the reading: ``torch.load`` of every sample's three files, in 2 processes."""
    global _ROOT
    _ROOT = pt_dir
    step = 256
    rss0 = _rss()
    t = time.perf_counter()
    with mp.get_context("fork").Pool(2) as pool:
        done = sum(
            pool.imap_unordered(_load_range, [(s, min(n, s + step)) for s in range(0, n, step)])
        )
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "rate": done / seconds, **_peaks(rss0)}


def measure_writer(cfg: BenchConfig, paths: DataPaths) -> dict[str, Any]:
    """``{n: {"write": ..., "read": ...}}`` for each of ``cfg.writer_sizes``."""
    rows: dict[str, Any] = {}
    out = str(cfg.work / "writer.beton")
    for n in cfg.writer_sizes:
        row: dict[str, Any] = {}
        for name, func, args in (
            ("read", read_sources, (str(paths.pt_dir), n)),
            ("write", write_once, (str(paths.pt_dir), out, n)),
        ):
            try:
                result, peaks = call_fresh(func, *args)
                result["uss_sum_mb"] = peaks.uss / MB
                result["pss_sum_mb"] = peaks.pss / MB
            except RunnerError as e:
                result = {"error": str(e)}
            row[name] = result
            log.info("writer: n=%d %s %s", n, name, result.get("rate", result.get("error")))
        rows[str(n)] = row
    return rows
