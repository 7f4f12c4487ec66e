"""Change detection end to end on a CPU: masks that follow the geometry, and why it matters.

Commands::

    python -m ffcv_pairs.change_demo                  # paired, then unpaired geometry
    python -m ffcv_pairs.change_demo --train 4000 --epochs 6 --out change_out

A is a 40x40 crop of a real photograph (scikit-image's bundled images). B is the same view
with fresh sensor noise and, in four of five pairs, a rectangle pasted from another
photograph; the label is the change mask (1 on the pasted pixels). The file holds the mask
as the label field, declared dense, so training's padded crop, flips and quarter turns
move it with A and B: ``PairAugment(dense={'label': DenseField('mask', fill=255)})``.
The padding's pixels take the fill 255, which the loss ignores.

A small siamese UNet (:class:`~ffcv_pairs.lightning.change_model.SiameseChangeUNet`) is
trained twice, with the geometry paired and then drawn independently for B
(``geometry_paired=False``: the mask still follows A); validation (a centre crop, paired)
reports the IoU of the changed class. Unpaired, B no longer lines up with A, so every pixel
seems changed, and the IoU falls.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ChangeResult", "build_change_pairs", "main", "train_change"]

SIZE = 40
CROP = 32


def _crop(rng: np.random.Generator, img: np.ndarray, h: int, w: int) -> np.ndarray:
    y = int(rng.integers(0, img.shape[0] - h + 1))
    x = int(rng.integers(0, img.shape[1] - w + 1))
    return img[y : y + h, x : x + w]


def build_change_pairs(
    n: int, seed: int, pool: list[np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` pairs: A, B ``(n, 3, SIZE, SIZE)`` uint8 and the change mask ``(n, SIZE, SIZE)``
    uint8 (1 where B's pixels were replaced), cut from ``pool`` (default: the demo's
    :func:`~ffcv_pairs.demo.photographs`)."""
    from .demo import photographs

    pool = photographs() if pool is None else pool
    rng = np.random.default_rng(seed)
    a = np.empty((n, SIZE, SIZE, 3), np.uint8)
    b = np.empty_like(a)
    mask = np.zeros((n, SIZE, SIZE), np.uint8)
    for i in range(n):
        view = _crop(rng, pool[rng.integers(len(pool))], SIZE, SIZE).astype(np.float64)
        changed = view.copy()
        if rng.random() < 0.8:
            h, w = (int(s) for s in rng.integers(8, 21, size=2))
            y, x = (int(s) for s in rng.integers(0, SIZE - 20, size=2))
            changed[y : y + h, x : x + w] = _crop(rng, pool[rng.integers(len(pool))], h, w)
            mask[i, y : y + h, x : x + w] = 1
        noise = rng.normal(0, 4, size=(2, SIZE, SIZE, 3))
        a[i] = np.clip(view + noise[0], 0, 255)
        b[i] = np.clip(changed + noise[1], 0, 255)
    return a.transpose(0, 3, 1, 2).copy(), b.transpose(0, 3, 1, 2).copy(), mask


@dataclass
class ChangeResult:
    """One training run: geometry paired or not, validation IoU of the changed class."""

    paired: bool
    val_iou: float
    train_seconds: float


def write_files(out: Path, train: int, val: int, seed: int = 0) -> tuple[Path, Path]:
    """``out/train.beton`` and ``out/val.beton`` (written once)."""
    from .demo import photographs
    from .write.sources import ArraySource
    from .write.writer import write_pairs

    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    pool: list[np.ndarray] = []
    for split, n, s in (("train", train, seed), ("val", val, seed + 1)):
        path = out / f"{split}-{n}-{s}.beton"
        if not path.exists():
            pool = pool or photographs()  # read once for both splits
            a, b, mask = build_change_pairs(n, s, pool)
            write_pairs(ArraySource(a, b, mask), path, workers=1, progress=False)
        paths.append(path)
    return paths[0], paths[1]


def train_change(
    train_path: Path,
    val_path: Path,
    epochs: int,
    paired: bool,
    root: Path,
    width: int = 16,
    batch_size: int = 32,
    num_threads: int = 2,
) -> ChangeResult:
    """Fit the siamese UNet with the shared (or, unpaired, independent) geometry;
    ``num_threads``: the loaders' (one thread runs the serial kernels alone: on an empty
    kernel cache, nothing waits for the parallel ones' compile)."""
    import lightning as L

    from .augment.config import PairAugment
    from .augment.dense import DenseField
    from .format.schema import PairSchema
    from .lightning.change_model import SiameseChangeUNet
    from .lightning.datamodule import PairDataModule

    L.seed_everything(0, verbose=False)
    augment = PairAugment(
        crop=(CROP, CROP),
        crop_padding=4,
        hflip=0.5,
        vflip=0.5,
        rot90=True,
        geometry_paired=paired,
        normalize_mean=(120.0,),
        normalize_std=(60.0,),
        dense={PairSchema.LABEL_FIELD: DenseField("mask", fill=255)},  # the change mask
    )
    data = PairDataModule(
        str(train_path),
        str(val_path),
        batch_size=batch_size,
        augment=augment,
        num_threads=num_threads,
    )
    model = SiameseChangeUNet(width=width, lr=3e-3)
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
    )
    t0 = time.perf_counter()
    trainer.fit(model, datamodule=data)
    seconds = time.perf_counter() - t0
    return ChangeResult(paired, float(trainer.callback_metrics["val_iou"]), seconds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ffcv_pairs.change_demo", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", type=Path, default=Path("change_out"))
    p.add_argument("--train", type=int, default=3000, help="training pairs")
    p.add_argument("--val", type=int, default=500, help="validation pairs")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=16, help="the UNet's first channels")
    args = p.parse_args(argv)
    for name in ("train", "val", "epochs", "width"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    train_path, val_path = write_files(args.out, args.train, args.val)
    results = [
        train_change(train_path, val_path, args.epochs, paired, args.out / "runs", args.width)
        for paired in (True, False)
    ]
    for r in results:
        kind = "paired" if r.paired else "unpaired"
        print(
            f"{kind:>8} geometry: val IoU of the changed class {r.val_iou:.3f} | "
            f"training {r.train_seconds:.0f} s",
            flush=True,
        )
    gap = results[0].val_iou - results[1].val_iou
    print(f"IoU gap (paired - unpaired): {gap:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
