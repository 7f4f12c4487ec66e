"""The plain-PyTorch contestants: ``Dataset`` classes as users write them.

* :class:`PerSamplePt`: three ``torch.load`` calls per sample (the original setup).
* :class:`PackPt`: the "1000 samples per .pt file" advice as usually given: every
  ``__getitem__`` loads the whole pack and indexes it (optionally ``mmap=True``),
  or keeps the last few packs in an LRU cache (one per worker).
* :class:`MemmapPairs`: ``.npy`` memmaps, whole batches from ``__getitems__``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

__all__ = [
    "MemmapPairs",
    "PackPt",
    "PerSamplePt",
    "close_dataloader",
    "make_dataloader",
    "passthrough",
]

SPLIT = "train"


class PerSamplePt(Dataset):
    """``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt``, ``{split}_labels_{i}.pt``."""

    def __init__(self, root: Path, n: int):
        self.root, self.n = str(root), n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        r, s = self.root, SPLIT
        a = torch.load(f"{r}/{s}_A_images_{i}.pt", weights_only=True)
        b = torch.load(f"{r}/{s}_B_images_{i}.pt", weights_only=True)
        label = torch.load(f"{r}/{s}_labels_{i}.pt", weights_only=True)
        return a, b, label


class PackPt(Dataset):
    """``{split}_batch_{k}.pt`` packs of ``pack_size`` ``(A, B, label)`` tuples.

    Args:
        root: Folder of the packs.
        n: Samples in all packs.
        pack_size: Samples per pack.
        mmap: ``torch.load(..., mmap=True)``.
        lru: Packs kept open per worker (0: load the pack on every item).
    """

    def __init__(self, root: Path, n: int, pack_size: int, mmap: bool = False, lru: int = 0):
        self.root, self.n, self.pack_size = str(root), n, pack_size
        self.mmap, self.lru = mmap, lru
        self._cache: OrderedDict[int, Any] = OrderedDict()

    def __len__(self) -> int:
        return self.n

    def _load(self, k: int) -> Any:
        path = f"{self.root}/{SPLIT}_batch_{k}.pt"
        return torch.load(path, weights_only=True, mmap=self.mmap)

    def _pack(self, k: int) -> Any:
        if not self.lru:
            return self._load(k)
        if k in self._cache:
            self._cache.move_to_end(k)
            return self._cache[k]
        pack = self._cache[k] = self._load(k)
        if len(self._cache) > self.lru:
            self._cache.popitem(last=False)
        return pack

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._pack(i // self.pack_size)[i % self.pack_size]


class MemmapPairs(Dataset):
    """``A.npy``, ``B.npy``, ``labels.npy`` mapped read-only; batches via ``__getitems__``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.n = int(np.load(self.root / "labels.npy", mmap_mode="r").shape[0])
        self._arrays: tuple[np.ndarray, ...] | None = None

    def __len__(self) -> int:
        return self.n

    def _open(self) -> tuple[np.ndarray, ...]:
        # Opened lazily so that each worker maps the files itself.
        if self._arrays is None:
            self._arrays = tuple(
                np.load(self.root / f"{name}.npy", mmap_mode="r") for name in ("A", "B", "labels")
            )
        return self._arrays

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        idx = np.asarray(indices, dtype=np.int64)
        return tuple(torch.from_numpy(np.ascontiguousarray(arr[idx])) for arr in self._open())

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return self.__getitems__([i])


def passthrough(batch: Any) -> Any:
    """``collate_fn`` for datasets that already return whole batches."""
    return batch


def make_dataloader(
    dataset: Dataset,
    batch_size: int,
    *,
    seed: int,
    collate: Any = None,
    sampler: Any = None,
    workers: int | None = None,
) -> DataLoader:
    """A ``DataLoader`` as a user sets it up: workers = cores, persistent, pinned on CUDA."""
    workers = len(os.sched_getaffinity(0)) if workers is None else workers
    gen = torch.Generator()
    gen.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=torch.cuda.is_available(),
        drop_last=True,
        collate_fn=collate,
        generator=gen if sampler is None else None,
    )


def close_dataloader(loader: DataLoader) -> None:
    """Stop the persistent workers of ``loader`` now (not at garbage collection)."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    loader._iterator = None
