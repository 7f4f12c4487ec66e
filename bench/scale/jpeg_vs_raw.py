"""``python -m bench --jpeg-larger-than-ram``: photos whose raw file is larger than RAM,
against the same photos as JPEG, which fit.

Writes the same 224x224 photo pairs (:func:`bench.tables.compression.make_pairs`'s
crops, made per sample so nothing holds them all) twice: raw, at least
:data:`RAW_SHARE` x this machine's RAM, and as JPEG quality 90. Then, each in a fresh
process after ``drop_caches`` (checked with ``fincore``): the raw file's cold epoch, and
the JPEG file's first (cold) and second epoch, with the demo's kind of training
augmentation (paired hflip and resized crop back to 224). Reports pairs/s and the bytes
read from storage (``read_bytes`` of ``/proc/self/io``). The files are deleted at the end.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from ffcv_pairs.write.sources import PairSource

__all__ = ["PhotoPairs", "jpeg_vs_raw", "jpeg_vs_raw_lines"]

log = logging.getLogger(__name__)

SIDE = 224
RAW_SHARE = 1.5
CHUNK = 64  # pairs made at once by one source read


class PhotoPairs(PairSource):
    """``n`` photo pairs, pair ``i`` made on demand from seed ``i`` (in chunks of
    :data:`CHUNK`, so a worker reading in order makes each chunk once)."""

    def __init__(self, n: int):
        self.n = n
        self._chunk: tuple[int, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n

    def read(self, i: int) -> tuple[Any, Any, Any]:
        from bench.tables.compression import make_pairs

        k = i // CHUNK
        if self._chunk is None or self._chunk[0] != k:
            self._chunk = (k, *make_pairs(CHUNK, SIDE, seed=k))
        _, a, b = self._chunk
        return a[i % CHUNK], b[i % CHUNK], i % 2

    def describe(self) -> str:
        return f"PhotoPairs({self.n})"


def _epochs(path: str, epochs: int) -> list[dict[str, float]]:
    """``epochs`` epochs of this fresh process: seconds, pairs and bytes read from storage."""
    from bench.tables.cold import _read_bytes
    from ffcv_pairs import PairAugment, make_loader

    aug = PairAugment(hflip=0.5, resized_crop=(SIDE, SIDE), crop_scale=(0.25, 1.0))
    loader = make_loader(path, batch_size=256, augment=aug, num_threads=os.cpu_count())
    out = []
    for _ in range(epochs):
        before, t0, pairs = _read_bytes(), time.perf_counter(), 0
        for batch in loader:
            pairs += len(batch[2])
        out.append(
            {"seconds": time.perf_counter() - t0, "pairs": pairs, "read": _read_bytes() - before}
        )
    return out


def _cold(path: Path, epochs: int) -> dict[str, Any]:
    from bench.core.fresh_process import call_fresh
    from bench.tables.amplification import drop_caches
    from bench.tables.cold import resident_bytes

    problem = drop_caches()
    if problem is not None:
        raise ValueError(f"cannot drop the page cache: {problem}")
    resident = resident_bytes(path)
    rows, _ = call_fresh(_epochs, str(path), epochs, timeout=7200.0, interval=2.0)
    return {"resident_before": resident, "epochs": rows, "file_bytes": path.stat().st_size}


def jpeg_vs_raw(work: Path, gib: float | None = None) -> dict[str, Any]:
    """Measure; ``gib`` overrides the raw file's size. Raises ValueError when the disk is
    too small."""
    import psutil

    from ffcv_pairs import write_pairs

    ram = psutil.virtual_memory().total
    raw_bytes = gib * 2**30 if gib is not None else RAW_SHARE * ram
    n = math.ceil(raw_bytes / (2 * SIDE * SIDE * 3))
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    need = int(raw_bytes * 1.2) + (2 << 30)
    if free < need:
        raise ValueError(
            f"--jpeg-larger-than-ram needs {need / 2**30:.1f} GiB free in {work}, only "
            f"{free / 2**30:.1f} GiB free: free some, or point --work at a bigger disk"
        )
    t0 = time.perf_counter()
    res: dict[str, Any] = {"ram_bytes": ram, "pairs": n, "side": SIDE}
    files = {codec: work / f"photos-{n}-{codec}.beton" for codec in ("raw", "jpeg")}
    try:
        for codec, path in files.items():
            t = time.perf_counter()
            write_pairs(PhotoPairs(n), path, codec=codec, progress=False)
            res[f"{codec}_write_s"] = time.perf_counter() - t
            log.info("jpeg vs raw: %s written, %.1f GiB", path, path.stat().st_size / 2**30)
        res["raw"] = _cold(files["raw"], 1)
        log.info("jpeg vs raw: raw %s", res["raw"])
        res["jpeg"] = _cold(files["jpeg"], 2)
        log.info("jpeg vs raw: jpeg %s", res["jpeg"])
    finally:
        for path in files.values():
            for leftover in path.parent.glob(path.name + "*"):
                leftover.unlink()
    res["minutes"] = (time.perf_counter() - t0) / 60
    return res


def jpeg_vs_raw_lines(res: dict[str, Any]) -> list[str]:
    """The report section."""
    gib = 2**30
    raw, jpeg = res["raw"], res["jpeg"]
    rows = [("raw, cold epoch", raw, raw["epochs"][0])]
    rows += [("JPEG q90, epoch 1 (cold)", jpeg, jpeg["epochs"][0])]
    rows += [("JPEG q90, epoch 2", jpeg, jpeg["epochs"][1])]
    out = [
        f"## Larger than RAM: {res['pairs']:,} photo pairs of {res['side']}x{res['side']}, "
        f"{res['ram_bytes'] / gib:.1f} GiB of RAM",
        "",
        "Each file after `drop_caches` (checked with `fincore`), in a fresh process: paired "
        "hflip and resized crop, batch 256, every core.",
        "",
        "| run | file GiB | x RAM | pairs/s | GiB read from storage |",
        "|---|---|---|---|---|",
    ]
    for name, f, e in rows:
        out.append(
            f"| {name} | {f['file_bytes'] / gib:.1f} | {f['file_bytes'] / res['ram_bytes']:.2f} "
            f"| {e['pairs'] / e['seconds']:,.0f} | {e['read'] / gib:.2f} |"
        )
    speed = (jpeg["epochs"][1]["pairs"] / jpeg["epochs"][1]["seconds"]) / (
        raw["epochs"][0]["pairs"] / raw["epochs"][0]["seconds"]
    )
    out += [
        "",
        f"The JPEG file's second epoch runs at {speed:.2f}x the raw file's cold epoch and reads "
        f"{jpeg['epochs'][1]['read'] / gib:.2f} GiB from storage (raw: "
        f"{raw['epochs'][0]['read'] / gib:.1f} GiB). Writing took {res['raw_write_s']:.0f} s "
        f"raw and {res['jpeg_write_s']:.0f} s as JPEG; the whole run {res['minutes']:.0f} min.",
        "",
    ]
    return out
