"""The user's day at full scale: make millions of ``.pt`` files, convert, train like the user,
at one size or at several sizes on one source.

Run it (from the repository root, with the project's venv)::

    .venv/bin/python -m bench --user-scale                 # 3,000,000 pairs (hours, ~45 GB)
    .venv/bin/python -m bench --user-scale 200000          # about 20 minutes
    .venv/bin/python -m bench --user-scale-sizes 100000,300000,1000000,3000000
    .venv/bin/python -m bench --user-scale 20000 --user-seconds 10 --work /tmp/us --out /tmp/res

Steps (each one's numbers go into ``bench/results/user-scale-<date>.md``, its
``.json``, ``-chart.png`` and ``-memory.png``):

1. the source, once, at the largest size ``N``: ``N`` pairs of ``uint8[1, 16, 16]`` images as
   per-sample ``torch.save`` files, and the same pairs as packs of 1000
   (:mod:`bench.scale.user_data`; not timed);
2. at each size, ascending (:mod:`bench.scale.user_sizes`): ``writers/write_beton.py SRC OUT
   --split train --workers 2 [--limit N]`` as a subprocess (:mod:`bench.scale.user_convert`),
   then ffcv-pairs on 4 simulated ranks (gloo), global batch 1024, quasi-random with
   ``PairAugment(hflip=0.5, crop=(16, 16), crop_padding=2)``, and the user's setups on the
   first ``N`` files, each time-boxed (:mod:`bench.scale.user_node`);
3. at the largest size, the start-up of 1 rank alone, after every row;
4. everything written is deleted, also on Ctrl-C; the report says what is left.

The report (:mod:`bench.scale.user_report`) has a table per size, the speed ratio at the
largest size where the user's 4 x 12 row delivered a steady rate, node memory against ``N``
fitted and extrapolated to a 200 GB node (:mod:`bench.scale.user_fit`), and start-up per
rank three ways. It refuses to start (one line, exit status 2) when the disk or the inodes are
short.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.scale.user_config import UserScaleConfig
from bench.scale.user_data import check_space, make_source, remove_source, verify_sample
from bench.scale.user_sizes import run_size

__all__ = ["UserScaleConfig", "check_user_scale", "run_user_scale"]

log = logging.getLogger(__name__)


def _blocks(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def _source(cfg: UserScaleConfig) -> dict[str, Any]:
    source = cfg.source
    t = time.perf_counter()
    make_source(source, cfg.gen_workers)
    seconds = time.perf_counter() - t
    checked = verify_sample(source)
    per_kind = {  # every file of a kind and index width has the same size: the last index's
        k: _blocks(source.src / f"train_{k}_{cfg.n - 1}.pt")
        for k in ("A_images", "B_images", "labels")
    }
    packs = sum(_blocks(p) for p in source.packs.iterdir())
    src_bytes = cfg.n * sum(per_kind.values()) + _blocks(source.src)
    return {
        "seconds": seconds,
        "files_per_s": 3 * cfg.n / seconds,
        "verified_files": checked,
        "src_bytes": src_bytes,
        "file_bytes": per_kind,
        "dir_bytes": _blocks(source.src),
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


def _cleanup(cfg: UserScaleConfig) -> dict[str, Any]:
    t = time.perf_counter()
    log.info("user-scale: deleting %s (interrupting leaves it: rm -rf it)", cfg.work)
    try:
        left = remove_source(cfg.source)
    except KeyboardInterrupt:
        log.error("user-scale: deletion interrupted; left %s", cfg.work)
        raise
    betons = cfg.beton(cfg.n).parents[1]  # every size's .beton and writer logs
    shutil.rmtree(betons, ignore_errors=True)
    if betons.exists():
        left.append(str(betons))
    try:
        cfg.work.rmdir()
    except OSError:
        if cfg.work.exists():
            left.append(f"{cfg.work} (not empty: {sorted(os.listdir(cfg.work))[:5]})")
    return {"seconds": time.perf_counter() - t, "left": left}


def check_user_scale(cfg: UserScaleConfig) -> dict[str, float]:
    """Refuse before writing anything: disk or inodes short (for the source at the largest
    size and one `.beton` of that size: each size's is deleted after its rows), or a work dir
    already in use.

    Returns:
        Space needed and free (see :func:`bench.scale.user_data.check_space`).

    Raises:
        ValueError: one line saying why.
    """
    if cfg.work.exists() and any(cfg.work.iterdir()):
        raise ValueError(f"{cfg.work} is not empty; remove it or pass another --work")
    beton = int(1.2 * cfg.n * (2 * cfg.image_bytes + 8)) + (64 << 20)
    return check_space(cfg.source, beton_bytes=beton)


def run_user_scale(cfg: UserScaleConfig, command: str) -> Path:
    """Every step; returns the report's path. The data is deleted however this ends. A size
    that fails ends the run: the report is still written, with what was measured and the error,
    and the error is raised again."""
    from bench.core.machine import describe_machine
    from bench.scale.user_report import write_user_report

    t0 = time.perf_counter()
    source = cfg.source
    space = check_user_scale(cfg)
    res: dict[str, Any] = {
        "date": cfg.date,
        "command": command,
        "config": asdict(cfg),
        "machine": describe_machine(),
        "space": space,
        "load_start": os.getloadavg()[0],
        "sizes": [],
    }
    failed: Exception | None = None
    try:
        log.info("user-scale: making %d pairs under %s", cfg.n, source.src)
        res["source"] = _source(cfg)
        res["source"]["load_per_s"] = _load_rate(source.src)
        for n in cfg.sizes:
            res["sizes"].append({"n": n})
            run_size(cfg, res["sizes"][-1])
    except Exception as e:  # reported, then raised again
        failed = e
        res["error"] = f"{type(e).__name__}: {e}"
        log.error("user-scale: %s", res["error"])
    finally:
        res["cleanup"] = _cleanup(cfg)
        if res["cleanup"]["left"]:
            log.error("user-scale: could not delete %s", res["cleanup"]["left"])
    res["elapsed_s"] = time.perf_counter() - t0
    md = write_user_report(res, cfg.out)
    if failed is not None:
        log.error("user-scale: the report of what was measured: %s", md)
        raise failed
    return md
