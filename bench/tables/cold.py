"""Cold-epoch table: every row a fresh process on a file just dropped from the page cache.

A file of ``cfg.cold_gib`` GiB (pairs of uint8[3, 64, 64]) is written once. Before
every row: ``sync; echo 1 > /proc/sys/vm/drop_caches``, then ``fincore`` must show
the file out of the cache (a live mapping would keep its pages: the row is marked
"not cold" otherwise). Each row runs one epoch in a fresh process, loader built
and JIT loaded (on a tiny other file) before the clock starts. Bytes read from
storage: ``read_bytes`` of ``/proc/self/io`` (summed over the ranks' processes).
The limit is a sequential ``read()`` of the file in 8 MiB chunks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.core.fresh_process import RunnerError, call_fresh
from bench.tables.amplification import drop_caches
from ffcv_pairs.write.sources import PairSource

__all__ = [
    "COLD_ROWS",
    "SHAPE",
    "SyntheticSource",
    "cold_lines",
    "measure_cold_table",
    "run_row",
    "write_synthetic",
]

log = logging.getLogger(__name__)

SHAPE = (3, 64, 64)
CHUNK = 8 << 20
WARM_ROUNDS = 3  # the warm rows: best of this many
#: name -> (kind, order, prefetch, os_cache, ranks, warm)
COLD_ROWS: dict[str, tuple[str, str, int, bool, int, bool]] = {
    "limit: sequential read()": ("limit", "", 0, True, 1, False),
    "ours quasi_random, no prefetch": ("ours", "quasi_random", 0, True, 1, False),
    "ours quasi_random, prefetch 4": ("ours", "quasi_random", 4, True, 1, False),
    "ours random, prefetch 4": ("ours", "random", 4, True, 1, False),
    "ours quasi_random, 4 ranks, prefetch 4": ("ours", "quasi_random", 4, True, 4, False),
    "ours quasi_random, os_cache=False": ("ours", "quasi_random", 0, False, 1, False),
    "upstream QUASI_RANDOM, os_cache=True": ("upstream", "quasi_random", 0, True, 1, False),
    "upstream QUASI_RANDOM, os_cache=False": ("upstream", "quasi_random", 0, False, 1, False),
    "warm: ours quasi_random, no prefetch": ("ours", "quasi_random", 0, True, 1, True),
    "warm: ours quasi_random, prefetch 4": ("ours", "quasi_random", 4, True, 1, True),
}


class SyntheticSource(PairSource):
    """``n`` pairs of uint8[3, 64, 64] from a seeded block of 512, rolled per chunk.

    Cheap to generate at any size (the larger-than-RAM file), distinct per chunk.
    """

    def __init__(self, n: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.n = n
        self.block = rng.integers(0, 256, (1024, *SHAPE), dtype=np.uint8)

    def __len__(self) -> int:
        return self.n

    def read(self, i: int) -> tuple[Any, Any, Any]:
        a, b, label = self.read_arrays(i, i + 1)
        return a[0], b[0], int(label[0])

    def read_arrays(self, start: int, stop: int) -> tuple[np.ndarray, ...]:
        ids = np.arange(start, stop)
        a = self.block[(ids * 7) % 512]
        b = self.block[512 + (ids * 13) % 512]
        return a, b, (ids % 1000).astype(np.int64)


def write_synthetic(path: Path, gib: float) -> int:
    """Write a pair `.beton` of about ``gib`` GiB at ``path``; returns the samples."""
    from ffcv_pairs import write_pairs

    n = max(2048, int(gib * (1 << 30)) // (2 * int(np.prod(SHAPE))))
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_pairs(SyntheticSource(n), path, progress=False)
    return n


def resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache, by ``fincore`` (-1 if it is missing)."""
    try:
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return -1


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))


def _upstream(path: str, os_cache: bool, batch_size: int) -> Any:
    from ffcv.fields.basics import IntDecoder
    from ffcv.fields.ndarray import NDArrayDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import ToTensor

    return Loader(
        path,
        batch_size=batch_size,
        num_workers=len(os.sched_getaffinity(0)),
        os_cache=os_cache,
        order=OrderOption.QUASI_RANDOM,
        seed=0,
        drop_last=True,
        pipelines={
            "A": [NDArrayDecoder(), ToTensor()],
            "B": [NDArrayDecoder(), ToTensor()],
            "label": [IntDecoder(), ToTensor()],
        },
    )


