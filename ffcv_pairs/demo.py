"""The main job, end to end on a CPU: build pairs, convert them, train, report.

Commands::

    make demo                                   # = python -m ffcv_pairs.demo --compare
    python -m ffcv_pairs.demo                   # paired augmentation only
    python -m ffcv_pairs.demo --independent     # A and B augmented independently
    python -m ffcv_pairs.demo --codec jpeg      # A and B stored as JPEG quality 90
    python -m ffcv_pairs.demo --train 6000 --val 1500 --epochs 6 --out demo_out

The task is "did B change relative to A?". A is a 48x48 crop of a real
photograph (the images that ship inside scikit-image's wheel, so nothing is
downloaded). B is the same view with fresh sensor noise (label 0, unchanged) or
the view moved by 1-2 pixels (label 1, changed: the camera moved). Neither
image alone tells which. Training augments both with a random horizontal flip
and a padded random crop, plus brightness/contrast jitter drawn per image. With
paired augmentation A and B move together and the task is learnable; augmented
independently, unchanged pairs get moved and flipped too, and accuracy falls
toward chance.

Steps: 1. write ``{split}_A_images_{i}.pt`` / ``_B_images_`` / ``_labels_`` files,
2. convert them with ``writers/write_beton.py``, 3. train with
``python -m ffcv_pairs.train fit --config configs/demo_cpu.yaml``, 4. print
validation accuracy, loader throughput and the share of each step spent waiting
for data.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DemoResult", "build_pairs", "main", "photographs"]

REPO = Path(__file__).resolve().parents[1]
SIZE = 48
TARGET_ACC = 0.90


def photographs(min_side: int = 128) -> list[np.ndarray]:
    """RGB uint8 photographs from scikit-image's bundled data (no download)."""
    from PIL import Image

    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the demo needs scikit-image's bundled photos: pip install scikit-image")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    images = []
    for path in sorted(folder.glob("*")):
        if path.suffix.lower() not in (".png", ".jpg", ".jpeg"):
            continue
        img = np.asarray(Image.open(path).convert("RGB"))
        if min(img.shape[:2]) >= min_side and img.std() > 20:
            images.append(img)
    if len(images) < 5:
        raise ValueError(f"{folder}: found only {len(images)} usable photographs")
    return images


def _pyramid(images: list[np.ndarray]) -> list[np.ndarray]:
    """Each photo at a few scales, so crops show both texture and objects."""
    from PIL import Image

    out = []
    for img in images:
        h, w = img.shape[:2]
        for scale in (1.0, 0.5, 0.25):
            sh, sw = int(h * scale), int(w * scale)
            if min(sh, sw) >= SIZE + 2 * MAX_SHIFT + 32:
                out.append(
                    np.asarray(Image.fromarray(img).resize((sw, sh), Image.Resampling.BILINEAR))
                )
    return out


MAX_SHIFT = 2  # a changed view moves by 1-2 px: aligned or not, nothing else


def _pair(rng: np.random.Generator, pool: list[np.ndarray], changed: bool):
    """A textured crop, and the same view (unchanged) or the view moved by 1-2 px (changed)."""
    m = MAX_SHIFT
    for _ in range(50):
        img = pool[rng.integers(len(pool))]
        y = int(rng.integers(m, img.shape[0] - SIZE - m + 1))
        x = int(rng.integers(m, img.shape[1] - SIZE - m + 1))
        a = img[y : y + SIZE, x : x + SIZE]
        if a.std() > 25:  # a shift of a flat crop would be invisible
            break
    dy = dx = 0
    if changed:
        while dy == dx == 0:
            dy, dx = (int(d) for d in rng.integers(-m, m + 1, size=2))
    b = img[y + dy : y + dy + SIZE, x + dx : x + dx + SIZE]
    noise = rng.normal(0, 4, size=(2, *a.shape))
    a = np.clip(a + noise[0], 0, 255).astype(np.uint8)
    b = np.clip(b + noise[1], 0, 255).astype(np.uint8)
    return a.transpose(2, 0, 1).copy(), b.transpose(2, 0, 1).copy()


def build_pairs(root: Path, sizes: dict[str, int], seed: int = 0) -> Path:
    """Write per-sample .pt files under ``root`` (skipped when already there)."""
    import torch

    marker = root / "pairs.json"
    spec = {"sizes": sizes, "seed": seed, "size": SIZE, "version": 4}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return root
    root.mkdir(parents=True, exist_ok=True)
    pool = _pyramid(photographs())
    rng = np.random.default_rng(seed)
    for split, n in sizes.items():
        for i in range(n):
            label = i % 2
            a, b = _pair(rng, pool, changed=bool(label))
            torch.save(torch.from_numpy(a), root / f"{split}_A_images_{i}.pt")
            torch.save(torch.from_numpy(b), root / f"{split}_B_images_{i}.pt")
            torch.save(torch.tensor(label), root / f"{split}_labels_{i}.pt")
    marker.write_text(json.dumps(spec))
    return root


@dataclass
class DemoResult:
    """What one training run achieved."""

    paired: bool
    val_acc: float
    samples_per_s: float
    wait_share: float
    train_seconds: float


