"""What a user would otherwise call per image: OpenCV or numpy, one thread per process.

Each anchor reads the same images as the loader rows (``hwc.npy`` / ``chw.npy``,
memory-mapped, warm page cache), in order, and writes each result into a batch
buffer of ``2 * batch`` preallocated images (A and B of a batch, as the loader
writes its batches), as fast Python code would. Per-image random parameters (crop boxes,
factors) are drawn before timing. ``cv2.setNumThreads(1)``; one process per
core, all at once; images/s is summed over the processes. One round of every
anchor runs after each round of the loader rows (:mod:`bench.tables.augops`), so a
drift in the shared host's speed reaches a row and its anchor alike.

* ``resize``: ``cv2.resize(img[crop], (S/2, S/2), INTER_LINEAR)``, a box of area
  (0.35, 1) and ratio (3/4, 4/3) of the image, channels last;
* ``bc``: ``cv2.convertScaleAbs(img, alpha, beta)``: a linear map, no mean (less work
  than contrast, which scales around the image's mean);
* ``bc_mean``: the same op as the row: ``cv2.mean`` (per channel, weighted to the
  grayscale mean), then ``cv2.convertScaleAbs`` around it;
* ``noise``: ``cv2.randn`` into an int16 image, ``cv2.add`` saturating to uint8;
* ``normalize``: ``np.multiply`` by 1/std then ``np.subtract`` mean/std, into
  float32, channels first (numpy's fast layout for per-channel constants);
* ``pipeline``: the resize, ``cv2.flip`` of every other image, ``convertScaleAbs``,
  then float32 ``cv2.subtract``/``cv2.multiply`` (numpy has no bfloat16).
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from bench.core.main_data import DataPaths
from bench.core.settings import BenchConfig

__all__ = ["ANCHORS", "anchor_rate", "measure_anchor_round"]

ANCHORS = ("resize", "bc", "bc_mean", "noise", "normalize", "pipeline")
MEAN, STD = np.array([123.7, 116.3, 103.5]), np.array([58.4, 57.1, 57.4])


def _boxes(n: int, side: int, rng: np.random.Generator) -> np.ndarray:
    """RandomResizedCrop-like boxes ``(y0, x0, h, w)``: area (0.35, 1), ratio (3/4, 4/3)."""
    area = side * side * rng.uniform(0.35, 1.0, n)
    ratio = np.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3), n))
    w = np.clip(np.round(np.sqrt(area * ratio)), 1, side).astype(int)
    h = np.clip(np.round(np.sqrt(area / ratio)), 1, side).astype(int)
    y0 = (rng.random(n) * (side - h + 1)).astype(int)
    x0 = (rng.random(n) * (side - w + 1)).astype(int)
    return np.stack([y0, x0, h, w], axis=1)


def _buffers(images: np.ndarray, batch: int) -> dict[str, np.ndarray]:
    """Batch buffers of ``2 * batch`` outputs, and the per-image scratch."""
    half = images.shape[2] // 2
    shape = images.shape[1:]
    return {
        "small": np.empty((2 * batch, half, half, 3), np.uint8),
        "same": np.empty((2 * batch, *shape), np.uint8),
        "f32": np.empty((2 * batch, *shape), np.float32),
        "f32_small": np.empty((2 * batch, half, half, 3), np.float32),
        "noise": np.empty(shape, np.int16),
    }


def _one(name: str, i: int, img: np.ndarray, slot: int, ctx: dict[str, Any]) -> None:
    """Anchor ``name`` on image ``i``, into output ``slot`` of the batch buffers."""
    import cv2

    buf, half = ctx["buf"], ctx["half"]
    if name in ("resize", "pipeline"):
        y0, x0, h, w = ctx["boxes"][i]
        small = buf["small"][slot]
        cv2.resize(img[y0 : y0 + h, x0 : x0 + w], (half, half), small, 0, 0, cv2.INTER_LINEAR)
        if name == "pipeline":
            if i % 2:
                cv2.flip(small, 1, small)
            cv2.convertScaleAbs(small, small, ctx["alpha"][i], ctx["beta"][i])
            out = buf["f32_small"][slot]
            np.copyto(out, small, casting="unsafe")
            cv2.subtract(out, ctx["mean4"], out)
            cv2.multiply(out, ctx["inv4"], out)
    elif name == "bc":
        cv2.convertScaleAbs(img, buf["same"][slot], ctx["alpha"][i], ctx["beta"][i])
    elif name == "bc_mean":
        means = cv2.mean(img)
        gray = 0.2989 * means[0] + 0.587 * means[1] + 0.114 * means[2]
        b, c = ctx["alpha"][i], ctx["contrast"][i]
        cv2.convertScaleAbs(img, buf["same"][slot], b * c, (1 - c) * b * gray)
    elif name == "noise":
        cv2.randn(buf["noise"], 0, 5)
        cv2.add(img, buf["noise"], buf["same"][slot], dtype=cv2.CV_8U)
    else:  # normalize, channels first
        out = buf["f32"][slot]
        np.multiply(img, ctx["inv_c"], out=out)
        np.subtract(out, ctx["shift_c"], out=out)


def _loop(name: str, images: np.ndarray, batch: int, seconds: float) -> tuple[int, float]:
    """Apply anchor ``name`` to ``images`` in order until ``seconds`` pass: (count, seconds)."""
    import cv2

    cv2.setNumThreads(1)
    n, side = len(images), images.shape[2]
    rng = np.random.default_rng(0)
    inv = (1 / STD).astype(np.float32)
    ctx: dict[str, Any] = {
        "buf": _buffers(images, batch),
        "half": side // 2,
        "boxes": _boxes(n, side, rng),
        "alpha": rng.uniform(0.8, 1.2, n),
        "beta": rng.uniform(-20, 20, n),
        "contrast": rng.uniform(0.8, 1.2, n),
        "inv_c": inv[:, None, None],
        "shift_c": (MEAN / STD).astype(np.float32)[:, None, None],
        "mean4": (*MEAN, 0.0),
        "inv4": (*(1 / STD), 0.0),
    }
    slots = 2 * batch
    count, t0 = 0, time.perf_counter()
    while True:
        for i in range(n):
            _one(name, i, images[i], count % slots, ctx)
            count += 1
            if count % 16 == 0 and time.perf_counter() - t0 >= seconds:
                return count, time.perf_counter() - t0


def anchor_rate(name: str, path: str, batch: int, seconds: float) -> tuple[int, float]:
    """One process's run of anchor ``name`` over the images in ``path`` (a ``.npy``)."""
    images = np.load(path, mmap_mode="r")
    return _loop(name, images, batch, seconds)


