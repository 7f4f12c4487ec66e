"""Cold cache, and what quasi-random order saves in reads (a readahead model).

**Cold rows.** ``sync; echo 1 > /proc/sys/vm/drop_caches`` before each run (needs
root; skipped, with the reason, otherwise). On a VM whose disk is served from host
memory a cold read is barely slower than a warm one, so the model below tells
more.

**Read-amplification model.** Take the sample ids of one epoch in loader order and
cut them into chunks of ``k`` batches. A chunk touches some byte ranges (A and B
of each sample, contiguous in the file). Count the distinct file pages (the
`.beton`'s page size), 4 KiB OS pages and readahead windows (``cfg.readahead``,
aligned) each chunk touches; bytes read = windows x window size, assuming the
page cache keeps nothing from one chunk to the next (a file much larger than
RAM). Amplification = bytes read / bytes the samples hold. Done for the real
bench file and for a virtual file of ``cfg.model_samples`` samples of the same
shape laid out as the writer would (no data written), with this project's
default window (``window_bytes`` = 256 MiB).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

from bench.core.fresh_process import RunnerError, call_fresh
from bench.core.main_data import DataPaths
from bench.core.settings import BenchConfig
from bench.core.tree_memory import MB

__all__ = ["chunk_stats", "drop_caches", "measure_amplification", "measure_cold"]

log = logging.getLogger(__name__)

OS_PAGE = 4096


def drop_caches() -> str | None:
    """Drop the page cache; None on success, else why it could not."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError as e:
        return f"cannot write /proc/sys/vm/drop_caches ({type(e).__name__}: {e.strerror or e})"
    return None


def _distinct_per_chunk(start: np.ndarray, length: int, unit: int, chunk: np.ndarray) -> np.ndarray:
    """Distinct ``unit``-sized blocks touched by ``[start, start+length)``, per chunk id.

    A union of intervals: sort them (chunks kept apart by an offset), then count
    the blocks each interval adds past the furthest block seen before it.
    """
    first = start // unit
    last = (start + length - 1) // unit
    offset = chunk.astype(np.int64) * (int(last.max()) + 2)
    first, last = first + offset, last + offset
    order = np.argsort(first, kind="stable")
    first, last, chunk = first[order], last[order], chunk[order]
    reach = np.concatenate(([-1], np.maximum.accumulate(last)[:-1]))
    added = np.maximum(0, last - np.maximum(first - 1, reach))
    return np.bincount(chunk, weights=added).astype(np.int64)


def chunk_stats(
    ptrs: np.ndarray, sample_bytes: int, page_size: int, chunk_samples: int, readahead: int
) -> dict[str, float]:
    """Mean blocks touched per chunk of ``chunk_samples`` consecutive reads, and totals."""
    ptrs = np.asarray(ptrs, dtype=np.int64)
    chunk = np.arange(len(ptrs)) // chunk_samples
    pages = _distinct_per_chunk(ptrs, sample_bytes, page_size, chunk)
    os_pages = _distinct_per_chunk(ptrs, sample_bytes, OS_PAGE, chunk)
    windows = _distinct_per_chunk(ptrs, sample_bytes, readahead, chunk)
    payload = len(ptrs) * sample_bytes
    read = int(windows.sum()) * readahead
    return {
        "file_pages": float(pages.mean()),
        "os_pages": float(os_pages.mean()),
        "ra_windows": float(windows.mean()),
        "mb_read_per_chunk": float(windows.mean()) * readahead / MB,
        "epoch_mb_read": read / MB,
        "epoch_mb_payload": payload / MB,
        "amplification": read / payload,
    }


def _real_orders(beton: str, batch_size: int, seed: int) -> dict[str, Any]:
    from ffcv_pairs import PairReader, make_loader

    reader = PairReader(beton)
    ptrs = np.asarray(reader.image_pointers("A")).astype(np.int64)
    out: dict[str, Any] = {
        "sample_bytes": reader.schema.sample_bytes,
        "page_size": int(reader.page_size),
    }
    for order in ("quasi_random", "random"):
        loader = make_loader(beton, batch_size=batch_size, order=order, seed=seed)
        out[order] = ptrs[loader.epoch_order(0)]
        out["window_bytes"] = loader.config.window_bytes
    return out


