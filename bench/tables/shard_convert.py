"""The shards report's conversion rows: a per-sample ``.pt`` source converted from a cold
page cache, beside the storage's own random 4 KiB read rate, and a conversion split into
4 parts run as 4 processes against one process with 4 workers.

The source is ``n`` pairs of ``(3, 32, 32)`` uint8 (three files a pair, made by
:mod:`bench.tables.pt_files`, kept between runs). Every conversion is a fresh process
forked from the preloaded forkserver (imports are not timed), timed from here: fork,
``open_source`` (the folder scan) and ``write_pairs``.

* **Cold**: ``sync; echo 1 > /proc/sys/vm/drop_caches`` before each row, checked with
  ``fincore`` on a spread of the source's files; the writer's default workers (all cores),
  with its read-ahead (:mod:`ffcv_pairs.write.readahead`) off
  (``FFCV_PAIRS_READAHEAD=0``: one read in flight per worker) and on, interleaved; and
  both again warm, for the ceiling and the probe's cost. Beside them the storage's own
  random 4 KiB reads per second at queue depths 1 and 32 (:mod:`bench.tables.storage_rate`)
  and the target: at least half the depth-32 rate, in files per second.
* **Parts** (warm cache): ``write_pairs(..., part=(K, 4), workers=1)`` in 4 processes at
  once, what ``ffcv-pairs write --part K/4`` runs, then ``merge_parts`` (``ffcv-pairs
  merge``) in a fifth; against ``write_pairs(..., workers=4)`` in one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.core.fresh_process import call_fresh
from bench.tables.amplification import drop_caches
from bench.tables.cold import resident_bytes
from bench.tables.pt_files import FIELDS, PtSpec, generate_pt, pt_name
from bench.tables.storage_rate import measure_storage

__all__ = ["PARTS", "SHAPE", "conversion_lines", "measure_conversion"]

log = logging.getLogger(__name__)
SHAPE = (3, 32, 32)
PARTS = 4
_SPEC = PtSpec(SHAPE, "uint8", 10, seed=47)
_CHECKED = 24  # source files whose page-cache residency fincore checks before a cold row


def _source(work: Path, n: int) -> Path:
    """``work/pt-<n>``: ``n`` pairs, three ``.pt`` files each (reused when complete)."""
    root = work / f"pt-{n}"
    stamp = root / "stamp.json"
    want = {"n": n, "shape": list(SHAPE), "seed": _SPEC.seed}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        return root
    shutil.rmtree(root, ignore_errors=True)
    generate_pt(str(root), _SPEC, 0, n)
    stamp.write_text(json.dumps(want))
    return root


def _spread(src: Path, n: int) -> list[Path]:
    step = max(1, n // (_CHECKED // len(FIELDS)))
    return [src / pt_name("train", f, i) for i in range(0, n, step) for f in FIELDS]


def _convert(src: str, out: str, workers: int, readahead: str, part: int) -> dict[str, Any]:
    """One conversion (``part`` of :data:`PARTS`, or -1: the whole source) in this process;
    what it wrote and read, and the seconds of its folder scan."""
    from ffcv_pairs import open_source, write_pairs
    from ffcv_pairs.write.readahead import ENV_VAR

    os.environ[ENV_VAR] = readahead
    t = time.perf_counter()
    source = open_source(src, "train")
    scan_s = time.perf_counter() - t
    report = write_pairs(
        source, out, workers=workers, progress=False, part=None if part < 0 else (part, PARTS)
    )
    return {"pairs": report.num_samples, "fast_reads": report.fast_reads, "scan_s": scan_s}


def _merge(paths: list[str], manifest: str) -> int:
    from ffcv_pairs.format.merging import merge_parts

    merged = merge_parts(paths, manifest)
    merged.save(manifest)
    return sum(e.samples for e in merged.shards)


def _read_all(src: str, n: int) -> int:
    """Every source file read once (the page cache warm for the next row)."""
    total = 0
    for i in range(n):
        for field in FIELDS:
            with open(os.path.join(src, pt_name("train", field, i)), "rb") as f:
                total += len(f.read())
    return total


def _timed(out: Path, func: Any, *args: Any) -> dict[str, float]:
    """``{"s": wall seconds of func(*args)}`` and what it returns, in a fresh ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t = time.perf_counter()
    got = func(*args)
    return {"s": time.perf_counter() - t, **got}


def _one(src: Path, out: Path, workers: int, readahead: str) -> dict[str, float]:
    got, _ = call_fresh(_convert, str(src), str(out / "train.beton"), workers, readahead, -1)
    if got["fast_reads"] != 3 * got["pairs"]:
        raise RuntimeError(f"conversion of {src} read {got} (not every file the fast way)")
    return {"scan_s": got["scan_s"]}


def _parts(src: Path, out: Path, n: int) -> dict[str, float]:
    paths = [str(out / f"part{k}.beton") for k in range(PARTS)]
    with ThreadPoolExecutor(PARTS) as pool:
        runs = [
            pool.submit(call_fresh, _convert, str(src), path, 1, "1", k)
            for k, path in enumerate(paths)
        ]
        for run in runs:
            run.result()
    merged, _ = call_fresh(_merge, paths, str(out / "train.json"))
    if merged != n:
        raise RuntimeError(f"the {PARTS} parts of {src} hold {merged} pairs, not {n}")
    return {}