def cold_row(path: str, warmup: str, row: tuple, rank: int, epochs: int = 1) -> dict[str, Any]:
    """One row (one rank of it) in this fresh process: ``epochs`` epochs, timed."""
    from ffcv_pairs import make_loader

    kind, order, prefetch, os_cache, ranks, _ = row
    if kind == "limit":
        buf = bytearray(CHUNK)
        before, t = _read_bytes(), time.time()
        fd = os.open(path, os.O_RDONLY)
        total = 0
        while (got := os.readv(fd, [buf])) > 0:
            total += got
        os.close(fd)
        end = time.time()
        return {
            "samples": 0,
            "bytes": total,
            "start": t,
            "end": end,
            "read": _read_bytes() - before,
        }

    def build(p: str) -> Any:
        if kind == "upstream":
            return _upstream(p, os_cache, 256)
        return make_loader(
            p,
            batch_size=256,
            order=order,
            os_cache=os_cache,
            prefetch=prefetch,
            rank=rank,
            world_size=ranks,
            num_threads=max(1, len(os.sched_getaffinity(0)) // ranks),
        )

    for _ in build(warmup):  # JIT and threads ready before the clock
        pass
    loader = build(path)
    before, t, samples = _read_bytes(), time.time(), 0
    for _ in range(epochs):
        for batch in loader:
            samples += int(batch[2].shape[0])
    end = time.time()
    nbytes = samples * 2 * int(np.prod(SHAPE))
    return {
        "samples": samples,
        "bytes": nbytes,
        "start": t,
        "end": end,
        "read": _read_bytes() - before,
    }


def run_row(
    path: Path,
    warmup: Path,
    row: tuple,
    epochs: int = 1,
    *,
    timeout: float = 900.0,
    interval: float = 0.25,
) -> dict[str, Any]:
    """Drop the cache (unless warm), check it with fincore, run all ranks of ``row``
    (each given ``timeout`` seconds, its memory sampled every ``interval``)."""
    size = path.stat().st_size
    warm = row[5]
    if warm:
        call_fresh(cold_row, str(path), str(warmup), ("limit", "", 0, True, 1, False), 0)
    else:
        why = drop_caches()
        if why:
            return {"skipped": why}
    resident = resident_bytes(path)
    ranks = row[4]
    with ThreadPoolExecutor(ranks) as pool:
        futures = [
            pool.submit(
                call_fresh,
                cold_row,
                str(path),
                str(warmup),
                row,
                r,
                epochs,
                timeout=timeout,
                interval=interval,
            )
            for r in range(ranks)
        ]
        parts = [f.result() for f in futures]
    res = [p[0] for p in parts]
    seconds = max(r["end"] for r in res) - min(r["start"] for r in res)
    nbytes = sum(r["bytes"] for r in res)
    samples = sum(r["samples"] for r in res) or nbytes // (2 * int(np.prod(SHAPE)))
    return {
        "epochs": epochs,
        "samples": samples,
        "seconds": seconds,
        "rate": samples / seconds,
        "mb_s": nbytes / seconds / 1e6,
        "read_bytes": sum(r["read"] for r in res),
        "file_bytes": size,
        "resident_before": resident,
        "cold": "warm" if warm else ("yes" if 0 <= resident <= size // 100 else "NO"),
        "peak_rss_mb": [round(p[1].rss / 2**20) if p[1] else None for p in parts],
        # Without the mapped pages of the dataset (shared page cache, reclaimable).
        "peak_own_mb": [round(p[1].pss_own / 2**20) if p[1] else None for p in parts],
    }


def measure_cold_table(work: Path, gib: float, enabled: bool = True) -> dict[str, Any]:
    """Every row of :data:`COLD_ROWS` on a ``gib`` GiB file (kept in ``work``)."""
    if not enabled:
        return {"skipped": "disabled (--no-cold-cache)"}
    path = work / f"cold-{gib:g}gib.beton"
    warmup = work / "cold-warmup.beton"
    write_synthetic(path, gib)
    write_synthetic(warmup, 0.01)
    rows: dict[str, Any] = {}
    for name, row in COLD_ROWS.items():
        try:
            rows[name] = run_row(path, warmup, row)
        except RunnerError as e:
            rows[name] = {"error": str(e)}
        if "skipped" in rows[name]:
            return {"skipped": rows[name]["skipped"]}
        log.info("cold: %s %s", name, rows[name])
    # The warm pair is a ratio of two short epochs: best of WARM_ROUNDS, interleaved.
    warm = [name for name, row in COLD_ROWS.items() if row[5]]
    for _ in range(WARM_ROUNDS - 1):
        for name in warm:
            if "rate" not in rows[name]:
                continue
            with contextlib.suppress(RunnerError):
                again = run_row(path, warmup, COLD_ROWS[name])
                rounds = [*rows[name].get("rounds", [rows[name]["rate"]]), again["rate"]]
                best = again if again["rate"] > rows[name]["rate"] else rows[name]
                rows[name] = {**best, "rounds": rounds}
    return {"gib": gib, "rows": rows}


def cold_lines(cold: dict[str, Any]) -> list[str]:
    """The cold table in markdown."""
    rows = cold.get("rows", {})
    limit = rows.get("limit: sequential read()", {}).get("rate")
    out = [
        f"File of {cold.get('gib')} GiB; page cache dropped and checked out with `fincore` "
        "before every row (warm rows: read once first); each row a fresh process per rank.",
        "",
        "| row | samples/s | MB/s | x limit | read from storage MiB | file MiB | cold |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, m in rows.items():
        if "rate" not in m:
            out.append(f"| {name} | {m.get('error', '?')} | | | | | |")
            continue
        ratio = f"{m['rate'] / limit:.2f}" if limit else "n/a"
        out.append(
            f"| {name} | {m['rate']:,.0f} | {m['mb_s']:,.0f} | {ratio} | "
            f"{m['read_bytes'] / 2**20:,.0f} | {m['file_bytes'] / 2**20:,.0f} | "
            f"{m['cold']} |"
        )
    return [*out, ""]
