"""Table c: total memory of simulated ranks on the per-sample ``.pt`` files, beside ours.

For each ``w`` of ``cfg.memory_workers``: ``cfg.world_size`` ranks, each a per-sample
``.pt`` ``DataLoader`` with ``w`` worker processes, one time-boxed run in a fresh process
(:func:`bench.contest.rounds.measure_single`). A configuration whose memory, estimated
from the 4-worker row, would need more than half of the free memory is skipped, with the
numbers. Ours is the 4-rank row of the throughput table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.core.main_data import DataPaths
from bench.core.settings import BenchConfig

__all__ = ["measure_memory_table"]


def measure_memory_table(
    cfg: BenchConfig, paths: DataPaths, throughput: dict[str, Any], log_file: Path
) -> dict[str, Any]:
    """Rows of table c, keyed ``pt_ranks_w<w>``, and ``ours_4ranks`` from ``throughput``."""
    import psutil

    from bench.contest.rounds import measure_single

    rows: dict[str, Any] = {}
    for w in cfg.memory_workers:
        key = f"pt_ranks_w{w}"
        title = f"{cfg.world_size} ranks x {w} DataLoader workers, per-sample .pt"
        if w > 4 and "pt_ranks_w4" in rows and rows["pt_ranks_w4"].get("memory_mb"):
            pss4 = rows["pt_ranks_w4"]["memory_mb"]["pss"] * (1 << 20)
            need = pss4 * (w + 1) / 5
            avail = psutil.virtual_memory().available
            if need > avail / 2:
                rows[key] = {"skipped": f"needs ~{need / 2**30:.1f} GiB, {avail / 2**30:.1f} free"}
                continue
        rows[key] = measure_single(key, cfg, paths, cfg.memory_seconds, log_file)
        rows[key]["title"] = title
    if "ours_4ranks" in throughput:
        rows["ours_4ranks"] = throughput["ours_4ranks"]
    return rows