def _run_once(name: str, paths: DataPaths, batch: int, seconds: float, procs: int) -> float:
    """Images/s of ``procs`` processes at once, summed."""
    from bench.core.fresh_process import call_fresh

    layout = "chw" if name == "normalize" else "hwc"
    path = str(paths.root / f"{layout}.npy")

    def one(_: int) -> tuple[int, float]:
        return call_fresh(anchor_rate, name, path, batch, seconds)[0]

    with ThreadPoolExecutor(procs) as pool:
        runs = list(pool.map(one, range(procs)))
    return sum(count / dt for count, dt in runs)


def measure_anchor_round(
    cfg: BenchConfig, paths: DataPaths, side: int, batch: int, out: dict[str, Any]
) -> None:
    """One round of every anchor at one size, added to ``out`` (``{anchor: row}``): images/s
    summed over one process per core; a row keeps the best of its rounds (``images_per_s``,
    and ``pairs_per_s`` = that / 2), as the loader rows do."""
    procs = len(os.sched_getaffinity(0))
    for name in ANCHORS:
        rate = _run_once(name, paths, batch, cfg.min_seconds, procs)
        row = out.setdefault(name, {"rounds": [], "processes": procs, "side": side})
        row["rounds"].append(rate)
        row["images_per_s"] = max(row["rounds"])
        row["pairs_per_s"] = row["images_per_s"] / 2
