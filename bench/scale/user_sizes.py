"""One size of ``--user-scale``: convert its first ``N`` pairs, run every row on them, and, at
the largest size, the start-up of 1 rank alone.

At each size ``N`` (ascending, one source made at the largest):

1. the writer with ``--limit N`` writes ``betons/N/train.beton`` (timed; the folder it lists
   holds the files of the largest size);
2. the rows, each on ``N`` pairs: ffcv-pairs on that ``.beton``, the user's ``Dataset`` on
   the first ``N`` paths of each kind, the first ``ceil(N / pack_size)`` packs;
3. at the largest size only, after every row: ``alone_runs`` single ranks (world size 1),
   each a fresh process on the same file with the numba cache warm, as a user's second run
   (the cache is filled in a fresh process before the rows of every size and again before
   these runs);
4. the ``.beton`` is deleted (one on disk at a time).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from dataclasses import replace
from typing import Any

from bench.scale.user_config import UserScaleConfig
from bench.scale.user_convert import convert
from bench.scale.user_ranks import RowSpec
from bench.scale.user_targets import FULL

__all__ = ["TARGET_CONVERT_S", "row_specs", "run_size"]

log = logging.getLogger(__name__)

TARGET_CONVERT_S = 15 * 60.0


def row_specs(cfg: UserScaleConfig, n: int) -> list[RowSpec]:
    """The rows of size ``n``: ffcv-pairs, the user's ``Dataset`` per ``cfg.workers``, packs."""
    w = cfg.world_size
    ours = RowSpec(
        kind="ours",
        title=f"ffcv-pairs make_loader, {w} ranks, quasi_random + PairAugment",
        world_size=w,
        batch_size=cfg.global_batch // w,
        workers=0,
        n=n,
        pack_size=cfg.pack_size,
        beton=str(cfg.beton(n)),
        src=str(cfg.source.src),
        packs=str(cfg.source.packs),
        crop=(cfg.shape[-2], cfg.shape[-1]),
        crop_padding=cfg.crop_padding,
        seed=cfg.seed,
        time_box=cfg.time_box,
        cap=cfg.start_cap + 4 * cfg.time_box,  # reaching an epoch boundary may take longer
    )
    cap = cfg.start_cap + cfg.time_box
    user = [
        replace(
            ours,
            kind="lists",
            title=f"user Dataset (paths in lists), {w} ranks x {k} workers",
            workers=k,
            cap=cap,
        )
        for k in cfg.workers
    ]
    packs = replace(
        ours,
        kind="packs",
        title=f".pt packs of {cfg.pack_size}, one torch.load per pack, "
        f"{w} ranks x {cfg.pack_workers} workers",
        workers=cfg.pack_workers,
        cap=cap,
    )
    return [ours, *user, packs]


def _warm_jit(cfg: UserScaleConfig, n: int) -> float:
    """Fill the numba cache in a fresh process first (a user compiles once per machine);
    returns its seconds: a few when the cache was warm already, tens when it compiled."""
    from bench.contest.rounds import first_batches
    from bench.core.fresh_process import call_fresh

    crop = (cfg.shape[-2], cfg.shape[-1])
    t = time.perf_counter()
    call_fresh(first_batches, str(cfg.beton(n)), cfg.global_batch // cfg.world_size, crop)
    return time.perf_counter() - t


def _beton_from_arrays(cfg: UserScaleConfig, n: int) -> None:
    """The `.beton` the writer would have written for size ``n``, from the seeded pairs."""
    import numpy as np

    from bench.scale.user_data import CHUNK, make_chunk
    from ffcv_pairs import ArraySource, write_pairs

    chunks = [make_chunk(cfg.source, c) for c in range(math.ceil(n / CHUNK))]
    a, b, labels = (np.concatenate([c[k] for c in chunks])[:n] for k in range(3))
    del chunks
    write_pairs(ArraySource(a, b, labels), cfg.beton(n), workers=cfg.writer_workers, progress=False)


def _convert(cfg: UserScaleConfig, n: int) -> dict[str, Any]:
    from bench.core.fresh_process import call_fresh

    cap = cfg.writer_cap or max(3600.0, 8 * TARGET_CONVERT_S * n / FULL)
    largest = n == cfg.n
    res = convert(
        cfg.source.src,
        cfg.beton(n),
        n,
        cfg.writer_workers,
        cap,
        limit=None if largest else n,
        probe=largest,
    )
    if not cfg.beton(n).exists():
        # The rows measure the loader, not the writer: give them the same file.
        t = time.perf_counter()
        call_fresh(_beton_from_arrays, cfg, n, timeout=3600)
        res["fallback_s"] = time.perf_counter() - t
        log.info("user-scale: %d: .beton written from the arrays instead", n)
    return res


def _run(cfg: UserScaleConfig, spec: RowSpec) -> dict[str, Any]:
    from bench.scale.user_node import run_row

    load = os.getloadavg()[0]
    log.info("user-scale: %s, %d pairs", spec.title, spec.n)
    row = run_row(spec, floor_gib=cfg.floor_gib)
    row["load_before"], row["load_after"] = load, os.getloadavg()[0]
    log.info("user-scale: %s samples/s, %s", row["rate"], row["stopped"] or "finished")
    return row


def _alone(cfg: UserScaleConfig, n: int) -> list[dict[str, Any]]:
    """``cfg.alone_runs`` start-ups of 1 rank on the ``.beton`` of size ``n``, one at a time."""
    ours = row_specs(cfg, n)[0]
    spec = replace(
        ours,
        title="ffcv-pairs make_loader, 1 rank alone",
        world_size=1,
        time_box=cfg.alone_seconds,
        cap=cfg.start_cap + cfg.alone_seconds,
        epoch_gap=False,
    )
    out = []
    for _ in range(cfg.alone_runs):
        row = _run(cfg, spec)
        row.pop("series", None)
        out.append(row)
    return out


def run_size(cfg: UserScaleConfig, out: dict[str, Any]) -> None:
    """Every step of size ``out["n"]``, into ``out`` as each ends (a failure keeps what was
    measured). The numba cache is filled before the rows and again before the runs alone
    (``warm_s``): whatever else on the machine rewrote it, every start-up measured is a run
    with the cache warm."""
    n = out["n"]
    try:
        log.info("user-scale: %d pairs: converting", n)
        out["convert"] = _convert(cfg, n)
        out["warm_s"] = [_warm_jit(cfg, n)]
        rows = out["rows"] = []
        for spec in row_specs(cfg, n):
            rows.append(_run(cfg, spec))
        if n == cfg.n and cfg.alone_runs:
            out["warm_s"].append(_warm_jit(cfg, n))
            out["alone"] = _alone(cfg, n)
    finally:
        shutil.rmtree(cfg.beton(n).parent, ignore_errors=True)
