"""``python -m bench --larger-than-ram``: a file of 1.3x the machine's RAM, measured.

Writes a synthetic pair `.beton` of at least 1.3x ``psutil.virtual_memory().total``
(refused, with the numbers, when the disk has too little free), then for
``quasi_random`` and ``random``: drop the page cache, 2 epochs with 4 simulated
ranks (one fresh process each, ``prefetch`` default), and reports the bytes read
from storage (``read_bytes`` summed over the ranks) against the bytes the samples
hold, samples/s and each rank's peak RSS. The file is deleted at the end.
"""

from __future__ import annotations

import datetime
import logging
import shutil
from pathlib import Path
from typing import Any

from .cold import run_row, write_synthetic

__all__ = ["larger_than_ram", "write_big_report"]

log = logging.getLogger(__name__)

RANKS, EPOCHS = 4, 2


def larger_than_ram(work: Path, gib: float | None = None) -> dict[str, Any]:
    """Measure; ``gib`` overrides the size. Raises ValueError when the disk is too small."""
    import psutil

    ram = psutil.virtual_memory().total
    size_gib = gib if gib is not None else 1.3 * ram / 2**30
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    need = int(size_gib * 2**30 * 1.05) + (1 << 30)
    if free < need:
        raise ValueError(
            f"--larger-than-ram needs {need / 2**30:.1f} GiB free in {work} for a "
            f"{size_gib:.1f} GiB file (1.3x {ram / 2**30:.1f} GiB RAM); only {free / 2**30:.1f} "
            "GiB free: free some, or point --work at a bigger disk"
        )
    path = work / "larger-than-ram.beton"
    warmup = work / "cold-warmup.beton"
    rows: dict[str, Any] = {}
    try:
        n = write_synthetic(path, size_gib)
        write_synthetic(warmup, 0.01)
        for order in ("quasi_random", "random"):
            rows[order] = run_row(path, warmup, ("ours", order, 4, True, RANKS, False), EPOCHS)
            log.info("larger than RAM: %s %s", order, rows[order])
    finally:
        path.unlink(missing_ok=True)
        Path(f"{path}.json").unlink(missing_ok=True)
    return {"ram_bytes": ram, "file_gib": size_gib, "samples": n, "rows": rows}


def write_big_report(res: dict[str, Any], out: Path, date: str | None = None) -> Path:
    """``out/larger-than-ram-<date>.md``."""
    date = date or datetime.date.today().isoformat()
    lines = [
        f"# Larger than RAM ({date})",
        "",
        f"File {res['file_gib']:.1f} GiB ({res['samples']:,} pairs of uint8[3,64,64]) on a "
        f"machine with {res['ram_bytes'] / 2**30:.1f} GiB RAM; page cache dropped first; "
        f"{EPOCHS} epochs, {RANKS} simulated ranks (fresh processes), prefetch 4.",
        "",
        "| order | samples/s | read / used | read GiB | used GiB | peak RSS per rank MiB |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for order, m in res["rows"].items():
        if "rate" not in m:
            lines.append(f"| {order} | {m} | | | | |")
            continue
        used = m["samples"] * 2 * 3 * 64 * 64
        lines.append(
            f"| {order} | {m['rate']:,.0f} | {m['read_bytes'] / used:.2f} | "
            f"{m['read_bytes'] / 2**30:.2f} | {used / 2**30:.2f} | {m['peak_rss_mb']} |"
        )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"larger-than-ram-{date}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
