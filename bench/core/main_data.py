"""Generate the benchmark's data, seeded, in every format a contestant reads.

All formats hold the same pairs: ``A[i]``, ``B[i]`` and ``labels[i]`` from
:func:`make_arrays`. A stamp file records what was generated, so a second run
with the same settings reuses the files.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.core.settings import BenchConfig

__all__ = ["DataPaths", "make_arrays", "prepare_data", "write_per_sample", "write_tiny_beton"]

log = logging.getLogger(__name__)

SPLIT = "train"


@dataclass(frozen=True)
class DataPaths:
    """Where each format of the main data set lives (under the work dir)."""

    root: Path
    beton: Path
    pt_dir: Path
    pack_dir: Path
    npy_dir: Path
    litdata_dir: Path
    mds_dir: Path

    @classmethod
    def under(cls, root: Path) -> DataPaths:
        return cls(
            root=root,
            beton=root / "pairs.beton",
            pt_dir=root / "pt",
            pack_dir=root / "packs",
            npy_dir=root / "npy",
            litdata_dir=root / "litdata",
            mds_dir=root / "mds",
        )

    def to_json(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, d: dict[str, str]) -> DataPaths:
        return cls(**{k: Path(v) for k, v in d.items()})


def make_arrays(
    n: int, shape: tuple[int, ...], dtype: str, num_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, labels)``: random images of ``shape`` and ``dtype``, int64 labels."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.uint8:
        a = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        b = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    else:
        a = rng.random((n, *shape), dtype=np.float32).astype(dtype)
        b = rng.random((n, *shape), dtype=np.float32).astype(dtype)
    labels = rng.integers(0, num_classes, n, dtype=np.int64)
    return a, b, labels


_ARRAYS: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def _save_samples(job: tuple[str, int, int]) -> int:
    import torch

    root, start, stop = job
    assert _ARRAYS is not None, "worker forked without arrays"
    a, b, labels = _ARRAYS
    for i in range(start, stop):
        # .copy(): torch.save of a view would store the whole array.
        torch.save(torch.from_numpy(a[i].copy()), f"{root}/{SPLIT}_A_images_{i}.pt")
        torch.save(torch.from_numpy(b[i].copy()), f"{root}/{SPLIT}_B_images_{i}.pt")
        torch.save(torch.tensor(int(labels[i])), f"{root}/{SPLIT}_labels_{i}.pt")
    return stop - start


def write_per_sample(root: Path, arrays: tuple[np.ndarray, ...], workers: int = 2) -> None:
    """The user's original layout: three ``.pt`` files per sample, in ``workers`` processes."""
    global _ARRAYS
    root.mkdir(parents=True, exist_ok=True)
    n = len(arrays[0])
    step = 512
    jobs = [(str(root), s, min(n, s + step)) for s in range(0, n, step)]
    _ARRAYS = (arrays[0], arrays[1], arrays[2])
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            for _ in pool.imap_unordered(_save_samples, jobs):
                pass
    finally:
        _ARRAYS = None


def write_packs(root: Path, arrays: tuple[np.ndarray, ...], pack_size: int) -> None:
    """The "1000 samples per .pt file" advice: lists of ``(A, B, label)`` tensors."""
    import torch

    a, b, labels = arrays
    root.mkdir(parents=True, exist_ok=True)
    for k, start in enumerate(range(0, len(a), pack_size)):
        pack = [
            (
                torch.from_numpy(a[i].copy()),
                torch.from_numpy(b[i].copy()),
                torch.tensor(int(labels[i])),
            )
            for i in range(start, min(len(a), start + pack_size))
        ]
        torch.save(pack, root / f"{SPLIT}_batch_{k}.pt")


def write_npy(root: Path, arrays: tuple[np.ndarray, ...]) -> None:
    """Three ``.npy`` files that the memmap contestant maps."""
    root.mkdir(parents=True, exist_ok=True)
    for name, arr in zip(("A", "B", "labels"), arrays):
        np.save(root / f"{name}.npy", arr)


def _write_beton(path: Path, arrays: tuple[np.ndarray, ...]) -> None:
    from ffcv_pairs import ArraySource, write_pairs

    write_pairs(ArraySource(*arrays), path, workers=2, progress=False)


def _beton_from_npy(path: Path, npy_dir: Path) -> None:
    arrays = tuple(np.load(npy_dir / f"{k}.npy", mmap_mode="r") for k in ("A", "B", "labels"))
    _write_beton(path, arrays)


def write_beton(path: Path, npy_dir: Path) -> None:
    """``write_pairs(ArraySource(A, B, labels), workers=2)`` from the ``.npy`` files.

    Runs in a process forked from the forkserver, which has ffcv imported already.
    """
    from bench.core.fresh_process import call_fresh

    call_fresh(_beton_from_npy, path, npy_dir)


def _write_tiny(path: Path, n: int, shape: tuple[int, ...], seed: int) -> None:
    _write_beton(path, make_arrays(n, shape, "uint8", 10, seed))


def write_tiny_beton(path: Path, n: int, shape: tuple[int, ...], seed: int) -> Path:
    """A file of ``n`` tiny samples for the start-up table (reused when present)."""
    if not (path.exists() and path.with_name(path.name + ".json").exists()):
        from bench.core.fresh_process import call_fresh

        call_fresh(_write_tiny, path, n, shape, seed)
    return path


def _stamp(cfg: BenchConfig) -> dict[str, object]:
    return {
        "n": cfg.n,
        "shape": list(cfg.shape),
        "dtype": cfg.dtype,
        "num_classes": cfg.num_classes,
        "seed": cfg.seed,
        "pack_size": cfg.pack_size,
        "version": 1,
    }


def prepare_data(
    cfg: BenchConfig, on_npy: Callable[[], None] | None = None
) -> tuple[DataPaths, dict[str, float]]:
    """Generate (or reuse) the main data set; returns its paths and seconds per format.

    ``on_npy`` is called as soon as the ``.npy`` files exist (the extras convert from them).
    """
    import time

    paths = DataPaths.under(cfg.work / "data")
    stamp_file = paths.root / "stamp.json"
    if stamp_file.exists() and json.loads(stamp_file.read_text()) == _stamp(cfg):
        log.info("data: reusing %s", paths.root)
        if on_npy is not None:
            on_npy()
        return paths, {}
    if paths.root.exists():
        shutil.rmtree(paths.root)
    paths.root.mkdir(parents=True)
    seconds: dict[str, float] = {}
    arrays = make_arrays(cfg.n, cfg.shape, cfg.dtype, cfg.num_classes, cfg.seed)
    steps = (
        ("npy", lambda: write_npy(paths.npy_dir, arrays)),
        ("beton", lambda: write_beton(paths.beton, paths.npy_dir)),
        ("per-sample .pt", lambda: write_per_sample(paths.pt_dir, arrays)),
        (".pt packs", lambda: write_packs(paths.pack_dir, arrays, cfg.pack_size)),
    )
    for name, step in steps:
        t = time.perf_counter()
        step()
        seconds[name] = time.perf_counter() - t
        log.info("data: %s in %.1f s", name, seconds[name])
        if name == "npy" and on_npy is not None:
            on_npy()
    stamp_file.write_text(json.dumps(_stamp(cfg)))
    return paths, seconds
