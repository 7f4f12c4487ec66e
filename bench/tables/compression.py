"""``python -m bench --jpeg``: JPEG storage against raw, and against upstream FFCV.

Data: crops of the photographs that ship with scikit-image, at 64x64 and 224x224 (HWC
RGB uint8), each pair a view and the view moved by 1-2 pixels, each with fresh noise, as
the demo makes them: no two images are identical.

* **Size**: bytes of A and B per pair (from the allocation table: the file adds its
  tables and page padding), raw and as JPEG at quality 75, 90 and 95 (this project's
  writer), and the PSNR of the decoded images against the source.
* **Speed**: decode plus a paired random horizontal flip and random resized crop (scale
  0.08-1, back to the same side), pairs/s on every core, in fresh processes, interleaved
  rounds, after one warm-up epoch: ffcv-pairs's loader on the quality-90 file against
  upstream FFCV's ``Loader`` with ``RandomResizedCropRGBImageDecoder`` and
  ``RandomHorizontalFlip`` for A and for B on the very same file (plain FFCV reads it);
  ffcv-pairs on the raw file for reference. Target: at least 1.0x upstream.
* **A smaller output**: the same at 224x224 cropped to 64x64, where most regions span the
  output twice over, so ffcv-pairs decodes them at turbojpeg's 1/2 (``jpeg_downscale``,
  the default) against the same loader decoding at full size and against upstream.
* **Start-up** at 3M samples of 8x8 JPEGs (variable sizes) against the same samples raw:
  loader construction plus the first batch, in fresh processes (the start-up table's
  :func:`~bench.tables.startup.startup_once`). Target: at most 1 s.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SIDES", "make_pairs", "measure_compression", "write_compression_report"]

SIDES = (64, 224)
QUALITIES = (75, 90, 95)
SPEED_QUALITY = 90
SIZE_TARGET = 5.0  # raw bytes / JPEG bytes at quality 90
SPEED_TARGET = 1.0  # ffcv-pairs / upstream, pairs/s
BATCH = 64
PAIRS = {64: 8192, 224: 1536}
SHIFT = 2
#: The smaller-output rows: stored side, output side.
SMALL_OUTPUT = (224, 64)
STARTUP_SAMPLES = 3_000_000
STARTUP_TARGET = 1.0  # seconds


@functools.cache
def _photos(min_side: int) -> list[np.ndarray]:
    from ffcv_pairs.demo import photographs

    return photographs(min_side=min_side)


def make_pairs(n: int, side: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` pairs of ``(side, side, 3)`` uint8 crops: a view, and the view moved by 1-2 px."""
    import cv2

    rng = np.random.default_rng(seed)
    photos = _photos(side + 2 * SHIFT + 8)
    a = np.empty((n, side, side, 3), dtype=np.uint8)
    b = np.empty_like(a)
    big = side + 2 * SHIFT
    for i in range(n):
        img = photos[rng.integers(len(photos))]
        h, w = img.shape[:2]
        s = int(rng.integers(big, min(h, w) + 1))
        y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
        view = cv2.resize(img[y : y + s, x : x + s], (big, big), interpolation=cv2.INTER_AREA)
        dy, dx = 0, 0
        while dy == dx == 0:
            dy, dx = (int(d) for d in rng.integers(-SHIFT, SHIFT + 1, size=2))
        noise = rng.normal(0, 4, size=(2, side, side, 3))
        m = SHIFT
        a[i] = np.clip(view[m : m + side, m : m + side] + noise[0], 0, 255)
        b[i] = np.clip(view[m + dy : m + dy + side, m + dx : m + dx + side] + noise[1], 0, 255)
    return a, b


def _psnr(x: np.ndarray, y: np.ndarray) -> float:
    mse = float(np.mean((x.astype(np.float64) - y.astype(np.float64)) ** 2))
    return 10 * float(np.log10(255**2 / max(mse, 1e-12)))