def convert(pt_dir: Path, out_dir: Path, splits: list[str], codec: str = "raw") -> None:
    """``python writers/write_beton.py PT OUT --split ...`` (the documented command)."""
    script = REPO / "writers" / "write_beton.py"
    cmd = (
        [sys.executable, str(script)]
        if script.exists()
        else [sys.executable, "-m", "ffcv_pairs", "write"]
    )
    cmd += [str(pt_dir), str(out_dir), "--workers", "2"]
    if codec == "jpeg":
        cmd += ["--codec", "jpeg", "--quality", "90"]
    for split in splits:
        cmd += ["--split", split]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def loader_speed(path: Path, epochs: int = 3) -> tuple[float, float]:
    """The loader alone, with the demo's training augmentation: (pairs/s, MB/s) on this machine."""
    import yaml

    from .augment.config import PairAugment
    from .load.loader import make_loader

    data = yaml.safe_load((REPO / "configs" / "demo_cpu.yaml").read_text())["data"]
    loader = make_loader(
        path,
        batch_size=data["batch_size"],
        window_bytes=data["window_bytes"],
        augment=PairAugment.from_dict(data["augment"]),
    )
    for _ in loader:  # warm the page cache
        pass
    t0, n = time.perf_counter(), 0
    for _ in range(epochs):
        for batch in loader:
            n += len(batch[2])
    rate = n / (time.perf_counter() - t0)
    return rate, rate * 2 * loader.schema.a.nbytes / 1e6


def train(out: Path, epochs: int, paired: bool) -> DemoResult:
    """Fit with the demo config through the same LightningCLI as ``ffcv_pairs.train``."""
    from .lightning.callbacks import LoaderMonitor
    from .train import cli_main

    config = REPO / "configs" / "demo_cpu.yaml"
    args = [
        "fit",
        "--config",
        str(config),
        f"--data.train_path={out / 'beton' / 'train.beton'}",
        f"--data.val_path={out / 'beton' / 'val.beton'}",
        f"--trainer.max_epochs={epochs}",
        f"--model.max_epochs_hint={epochs}",
        f"--trainer.default_root_dir={out / 'runs'}",
        f"--trainer.logger.init_args.save_dir={out / 'runs'}",
        f"--data.augment.geometry_paired={str(paired).lower()}",
        "--trainer.enable_progress_bar=false",
    ]
    print(f"$ python -m ffcv_pairs.train {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    argv, sys.argv = sys.argv, sys.argv[:1]  # LightningCLI reads sys.argv too
    try:
        cli = cli_main(args)
    finally:
        sys.argv = argv
    seconds = time.perf_counter() - t0
    trainer: Any = cli.trainer
    monitor = next(c for c in trainer.callbacks if isinstance(c, LoaderMonitor))
    stats = monitor.summary()
    acc = float(cli.trainer.callback_metrics["val/acc"])
    return DemoResult(paired, acc, stats["samples_per_s"], stats["wait_share"], seconds)


def _report(result: DemoResult) -> str:
    kind = "paired" if result.paired else "independent"
    return (
        f"{kind:>11} augmentation: val accuracy {result.val_acc:.1%} | training "
        f"{result.train_seconds:.0f} s | {result.samples_per_s:,.0f} pairs/s | "
        f"data wait {result.wait_share:.1%} of each step"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ffcv_pairs.demo", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", type=Path, default=Path("demo_out"))
    p.add_argument("--train", type=int, default=6000, help="training pairs")
    p.add_argument("--val", type=int, default=1500, help="validation pairs")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument(
        "--independent",
        action="store_true",
        help="augment A and B independently (breaks the pairing)",
    )
    p.add_argument("--compare", action="store_true", help="run paired, then independent")
    p.add_argument(
        "--codec",
        choices=["raw", "jpeg"],
        default="raw",
        help="store A and B exactly (raw) or as JPEG quality 90 (lossy, smaller)",
    )
    args = p.parse_args(argv)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

    t0 = time.perf_counter()
    print(
        f"1/4 building {args.train} + {args.val} pairs from scikit-image's photographs", flush=True
    )
    pt = build_pairs(args.out / "pt", {"train": args.train, "val": args.val})
    print(f"2/4 converting {pt} to .beton", flush=True)
    convert(pt, args.out / "beton", ["train", "val"], args.codec)
    rate, mbs = loader_speed(args.out / "beton" / "train.beton")
    speed = f"loader alone (hflip + padded crop + jitter): {rate:,.0f} pairs/s, {mbs:,.0f} MB/s"
    print(f"    {speed}", flush=True)
    runs = [True, False] if args.compare else [not args.independent]
    results = []
    for i, paired in enumerate(runs):
        print(
            f"3/4 training ({'paired' if paired else 'independent'} augmentation, "
            f"{args.epochs} epochs)",
            flush=True,
        )
        results.append(train(args.out, args.epochs, paired))
        print(_report(results[-1]), flush=True)
        if i + 1 < len(runs):
            print()
    print(f"4/4 results ({time.perf_counter() - t0:.0f} s in all)")
    print(f"    {speed}")
    for r in results:
        print("   ", _report(r))
    (args.out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (args.out / "loader.json").write_text(json.dumps({"pairs_per_s": rate, "mb_per_s": mbs}))
    learned = [r for r in results if r.paired]
    if learned and learned[0].val_acc < TARGET_ACC:
        print(
            f"error: paired validation accuracy {learned[0].val_acc:.1%} is below the "
            f"demo's target of {TARGET_ACC:.0%}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
