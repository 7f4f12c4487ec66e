"""The ``--shards`` report's epoch rows: pairs/s of a whole epoch read from 30 shards against
one file of the same samples, with a warm page cache and a cold one.

The samples are photo-sized enough for the page cache to matter (``3x64x64`` uint8, 12 KiB
a pair); each row is a fresh process forked from the preloaded forkserver reading one epoch
in quasi-random order with the loader's defaults. Cold rows run after ``sync; echo 1 >
/proc/sys/vm/drop_caches``, checked with ``fincore`` on every file of the dataset.
"""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path
from typing import Any

from bench.core.fresh_process import call_fresh
from bench.tables.amplification import drop_caches
from bench.tables.cold import resident_bytes

__all__ = ["epoch_lines", "measure_epochs"]

log = logging.getLogger(__name__)
SHAPE = (3, 64, 64)
BATCH = 256


def _write(root: Path, n: int, shards: int) -> str:
    """``shards`` files of ``n`` pairs (a manifest), or one `.beton` for ``shards == 1``."""
    import numpy as np

    from ffcv_pairs import ArraySource, write_pairs
    from ffcv_pairs.format.merging import merge_parts

    target = root / (f"one_{n}.beton" if shards == 1 else f"d{n}_{shards}.json")
    if target.exists():
        return str(target)
    rng = np.random.default_rng(n)
    a = rng.integers(0, 256, (n, *SHAPE), dtype=np.uint8)
    labels = np.arange(n) % 10
    if shards == 1:
        write_pairs(ArraySource(a, 255 - a, labels), target, workers=2, progress=False)
        return str(target)
    cuts = [k * n // shards for k in range(shards + 1)]
    paths = []
    for k in range(shards):
        path = root / f"d{n}_{shards}" / f"s{k:05d}.beton"
        lo, hi = cuts[k], cuts[k + 1]
        src = ArraySource(a[lo:hi], 255 - a[lo:hi], labels[lo:hi])
        write_pairs(src, path, workers=2, progress=False)
        paths.append(path)
    merge_parts(paths, target).save(target)
    return str(target)


def _files(path: str) -> list[Path]:
    if path.endswith(".beton"):
        return [Path(path)]
    from ffcv_pairs.format.shards import DatasetManifest

    return DatasetManifest.load(path).paths(path)


def _epoch(path: str) -> dict[str, float]:
    from ffcv_pairs import make_loader

    loader = make_loader(path, batch_size=BATCH, order="quasi_random", seed=0)
    t0 = time.perf_counter()
    count = sum(len(label) for _, _, label in loader)
    return {"pairs_per_s": count / (time.perf_counter() - t0), "pairs": count}


def measure_epochs(work: Path, n: int, rounds: int) -> dict[str, Any]:
    """Rows ``{"1 file"|"30 shards": {"warm"|"cold": [pairs/s per round]}}``."""
    root = work / "epochs"
    root.mkdir(parents=True, exist_ok=True)
    paths = {
        "1 file": call_fresh(_write, root, n, 1, timeout=3600)[0],
        "30 shards": call_fresh(_write, root, n, 30, timeout=3600)[0],
    }
    call_fresh(_epoch, paths["1 file"])  # kernels and page cache warm
    rows: dict[str, dict[str, list[float]]] = {k: {"warm": [], "cold": []} for k in paths}
    for r in range(rounds):
        for kind in ("cold", "warm"):
            for name, path in paths.items():
                if kind == "cold":
                    why = drop_caches()
                    left = sum(max(0, resident_bytes(f)) for f in _files(path))
                    if why or left:
                        raise RuntimeError(why or f"{left} bytes of {path} still cached")
                else:
                    call_fresh(_epoch, path)  # fills the page cache
                got, _ = call_fresh(_epoch, path, timeout=1800)
                rows[name][kind].append(got["pairs_per_s"])
                log.info(
                    "shards: epoch round %d %s %s: %.0f pairs/s", r, kind, name, got["pairs_per_s"]
                )
    return {"samples": n, "shape": list(SHAPE), "batch_size": BATCH, "rounds": rounds, "rows": rows}


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def epoch_lines(res: dict[str, Any]) -> list[str]:
    """The report's section for :func:`measure_epochs`' result."""
    lines = [
        "",
        f"## A whole epoch: {res['samples']:,} pairs of {'x'.join(map(str, res['shape']))} uint8, "
        "30 shards against one file",
        "",
        f"Quasi-random order, batch {res['batch_size']}, the loader's defaults, one epoch per "
        f"fresh process; cold after `sync; echo 1 > /proc/sys/vm/drop_caches` (every file "
        f"checked with `fincore`). Median of {res['rounds']} interleaved rounds and range.",
        "",
        "| dataset | pairs/s, warm | pairs/s, cold |",
        "|---|---:|---:|",
    ]
    for name, row in res["rows"].items():
        lines.append(f"| {name} | {_cell(row['warm'])} | {_cell(row['cold'])} |")
    return lines
