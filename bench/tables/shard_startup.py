"""``python -m bench --shards``: a dataset of many `.beton` shards against one file of the
same samples: start-up (loader construction and first batch) at 1, 30 and 300 shards, and
warm pairs/s; then the conversion rows of :mod:`bench.tables.shard_convert` (a cold
per-sample source against the storage's random read rate, and 4 parts in 4 processes).

Run it (from the repository root)::

    .venv/bin/python -m bench --shards               # 3 rounds (~10 min with making the data)
    .venv/bin/python -m bench --shards --smoke       # 30k samples, 1 round

The samples are the start-up table's tiny ones (``(1, 2, 2)`` uint8), so the row measures
what the loader builds per sample and per shard, not image bytes. The shards are cut from
one set of arrays, each written with its sidecar; a manifest lists them. Every measurement
is a fresh process forked from the preloaded forkserver (imports are not timed), with a
warm kernel cache; rounds are interleaved over the kinds.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

from bench.core.fresh_process import call_fresh
from bench.tables.shard_convert import conversion_lines
from bench.tables.shard_epochs import epoch_lines

__all__ = ["measure_shards", "write_shards_report"]

log = logging.getLogger(__name__)
SHAPE = (1, 2, 2)
BATCH = 256


def _write_dataset(root: Path, n: int, shards: int) -> Path:
    """``shards`` files of about ``n / shards`` samples and their manifest (reused)."""
    import numpy as np

    from ffcv_pairs import ArraySource, write_pairs
    from ffcv_pairs.format.merging import merge_parts

    manifest = root / f"d{n}_{shards}.json"
    if manifest.exists():
        return manifest
    rng = np.random.default_rng(n)
    a = rng.integers(0, 256, (n, *SHAPE), dtype=np.uint8)
    b = 255 - a
    labels = np.arange(n) % 10
    cuts = [k * n // shards for k in range(shards + 1)]
    paths = []
    for k in range(shards):
        lo, hi = cuts[k], cuts[k + 1]
        path = root / f"d{n}_{shards}" / f"s{k:05d}.beton"
        src = ArraySource(a[lo:hi], b[lo:hi], labels[lo:hi])
        write_pairs(src, path, workers=1, progress=False, page_size=1 << 20)
        paths.append(path)
    merge_parts(paths, manifest).save(manifest)
    return manifest


def _start_once(path: str) -> dict[str, float]:
    from ffcv_pairs import make_loader

    t0 = time.perf_counter()
    loader = make_loader(path, batch_size=BATCH, order="quasi_random", seed=0)
    t1 = time.perf_counter()
    it = iter(loader)
    next(it)
    t2 = time.perf_counter()
    for _ in range(40):
        next(it)
    t3 = time.perf_counter()
    return {"build_s": t1 - t0, "first_batch_s": t2 - t1, "pairs_per_s": 40 * BATCH / (t3 - t2)}


def measure_shards(work: Path, n: int, counts: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Rows ``{shards: [measurement per round]}``."""
    work.mkdir(parents=True, exist_ok=True)
    paths = {}
    for shards in counts:
        t = time.perf_counter()
        paths[shards], _ = call_fresh(_write_dataset, work, n, shards, timeout=3600)
        log.info("shards: %d x %d ready in %.0f s", shards, n // shards, time.perf_counter() - t)
    call_fresh(_start_once, str(paths[counts[0]]))  # kernel cache warm-up
    rows: dict[str, list[dict[str, float]]] = {str(s): [] for s in counts}
    for r in range(rounds):
        for shards in counts:
            got, _ = call_fresh(_start_once, str(paths[shards]))
            rows[str(shards)].append(got)
            log.info("shards: round %d, %d shards: %s", r, shards, got)
    return {"samples": n, "shape": list(SHAPE), "batch_size": BATCH, "rounds": rounds, "rows": rows}


def _cell(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    return f"{med:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def write_shards_report(res: dict[str, Any], out: Path, date: str) -> Path:
    """``shards-<date>.md`` and ``.json`` in ``out``; returns the markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Shards: one dataset of many `.beton` files ({date})",
        "",
        f"`{res['command']}`",
        "",
        f"{res['samples']:,} samples of {res['shape']} uint8, batch {res['batch_size']}, "
        f"quasi-random order, warm kernel cache; each cell is the median of {res['rounds']} "
        f"fresh processes (interleaved) and its range.",
        "",
        "| shards | make_loader (s) | first batch (s) | start-up total (s) | pairs/s, 40 batches |",
        "|---:|---:|---:|---:|---:|",
    ]
    for shards, runs in res["rows"].items():
        build = [r["build_s"] for r in runs]
        first = [r["first_batch_s"] for r in runs]
        total = [r["build_s"] + r["first_batch_s"] for r in runs]
        speed = [r["pairs_per_s"] for r in runs]
        lines.append(
            f"| {shards} | {_cell(build, '.2f')} | {_cell(first, '.2f')} | "
            f"{_cell(total, '.2f')} | {_cell(speed, ',.0f')} |"
        )
    if "epochs" in res:
        lines += epoch_lines(res["epochs"])
    if "conversion" in res:
        lines += conversion_lines(res["conversion"])
    lines += ["", f"Machine: {res.get('machine', '?')}", ""]
    md = out / f"shards-{date}.md"
    md.write_text("\n".join(lines))
    (out / f"shards-{date}.json").write_text(json.dumps(res, indent=1))
    return md