def _virtual_orders(cfg: BenchConfig) -> dict[str, Any]:
    from ffcv_pairs.format.layout import BetonLayout
    from ffcv_pairs.format.schema import ArraySpec, PairSchema
    from ffcv_pairs.load.index import PageIndex
    from ffcv_pairs.load.loader import DEFAULT_WINDOW_BYTES
    from ffcv_pairs.load.order import OrderSpec, epoch_order
    from ffcv_pairs.write.writer import DEFAULT_PAGE_SIZE

    spec = ArraySpec(cfg.shape, cfg.dtype)
    layout = BetonLayout(PairSchema(a=spec, b=spec), cfg.model_samples, DEFAULT_PAGE_SIZE)
    n, spp = cfg.model_samples, layout.samples_per_page
    starts = np.append(np.arange(0, n, spp), n).astype(np.int64)
    index = PageIndex(
        pages=np.arange(layout.num_pages, dtype=np.int64),
        starts=starts,
        samples=np.arange(n, dtype=np.int64),
    )
    out: dict[str, Any] = {
        "sample_bytes": layout.schema.sample_bytes,
        "page_size": DEFAULT_PAGE_SIZE,
        "window_bytes": DEFAULT_WINDOW_BYTES,
        "file_gb": layout.file_size / 2**30,
    }
    window = DEFAULT_WINDOW_BYTES // DEFAULT_PAGE_SIZE
    for order in ("quasi_random", "random"):
        ospec = OrderSpec(order, cfg.batch_size, cfg.seed, 0, 1, True, window)  # type: ignore[arg-type]
        out[order] = layout.ptr_a(epoch_order(index, ospec, 0)).astype(np.int64)
    return out


def measure_amplification(cfg: BenchConfig, paths: DataPaths) -> dict[str, Any]:
    """Model rows for the bench file and the virtual large file."""
    result: dict[str, Any] = {"readahead": cfg.readahead}
    real, _ = call_fresh(_real_orders, str(paths.beton), cfg.batch_size, cfg.seed)
    virtual, _ = call_fresh(_virtual_orders, cfg)
    for name, orders in (("bench file", real), ("virtual file", virtual)):
        rows = []
        for order in ("quasi_random", "random"):
            for k in cfg.model_batches:
                stats = chunk_stats(
                    orders[order],
                    orders["sample_bytes"],
                    orders["page_size"],
                    k * cfg.batch_size,
                    cfg.readahead,
                )
                rows.append({"order": order, "batches": k, **stats})
        meta = {k: v for k, v in orders.items() if k not in ("quasi_random", "random")}
        meta["samples"] = len(orders["quasi_random"])
        result[name] = {"meta": meta, "rows": rows}
    return result


def cold_once(beton: str, order: str, batch_size: int) -> dict[str, Any]:
    """One epoch of this project's loader (build not timed), or one memcpy of the data."""
    from bench.contest.contestants import MemcpySource
    from ffcv_pairs import PairReader, make_loader

    if order == "memcpy":
        source: Any = MemcpySource(beton, PairReader(beton).num_samples)
        t = time.perf_counter()
        samples = sum(source.epoch(0))
    else:
        loader = make_loader(beton, batch_size=batch_size, order=order, seed=0)
        t = time.perf_counter()
        samples = sum(int(b[2].shape[0]) for b in loader)
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "rate": samples / seconds, "samples": samples}


def measure_cold(cfg: BenchConfig, paths: DataPaths) -> dict[str, Any]:
    """Cold first epoch (build included) for quasi_random, random and the memcpy limit."""
    if not cfg.cold_cache:
        return {"skipped": "disabled (--no-cold-cache)"}
    rows: dict[str, Any] = {}
    for order in ("quasi_random", "random", "memcpy"):
        why = drop_caches()
        if why:
            return {"skipped": why}
        try:
            rows[order], _ = call_fresh(cold_once, str(paths.beton), order, cfg.batch_size)
        except RunnerError as e:
            rows[order] = {"error": str(e)}
        log.info("cold: %s %s", order, rows[order])
    return {"rows": rows}
