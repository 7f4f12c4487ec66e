"""Table e: every augmentation op, against plain decoding and against OpenCV/numpy.

Each op runs in this project's loader (``make_loader(..., augment=..., device="cpu")``,
default threads: the cores) on uint8 ``[3, S, S]`` pairs at S = 64 (batch 256) and
S = 224 (batch 64), interleaved in rounds with plain decoding, one process per
row. Its anchor is what a user would otherwise call per image
(:mod:`bench.tables.anchors`), measured in the same rounds (each round runs every
row, then every anchor) with one single-threaded process per core; the
anchor's pairs/s is its images/s summed over the processes, halved (a pair is
two images). Rows and anchors each keep their best round.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.core.main_data import DataPaths, make_arrays
from bench.core.settings import BenchConfig
from bench.core.timing import LoaderSource

__all__ = ["AUG_ROWS", "SIZES", "AugRow", "build_aug_source", "measure_augops", "row_augment"]

log = logging.getLogger(__name__)

#: Image side -> batch size.
SIZES = {64: 256, 224: 64}
MEAN, STD = (123.7, 116.3, 103.5), (58.4, 57.1, 57.4)


@dataclass(frozen=True)
class AugRow:
    """One row: ``key``, its title, and the anchor it is compared with (or None)."""

    key: str
    title: str
    anchor: str | None


AUG_ROWS = (
    AugRow("plain", "plain decode", None),
    AugRow("flip_crop", "hflip + padded crop", None),
    AugRow("resize", "resized crop to S/2, scale (0.35, 1)", "resize"),
    AugRow("bc", "brightness + contrast", "bc_mean"),
    AugRow("noise", "noise_std=5", "noise"),
    AugRow("normalize", "normalize -> float32 (CPU)", "normalize"),
    AugRow("pipeline", "resized crop + flip + b/c unpaired + normalize -> bfloat16", "pipeline"),
)


def row_augment(key: str, side: int) -> Any:
    """The ``PairAugment`` of row ``key`` at image side ``side`` (None: plain decoding)."""
    from ffcv_pairs import PairAugment

    half = (side // 2, side // 2)
    resized = {"resized_crop": half, "crop_scale": (0.35, 1.0)}
    norm = {"normalize_mean": MEAN, "normalize_std": STD}
    kwargs: dict[str, dict[str, Any]] = {
        "flip_crop": {"hflip": 0.5, "crop": (side, side), "crop_padding": 4},
        "resize": resized,
        "bc": {"brightness": 0.2, "contrast": 0.2},
        "noise": {"noise_std": 5.0},
        "normalize": norm,
        "pipeline": {
            **resized,
            **norm,
            "hflip": 0.5,
            "brightness": 0.2,
            "contrast": 0.2,
            "brightness_paired": False,
            "contrast_paired": False,
            "out_dtype": "bfloat16",
        },
    }
    return None if key == "plain" else PairAugment(**kwargs[key])


def _key(side: int, row: str) -> str:
    return f"augops:{side}:{row}"


def build_aug_source(key: str, cfg: BenchConfig, paths: DataPaths) -> Any:
    """The loader of row ``augops:<side>:<row>`` (in the contestant's process)."""
    from ffcv_pairs import make_loader

    _, side, row = key.split(":")
    loader = make_loader(
        paths.beton,
        batch_size=SIZES[int(side)],
        order="quasi_random",
        seed=cfg.seed,
        augment=row_augment(row, int(side)),
        device="cpu",
    )
    return LoaderSource(loader, set_epoch=loader.set_epoch, close=loader.close)


def _write(root: Path, n: int, side: int, seed: int) -> None:
    from ffcv_pairs import ArraySource, write_pairs

    a, b, labels = make_arrays(n, (3, side, side), "uint8", 10, seed)
    write_pairs(ArraySource(a, b, labels), root / "pairs.beton", workers=2, progress=False)
    # The anchors' input: the same 2n images, channels last (OpenCV's layout) and first.
    both = np.concatenate([a, b])
    np.save(root / "chw.npy", both)
    np.save(root / "hwc.npy", np.ascontiguousarray(both.transpose(0, 2, 3, 1)))


def prepare(cfg: BenchConfig, side: int, n: int) -> DataPaths:
    """The pairs of side ``side`` under the work dir (reused when the stamp matches)."""
    from bench.core.fresh_process import call_fresh

    paths = DataPaths.under(cfg.work / "augops" / str(side))
    stamp = {"n": n, "side": side, "seed": cfg.seed, "version": 2}  # 2: with image stats
    stamp_file = paths.root / "stamp.json"
    if not (stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp):
        paths.root.mkdir(parents=True, exist_ok=True)
        call_fresh(_write, paths.root, n, side, cfg.seed)
        stamp_file.write_text(json.dumps(stamp))
    return paths


def _first_batches(beton: str, side: int) -> int:
    """One batch of every row (fills the numba cache before any row is timed)."""
    from ffcv_pairs import make_loader

    n = 0
    for row in AUG_ROWS:
        augment = row_augment(row.key, side)
        loader = make_loader(beton, batch_size=SIZES[side], augment=augment, device="cpu")
        n += len(next(iter(loader))[2])
        loader.close()
    return n


def measure_augops(cfg: BenchConfig, log_file: Path) -> dict[str, Any]:
    """Rows and anchors at both sizes: ``{side: {"rows": ..., "anchors": ...}}``."""
    from bench.contest.rounds import measure_rounds, warm_cache
    from bench.core.fresh_process import call_fresh
    from bench.tables.anchors import measure_anchor_round

    out: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)), "sizes": {}}
    for side, n in zip(SIZES, cfg.augops_pairs):
        paths = prepare(cfg, side, n)
        call_fresh(_first_batches, str(paths.beton), side)
        warm_cache(paths)
        keys = [_key(side, r.key) for r in AUG_ROWS]
        sized = cfg.replace(batch_size=SIZES[side])
        anchors: dict[str, Any] = {}
        anchor_round = partial(measure_anchor_round, cfg, paths, side, SIZES[side], anchors)
        rows = measure_rounds(
            sized, paths, keys, {}, log_file, after_round=anchor_round, build=build_aug_source
        )
        out["sizes"][str(side)] = {
            "pairs": n,
            "batch": SIZES[side],
            "rows": {r.key: rows[_key(side, r.key)] for r in AUG_ROWS},
            "anchors": anchors,
        }
        log.info("augops %d: %s", side, {k: v.get("best") for k, v in rows.items()})
    return out
