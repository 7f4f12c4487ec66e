"""``python -m bench --larger-than-ram``: a file of 1.3x the machine's RAM, measured.

Writes a synthetic pair `.beton` of at least 1.3x ``psutil.virtual_memory().total``
(refused, with the numbers, when the disk has too little free), then for
``quasi_random`` and ``random``: drop the page cache, 2 epochs (random: 1) with 4 simulated
ranks (one fresh process each, ``prefetch`` default), and reports the bytes read
from storage (``read_bytes`` summed over the ranks) against the bytes the samples
hold, samples/s and each rank's peak memory. The same ``quasi_random`` row on a file
of :data:`SMALL_GIB` (an eighth of a smaller one) is the reference: a rank's own
memory must not grow with the file. The files are deleted at the end.
"""

from __future__ import annotations

import datetime
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

from bench.core.fresh_process import RunnerError
from bench.tables.cold import SHAPE, run_row, write_synthetic

__all__ = ["larger_than_ram", "write_big_report"]

log = logging.getLogger(__name__)

RANKS, EPOCHS = 4, 2
#: Epochs per order: random gets one, to keep the run short (with whole-page prefetch, or
#: 8 MiB fault readahead, it once read the file 15-24 times without finishing an epoch).
ORDER_EPOCHS = {"quasi_random": EPOCHS, "random": 1}
TIMEOUT = 3600.0  # seconds per rank and row
INTERVAL = 2.0  # memory sampling: smaps of a process mapping 30 GiB is slow to read
SMALL_GIB = 2.0  # the RSS reference file
READ_TARGET = 1.1  # quasi_random: bytes read from storage / bytes the samples hold
RSS_SLACK_MIB = 64  # "does not grow": the big file's peak RSS per rank within this of the small


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
    t0 = time.perf_counter()
    path = work / "larger-than-ram.beton"
    small_gib = min(SMALL_GIB, size_gib / 8)  # a short check (--larger-than-ram-gib) scales it
    small = work / f"larger-than-ram-reference-{small_gib:g}gib.beton"
    warmup = work / "cold-warmup.beton"
    rows: dict[str, Any] = {}
    try:
        write_synthetic(small, small_gib)
        write_synthetic(warmup, 0.01)
        reference = run_row(
            small,
            warmup,
            ("ours", "quasi_random", 4, True, RANKS, False),
            EPOCHS,
            timeout=TIMEOUT,  # a short row, a small mapping: sampled at the usual rate
        )
        log.info("larger than RAM: reference %s", reference)
        small.unlink()
        n = write_synthetic(path, size_gib)
        for order, epochs in ORDER_EPOCHS.items():
            try:
                rows[order] = run_row(
                    path,
                    warmup,
                    ("ours", order, 4, True, RANKS, False),
                    epochs,
                    timeout=TIMEOUT,
                    interval=INTERVAL,
                )
            except RunnerError as e:
                rows[order] = {"error": str(e), "epochs": epochs}
            log.info("larger than RAM: %s %s", order, rows[order])
    finally:
        for f in (path, small):
            f.unlink(missing_ok=True)
            Path(f"{f}.json").unlink(missing_ok=True)
    return {
        "ram_bytes": ram,
        "file_gib": size_gib,
        "samples": n,
        "rows": rows,
        "reference": {"file_gib": small_gib, **reference},
        "minutes": (time.perf_counter() - t0) / 60,
    }


def _used(m: dict[str, Any]) -> int:
    return int(m["samples"]) * 2 * math.prod(SHAPE)


def _verdicts(res: dict[str, Any]) -> list[str]:
    """The issue's two targets of this run, as table rows."""
    out = []
    q = res["rows"].get("quasi_random", {})
    if "read_bytes" in q:
        ratio = q["read_bytes"] / _used(q)
        ok = "PASS" if ratio <= READ_TARGET else "MISS"
        out.append(
            f"| quasi_random: bytes read from storage / bytes the samples hold "
            f"| <= {READ_TARGET} | {ratio:.3f} | **{ok}** |"
        )
    ref = res.get("reference", {})
    peaks = [p for m in res["rows"].values() for p in m.get("peak_own_mb", []) if p]
    ref_peaks = [p for p in ref.get("peak_own_mb", []) if p]
    if peaks and ref_peaks:
        grow = max(peaks) - max(ref_peaks)
        ok = "PASS" if grow <= RSS_SLACK_MIB else "MISS"
        out.append(
            f"| a rank's own memory (peak PSS without the mapped file), {res['file_gib']:.1f} "
            f"GiB file minus {ref['file_gib']:g} GiB file, MiB | <= {RSS_SLACK_MIB} "
            f"| {grow:+d} ({max(ref_peaks)} -> {max(peaks)}) | **{ok}** |"
        )
    return out


def write_big_report(res: dict[str, Any], out: Path, date: str | None = None) -> Path:
    """``out/larger-than-ram-<date>.md``."""
    date = date or datetime.date.today().isoformat()
    lines = [
        f"# Larger than RAM ({date})",
        "",
        f"File {res['file_gib']:.1f} GiB ({res['samples']:,} pairs of uint8[3,64,64]) on a "
        f"machine with {res['ram_bytes'] / 2**30:.1f} GiB RAM; page cache dropped first; "
        f"{RANKS} simulated ranks (fresh processes), prefetch 4 (random over a file larger "
        f"than half the RAM: each image's bytes, fault readahead off); epochs per row in the "
        f"table (random gets one, to keep the run short).",
        "",
        f"Command: `python -m bench --larger-than-ram` ({res.get('minutes', 0):.1f} min in all; "
        f"it needs free disk for the file plus 5%).",
        "",
        "| target | goal | measured | verdict |",
        "|---|---|---:|---|",
        *_verdicts(res),
        "",
        "*read / used*: `read_bytes` of `/proc/<pid>/io`, summed over the ranks, over the "
        "image bytes of every sample they delivered (over its epochs). A value near 1 means each "
        "page came from storage once per epoch for the whole node, not once per rank.",
        "",
        "*own*: a rank's peak PSS without the pages of the mapped `.beton` (shared page "
        "cache, reclaimable); *RSS* counts those pages too, up to what the kernel leaves mapped.",
        "",
        "| file | order | epochs | samples/s | read / used | read GiB | used GiB "
        "| peak own MiB per rank | peak RSS MiB per rank |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    named = [(f"{res['file_gib']:.1f} GiB", order, m) for order, m in res["rows"].items()]
    if res.get("reference"):
        ref = res["reference"]
        named.append((f"{ref['file_gib']:g} GiB (RSS reference)", "quasi_random", ref))
    for size, order, m in named:
        if "rate" not in m:
            lines.append(f"| {size} | {order} | {m.get('epochs', '')} | {m} | | | | | |")
            continue
        used = _used(m)
        lines.append(
            f"| {size} | {order} | {m['epochs']} | {m['rate']:,.0f} "
            f"| {m['read_bytes'] / used:.2f} | "
            f"{m['read_bytes'] / 2**30:.2f} | {used / 2**30:.2f} | {m.get('peak_own_mb')} "
            f"| {m['peak_rss_mb']} |"
        )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"larger-than-ram-{date}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