def _decoded(path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    from ffcv_pairs import make_loader

    loader = make_loader(path, batch_size=256, order="sequential", drop_last=False)
    parts = [(x.numpy().copy(), y.numpy().copy()) for x, y, _ in loader]
    a = np.concatenate([p[0] for p in parts])[:n]
    return a, np.concatenate([p[1] for p in parts])[:n]


def _write(work: Path, side: int, n: int) -> dict[str, Any]:
    """The raw and JPEG files of one side, with their size rows."""
    from ffcv_pairs import ArraySource, PairReader, write_pairs

    a, b = make_pairs(n, side, seed=side)
    src = ArraySource(a, b, np.arange(n) % 2)
    rows: dict[str, Any] = {}
    for quality in (None, *QUALITIES):
        name = "raw" if quality is None else f"jpeg{quality}"
        path = work / f"compression-{side}-{name}.beton"
        codec = None if quality is None else "jpeg"
        t0 = time.perf_counter()
        write_pairs(src, path, codec=codec, quality=quality, progress=False)
        seconds = time.perf_counter() - t0
        da, db = _decoded(path, min(n, 1024))
        k = len(da)
        rows[name] = {
            "path": str(path),
            "bytes_per_pair": float(PairReader(path).image_sizes().sum()) / n,
            "file_bytes_per_pair": path.stat().st_size / n,
            "psnr": None
            if quality is None
            else _psnr(np.stack([da, db]), np.stack([a[:k], b[:k]])),
            "write_pairs_per_s": n / seconds,
        }
    raw = rows["raw"]["bytes_per_pair"]
    for row in rows.values():
        row["smaller"] = raw / row["bytes_per_pair"]
    return rows


def ours_rate(path: str, side: int, seconds: float, downscale: bool = True) -> float:
    """ffcv-pairs: decode, paired hflip and resized crop to ``side``; pairs/s after a warm-up
    epoch (``downscale``: the loader's ``jpeg_downscale``)."""
    from ffcv_pairs import PairAugment, make_loader

    aug = PairAugment(hflip=0.5, resized_crop=(side, side), crop_scale=(0.08, 1.0))
    loader = make_loader(
        path,
        batch_size=BATCH,
        order="random",
        augment=aug,
        num_threads=os.cpu_count(),
        jpeg_downscale=downscale,
    )
    return _rate(loader, seconds)


def upstream_rate(path: str, side: int, seconds: float) -> float:
    """Upstream FFCV on the same file: its resized-crop decoder (to ``side``) and flip, for A
    and for B."""
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip

    def image() -> list[Any]:
        return [RandomResizedCropRGBImageDecoder((side, side)), RandomHorizontalFlip()]

    loader = Loader(
        path,
        batch_size=BATCH,
        num_workers=os.cpu_count() or 1,
        order=OrderOption.RANDOM,
        os_cache=True,
        pipelines={"A": image(), "B": image(), "label": [IntDecoder()]},
    )
    return _rate(loader, seconds)


def _rate(loader: Any, seconds: float) -> float:
    for _ in loader:  # compiles; warms the page cache
        pass
    pairs, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for batch in loader:
            pairs += len(batch[0])
    return pairs / (time.perf_counter() - t0)


def measure_compression(
    work: Path,
    rounds: int = 3,
    seconds: float = 6.0,
    pairs: dict[int, int] | None = None,
    startup_samples: int = STARTUP_SAMPLES,
) -> dict[str, Any]:
    """Both tables; the speed rows in fresh processes, ``rounds`` interleaved rounds."""
    from bench.core.fresh_process import call_fresh

    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"cores": os.cpu_count(), "rounds": rounds, "sides": {}}
    for side in SIDES:
        n = (pairs or PAIRS)[side]
        rows = _write(work, side, n)
        jpeg, raw = rows[f"jpeg{SPEED_QUALITY}"]["path"], rows["raw"]["path"]
        speed: dict[str, list[float]] = {
            "ffcv-pairs jpeg": [],
            "upstream jpeg": [],
            "ffcv-pairs raw": [],
        }
        for _ in range(rounds):
            speed["ffcv-pairs jpeg"].append(call_fresh(ours_rate, jpeg, side, seconds)[0])
            speed["upstream jpeg"].append(call_fresh(upstream_rate, jpeg, side, seconds)[0])
            speed["ffcv-pairs raw"].append(call_fresh(ours_rate, raw, side, seconds)[0])
        ratios = [o / u for o, u in zip(speed["ffcv-pairs jpeg"], speed["upstream jpeg"])]
        res["sides"][str(side)] = {"pairs": n, "sizes": rows, "speed": speed, "ratios": ratios}
        if side == SMALL_OUTPUT[0]:
            res["small_output"] = _small_output_speed(jpeg, rounds, seconds)
        for row in rows.values():
            Path(row.pop("path")).unlink(missing_ok=True)
    res["startup"] = measure_startup(work, startup_samples, rounds)
    return res


