"""The user's day at full scale: make millions of ``.pt`` files, convert, train like the user.

Run it (from the repository root, with the project's venv)::

    .venv/bin/python -m bench --user-scale                 # 3,000,000 pairs (hours, ~45 GB)
    .venv/bin/python -m bench --user-scale 200000          # about 20 minutes
    .venv/bin/python -m bench --user-scale 20000 --user-seconds 10 --work /tmp/us --out /tmp/res

Steps (each one's numbers go into ``bench/results/user-scale-<date>.md``, its
``.json`` and ``-chart.png``):

1. the source: ``N`` pairs of ``uint8[1, 16, 16]`` images as per-sample ``torch.save``
   files, and the same pairs as packs of 1000 (:mod:`bench.scale.user_data`; not timed);
2. ``writers/write_beton.py SRC OUT --split train --workers 2`` as a subprocess:
   wall time, pairs/s, peak RSS of its process tree, the time an ``os.scandir`` of
   the folder takes (:mod:`bench.scale.user_convert`);
3. ffcv-pairs on 4 simulated ranks (gloo), global batch 1024, quasi-random with
   ``PairAugment(hflip=0.5, crop=(16, 16), crop_padding=2)``;
4. the user's setups on the same files, each time-boxed (:mod:`bench.scale.user_node`);
5. everything written is deleted, also on Ctrl-C; the report says what is left.

It refuses to start (one line, exit status 2) when the disk or the inodes are short.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.core.settings import BENCH_DIR
from bench.scale.user_convert import convert
from bench.scale.user_data import (
    SourceLayout,
    check_space,
    make_source,
    remove_source,
    verify_sample,
)
from bench.scale.user_targets import FULL

__all__ = ["UserScaleConfig", "check_user_scale", "run_user_scale"]

log = logging.getLogger(__name__)

TARGET_CONVERT_S = 15 * 60.0


@dataclass(frozen=True)
class UserScaleConfig:
    """Settings of ``--user-scale``.

    Attributes:
        n: Pairs.
        shape: Image shape (uint8, A and B alike).
        num_classes: Labels uniform in ``[0, num_classes)``.
        seed: Data and order seed.
        pack_size: Samples per ``.pt`` pack.
        world_size: Simulated ranks.
        global_batch: Samples per step over all ranks.
        crop_padding: Padding of the paired crop.
        workers: DataLoader workers per rank, one row of the user's setup each.
        pack_workers: DataLoader workers per rank of the packs row.
        time_box: Seconds each row reads after its first batch.
        start_cap: Seconds a rank may take to import, join the group and build.
        floor_gib: A row is stopped when ``MemAvailable`` drops below this.
        gen_workers: Processes making the source (each creates files from 8 threads).
        writer_workers: ``--workers`` of the writer.
        writer_cap: Seconds after which the writer is stopped (0: 8 x the target's share of
            15 min per 3M pairs, at least an hour).
        work: Where the data goes (a folder of its own, deleted afterwards).
        out: Where the report goes.
        date: Report name part.
    """

    n: int = FULL
    shape: tuple[int, ...] = (1, 16, 16)
    num_classes: int = 10
    seed: int = 0
    pack_size: int = 1000
    world_size: int = 4
    global_batch: int = 1024
    crop_padding: int = 2
    workers: tuple[int, ...] = (12, 4)
    pack_workers: int = 12
    time_box: float = 60.0
    start_cap: float = 300.0
    floor_gib: float = 2.0
    gen_workers: int = 2
    writer_workers: int = 2
    writer_cap: float = 0.0
    work: Path = field(default=BENCH_DIR / ".work" / "user-scale")
    out: Path = field(default=BENCH_DIR / "results")
    date: str = "today"

    def __post_init__(self) -> None:
        if self.global_batch % self.world_size:
            raise ValueError(
                f"global_batch must be a multiple of world_size={self.world_size}, "
                f"got {self.global_batch}"
            )
        least = max(self.world_size * self.global_batch, self.world_size * self.pack_size)
        if self.n < least:
            raise ValueError(f"--user-scale must be at least {least} pairs, got {self.n}")
        if self.time_box <= 0:
            raise ValueError(f"time_box must be positive, got {self.time_box}")

    @property
    def layout(self) -> SourceLayout:
        return SourceLayout(
            self.n,
            self.shape,
            self.num_classes,
            self.seed,
            self.pack_size,
            self.work / "pt",
            self.work / "packs",
        )

    @property
    def beton(self) -> Path:
        return self.work / "beton" / "train.beton"


def _blocks(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def _source(cfg: UserScaleConfig) -> dict[str, Any]:
    layout = cfg.layout
    t = time.perf_counter()
    make_source(layout, cfg.gen_workers)
    seconds = time.perf_counter() - t
    checked = verify_sample(layout)
    per_kind = {  # every file of a kind and index width has the same size: the last index's
        k: _blocks(layout.src / f"train_{k}_{cfg.n - 1}.pt")
        for k in ("A_images", "B_images", "labels")
    }
    packs = sum(_blocks(p) for p in layout.packs.iterdir())
    src_bytes = cfg.n * sum(per_kind.values()) + _blocks(layout.src)
    return {
        "seconds": seconds,
        "files_per_s": 3 * cfg.n / seconds,
        "verified_files": checked,
        "src_bytes": src_bytes,
        "file_bytes": per_kind,
        "dir_bytes": _blocks(layout.src),
        "pack_bytes": packs,
        "packs": -(-cfg.n // cfg.pack_size),
    }


def _load_rate(src: Path, count: int = 3000) -> float:
    """``torch.load`` calls per second of one process on the source files (warm cache)."""
    import torch

    names = [
        f"{src}/train_{k}_{i}.pt"
        for i in range(count // 3)
        for k in ("A_images", "B_images", "labels")
    ]
    t = time.perf_counter()
    for name in names:
        torch.load(name, weights_only=True)
    return len(names) / (time.perf_counter() - t)


def _rows(cfg: UserScaleConfig) -> list[Any]:
    from bench.scale.user_ranks import RowSpec

    w = cfg.world_size
    ours = RowSpec(
        kind="ours",
        title=f"ffcv-pairs make_loader, {w} ranks, quasi_random + PairAugment",
        world_size=w,
        batch_size=cfg.global_batch // w,
        workers=0,
        n=cfg.n,
        pack_size=cfg.pack_size,
        beton=str(cfg.beton),
        src=str(cfg.layout.src),
        packs=str(cfg.layout.packs),
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


def _warm_jit(cfg: UserScaleConfig) -> None:
    """Fill the numba cache in a fresh process first: a user compiles once per machine."""
    from bench.contest.rounds import first_batches
    from bench.core.fresh_process import call_fresh

    crop = (cfg.shape[-2], cfg.shape[-1])
    call_fresh(first_batches, str(cfg.beton), cfg.global_batch // cfg.world_size, crop)


def _beton_from_arrays(cfg: UserScaleConfig) -> None:
    """The `.beton` the writer would have written, from the seeded pairs themselves."""
    import numpy as np

    from bench.scale.user_data import CHUNK, make_chunk
    from ffcv_pairs import ArraySource, write_pairs

    chunks = [make_chunk(cfg.layout, c) for c in range(-(-cfg.n // CHUNK))]
    a, b, labels = (np.concatenate([c[k] for c in chunks]) for k in range(3))
    del chunks
    write_pairs(ArraySource(a, b, labels), cfg.beton, workers=cfg.writer_workers, progress=False)


def _train(cfg: UserScaleConfig, res: dict[str, Any]) -> None:
    from bench.core.fresh_process import call_fresh
    from bench.scale.user_node import run_row

    if not cfg.beton.exists():
        # The rows measure the loader, not the writer: give them the same file.
        t = time.perf_counter()
        call_fresh(_beton_from_arrays, cfg, timeout=3600)
        res["convert"]["fallback_s"] = time.perf_counter() - t
        log.info("user-scale: .beton written from the arrays instead")
    _warm_jit(cfg)
    rows = res["rows"] = []
    for spec in _rows(cfg):
        load = os.getloadavg()[0]
        log.info("user-scale: %s", spec.title)
        row = run_row(spec, floor_gib=cfg.floor_gib, start_cap=cfg.start_cap)
        row["load_before"], row["load_after"] = load, os.getloadavg()[0]
        rows.append(row)
        log.info("user-scale: %s samples/s, %s", row["rate"], row["stopped"] or "finished")


def _cleanup(cfg: UserScaleConfig) -> dict[str, Any]:
    t = time.perf_counter()
    log.info("user-scale: deleting %s (interrupting leaves it: rm -rf it)", cfg.work)
    try:
        left = remove_source(cfg.layout)
    except KeyboardInterrupt:
        log.error("user-scale: deletion interrupted; left %s", cfg.work)
        raise
    for path in (cfg.beton.parent, cfg.work / "writer.out", cfg.work / "writer.err"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        if path.exists():
            left.append(str(path))
    try:
        cfg.work.rmdir()
    except OSError:
        if cfg.work.exists():
            left.append(f"{cfg.work} (not empty: {sorted(os.listdir(cfg.work))[:5]})")
    return {"seconds": time.perf_counter() - t, "left": left}


def check_user_scale(cfg: UserScaleConfig) -> dict[str, float]:
    """Refuse before writing anything: disk or inodes short, or a work dir already in use.

    Returns:
        Space needed and free (see :func:`bench.scale.user_data.check_space`).

    Raises:
        ValueError: one line saying why.
    """
    if cfg.work.exists() and any(cfg.work.iterdir()):
        raise ValueError(f"{cfg.work} is not empty; remove it or pass another --work")
    beton = int(1.2 * cfg.n * (2 * _image_bytes(cfg) + 8)) + (64 << 20)
    return check_space(cfg.layout, beton_bytes=beton)


def run_user_scale(cfg: UserScaleConfig, command: str) -> Path:
    """Every step; returns the report's path. The data is deleted however this ends."""
    from bench.core.machine import describe_machine
    from bench.scale.user_report import write_user_report

    t0 = time.perf_counter()
    layout = cfg.layout
    space = check_user_scale(cfg)
    res: dict[str, Any] = {
        "date": cfg.date,
        "command": command,
        "config": asdict(cfg),
        "machine": describe_machine(),
        "space": space,
        "load_start": os.getloadavg()[0],
    }
    try:
        log.info("user-scale: making %d pairs under %s", cfg.n, layout.src)
        res["source"] = _source(cfg)
        res["source"]["load_per_s"] = _load_rate(layout.src)
        log.info("user-scale: converting")
        cap = cfg.writer_cap or max(3600.0, 8 * TARGET_CONVERT_S * cfg.n / FULL)
        res["convert"] = convert(layout.src, cfg.beton, cfg.n, cfg.writer_workers, cap)
        _train(cfg, res)
    finally:
        res["cleanup"] = _cleanup(cfg)
        if res["cleanup"]["left"]:
            log.error("user-scale: could not delete %s", res["cleanup"]["left"])
    res["elapsed_s"] = time.perf_counter() - t0
    return write_user_report(res, cfg.out)


def _image_bytes(cfg: UserScaleConfig) -> int:
    size = 1
    for d in cfg.shape:
        size *= d
    return size