def _cold(src: Path, n: int) -> str | None:
    """Drop the page cache; why the source is not cold after it, or None."""
    why = drop_caches()
    if why:
        return why
    resident = sum(max(0, resident_bytes(p)) for p in _spread(src, n))
    return f"{resident} bytes of the source still cached after drop_caches" if resident else None


def measure_conversion(
    work: Path, n: int, rounds: int, gib: float = 4.0, seconds: float = 5.0
) -> dict[str, Any]:
    """The rows (seconds per round) and the storage's rates; see the module doc."""
    storage, _ = call_fresh(measure_storage, work, gib, seconds)
    log.info("conversion: storage %s", storage)
    src = _source(work, n)
    out = work / "convert-out"
    workers = len(os.sched_getaffinity(0))
    rows: dict[str, list[dict[str, float]]] = {}
    skipped = None
    for r in range(rounds):
        for setting, name in (("0", "cold, read-ahead off"), ("1", "cold, read-ahead on")):
            skipped = skipped or _cold(src, n)
            if skipped:
                break
            rows.setdefault(name, []).append(_timed(out, _one, src, out, workers, setting))
        call_fresh(_read_all, str(src), n)
        for setting, name in (("0", "warm, read-ahead off"), ("1", "warm, read-ahead on")):
            rows.setdefault(name, []).append(_timed(out, _one, src, out, workers, setting))
        rows.setdefault(f"1 process, {PARTS} workers", []).append(
            _timed(out, _one, src, out, PARTS, "1")
        )
        rows.setdefault(f"{PARTS} processes (parts), then merge", []).append(
            _timed(out, _parts, src, out, n)
        )
        log.info("conversion: round %d: %s", r, {k: v[-1]["s"] for k, v in rows.items()})
    shutil.rmtree(out, ignore_errors=True)
    return {
        "pairs": n,
        "shape": list(SHAPE),
        "workers": workers,
        "rounds": rounds,
        "storage": storage,
        "rows": rows,
        "cold_skipped": skipped,
    }


def _rate(seconds: list[float], count: float) -> str:
    rates = [count / s for s in seconds]
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def _storage_lines(storage: dict[str, Any]) -> list[str]:
    lines = [
        "| reads in flight | random 4 KiB reads/s (fadvise script) | fio libaio, direct |",
        "|---:|---:|---:|",
    ]
    for depth, rate in storage["fadvise"].items():
        fio = storage["fio"].get(depth)
        lines.append(f"| {depth} | {rate:,.0f} | {'-' if fio is None else f'{fio:,.0f}'} |")
    return lines


def conversion_lines(res: dict[str, Any]) -> list[str]:
    """The report's markdown sections for :func:`measure_conversion`'s result."""
    n, rows, storage = res["pairs"], res["rows"], res["storage"]
    qd32 = storage["fadvise"]["32"]
    shape = "x".join(map(str, res["shape"]))
    lines = [
        "",
        f"## Converting a cold per-sample source ({n:,} pairs of {shape} uint8, {3 * n:,} files)",
        "",
        f"`open_source` and `write_pairs` with {res['workers']} workers (all cores) in a fresh "
        "process, timed from the fork (the folder scan's share beside); cold rows after "
        "`sync; echo 1 > /proc/sys/vm/drop_caches` (checked with `fincore`). Read-ahead off: "
        f"`FFCV_PAIRS_READAHEAD=0`. Median of {res['rounds']} interleaved rounds and range.",
        "",
    ]
    if res.get("cold_skipped"):
        lines += [f"Cold rows skipped: {res['cold_skipped']}.", ""]
    lines += [
        "| row | pairs/s | files/s | files/s / depth-32 reads/s | folder scan (s) | "
        "files/s after the scan |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in [k for k in rows if "read-ahead" in k]:
        wall = [r["s"] for r in rows[name]]
        after = [r["s"] - r["scan_s"] for r in rows[name]]
        share = 3 * n / statistics.median(wall) / qd32
        scan = statistics.median(r["scan_s"] for r in rows[name])
        rates = f"{_rate(wall, n)} | {_rate(wall, 3 * n)} | {share:.2f} | {scan:.2f}"
        lines.append(f"| {name} | {rates} | {_rate(after, 3 * n)} |")
    lines += [
        "",
        f"The storage (a {storage['gib']:g} GiB file, {storage['seconds']:g} s a depth); "
        f"target: a cold source at no less than half the depth-32 rate, "
        f"{qd32 / 2:,.0f} files/s ({qd32 / 6:,.0f} pairs/s).",
        "",
        *_storage_lines(storage),
        "",
        f"## One conversion in {PARTS} parts ({n:,} pairs, warm cache)",
        "",
        f"{PARTS} processes at once, each `write_pairs(..., part=(K, {PARTS}), workers=1)` "
        f"(`ffcv-pairs write --part K/{PARTS}`), then `merge_parts` in a fifth (`ffcv-pairs "
        f"merge`), against one process with {PARTS} workers; wall time from the first fork "
        "to the manifest (or the file).",
        "",
        "| row | seconds | pairs/s |",
        "|---|---:|---:|",
    ]
    for name in [k for k in rows if "read-ahead" not in k]:
        secs = [r["s"] for r in rows[name]]
        cell = f"{statistics.median(secs):.2f} ({min(secs):.2f}-{max(secs):.2f})"
        lines.append(f"| {name} | {cell} | {_rate(secs, n)} |")
    return lines