def _small_output_speed(jpeg: str, rounds: int, seconds: float) -> dict[str, Any]:
    """:data:`SMALL_OUTPUT`'s rows on the quality-90 file, interleaved in fresh processes."""
    from bench.core.fresh_process import call_fresh

    out = SMALL_OUTPUT[1]
    speed: dict[str, list[float]] = {"reduced": [], "full": [], "upstream": []}
    for _ in range(rounds):
        speed["reduced"].append(call_fresh(ours_rate, jpeg, out, seconds, True)[0])
        speed["full"].append(call_fresh(ours_rate, jpeg, out, seconds, False)[0])
        speed["upstream"].append(call_fresh(upstream_rate, jpeg, out, seconds)[0])
    return {"stored": SMALL_OUTPUT[0], "out": out, "speed": speed}


def _tiny_files(work: Path, n: int) -> dict[str, str]:
    """``n`` pairs of 8x8 RGB, raw and as JPEG (flat colours with noise: about 0.5 KB)."""
    from ffcv_pairs import ArraySource, write_pairs

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (n, 1, 1, 3), dtype=np.uint8)
    a = np.clip(base + rng.integers(-8, 9, (n, 8, 8, 3)), 0, 255).astype(np.uint8)
    src = ArraySource(a, a[::-1], np.arange(n) % 10)
    files = {}
    for codec in ("raw", "jpeg"):
        path = work / f"startup-{n}-{codec}.beton"
        write_pairs(src, path, codec=codec, progress=False)
        files[codec] = str(path)
    return files


def measure_startup(work: Path, n: int, rounds: int) -> dict[str, Any]:
    """Start-up rows at ``n`` samples, raw and JPEG, interleaved; the files are removed."""
    from bench.core.fresh_process import call_fresh
    from bench.tables.startup import startup_once

    files = _tiny_files(work, n)
    call_fresh(startup_once, "ours", files["jpeg"], BATCH)  # numba cache warm-up
    rows: dict[str, list[float]] = {codec: [] for codec in files}
    for _ in range(rounds):
        for codec, path in files.items():
            rows[codec].append(call_fresh(startup_once, "ours", path, BATCH)[0]["total_s"])
    for path in files.values():
        for leftover in Path(path).parent.glob(Path(path).name + "*"):
            leftover.unlink()
    return {"samples": n, "seconds": rows}


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"


def compression_lines(res: dict[str, Any]) -> list[str]:
    """The report's markdown."""
    out = [
        "# JPEG storage: size, quality and speed",
        "",
        f"Photo crops of scikit-image's images, each pair a view and the view moved by 1-2 px "
        f"with fresh noise. {res['cores']} cores. See `bench/tables/compression.py`.",
        "",
        "## Size (target: at least 5x smaller than raw at quality 90)",
        "",
        "| side | pairs | storage | bytes/pair | x smaller | PSNR dB | writer pairs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for side, s in res["sides"].items():
        for name, row in s["sizes"].items():
            psnr = "exact" if row["psnr"] is None else f"{row['psnr']:.1f}"
            out.append(
                f"| {side} | {s['pairs']:,} | {name} | {row['bytes_per_pair']:,.0f} | "
                f"{row['smaller']:.1f} | {psnr} | {row['write_pairs_per_s']:,.0f} |"
            )
        smaller = s["sizes"][f"jpeg{SPEED_QUALITY}"]["smaller"]
        ok = "PASS" if smaller >= SIZE_TARGET else "MISS"
        verdicts.append(f"- {side}x{side}: quality 90 is {smaller:.1f}x smaller: {ok}")
    out += [
        "",
        f"## Speed: decode + paired hflip + resized crop, pairs/s, median (range) of "
        f"{res['rounds']} interleaved rounds",
        "",
        "| side | ffcv-pairs on JPEG | upstream FFCV on JPEG | x upstream | ffcv-pairs on raw |",
        "|---|---|---|---|---|",
    ]
    for side, s in res["sides"].items():
        sp, ratios = s["speed"], s["ratios"]
        ratio = _ratio(ratios)
        out.append(
            f"| {side} | {_med(sp['ffcv-pairs jpeg'])} | {_med(sp['upstream jpeg'])} | {ratio} | "
            f"{_med(sp['ffcv-pairs raw'])} |"
        )
        low, med = min(ratios), statistics.median(ratios)
        ok = "PASS" if low >= SPEED_TARGET else "MISS" if med < SPEED_TARGET else "STRADDLES"
        verdicts.append(f"- {side}x{side}: {med:.2f}x upstream per image (median): {ok}")
    out += _small_output_lines(res.get("small_output"))
    st = res["startup"]
    secs = st["seconds"]
    out += [
        "",
        f"## Start-up at {st['samples']:,} samples: loader built and first batch, seconds, "
        "median (range)",
        "",
        "| storage | seconds |",
        "|---|---|",
        *(f"| {codec} | {_secs(xs)} |" for codec, xs in secs.items()),
    ]
    med = statistics.median(secs["jpeg"])
    ok = (
        "PASS"
        if max(secs["jpeg"]) <= STARTUP_TARGET
        else "MISS"
        if med > STARTUP_TARGET
        else "STRADDLES"
    )
    verdicts.append(f"- start-up at {st['samples']:,} JPEG samples: {med:.2f} s (median): {ok}")
    return [*out, "", "## Targets", "", *verdicts, ""]


def _small_output_lines(small: dict[str, Any] | None) -> list[str]:
    if small is None:
        return []
    sp = small["speed"]
    ratios = [r / u for r, u in zip(sp["reduced"], sp["upstream"])]
    gains = [r / f for r, f in zip(sp["reduced"], sp["full"])]
    return [
        "",
        f"## A smaller output: {small['stored']}x{small['stored']} cropped to "
        f"{small['out']}x{small['out']}, pairs/s, median (range)",
        "",
        "Same work; ffcv-pairs decodes a region that spans the output twice over at 1/2 "
        "(`jpeg_downscale`, the default), or at full size.",
        "",
        "| ffcv-pairs, reduced decode | ffcv-pairs, full decode | upstream FFCV | "
        "x upstream | x full decode |",
        "|---|---|---|---|---|",
        f"| {_med(sp['reduced'])} | {_med(sp['full'])} | {_med(sp['upstream'])} | "
        f"{_ratio(ratios)} | {_ratio(gains)} |",
    ]


def _ratio(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def _secs(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def write_compression_report(res: dict[str, Any], out: Path, date: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"jpeg-{date}.json").write_text(json.dumps(res, indent=1))
    path = out / f"jpeg-{date}.md"
    path.write_text("\n".join(compression_lines(res)))
    return path
