"""The GPU check's yardstick: pairs/s into GPU memory, and the plain ``torch`` ``DataLoader``
that ``make gpu-check``'s throughput step measures ffcv-pairs against (a numpy memmap of the
same arrays, pinned memory, the same normalisation to bfloat16 on the GPU)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["MEAN", "STD", "MemmapPairs", "dataloader_batches", "pairs_per_s"]

#: The normalisation of both sides of the comparison (ImageNet's, in 0..255 units).
MEAN, STD = (123.7, 116.3, 103.5), (58.4, 57.1, 57.4)


def pairs_per_s(batches: Callable[[], Any], seconds: float) -> float:
    """Pairs/s over whole epochs for at least ``seconds``, after one warm-up epoch."""
    for _ in batches():
        pass
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for *_, label in batches():
            n += len(label)
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


class MemmapPairs(torch.utils.data.Dataset):
    """The baseline's dataset: one pair per ``__getitem__`` from numpy memmaps."""

    def __init__(self, work: Path, side: int):
        self.prefix, self.arrays = str(work / f"{side}-"), None
        self.n = len(np.load(self.prefix + "label.npy"))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        if self.arrays is None:
            names = ("A", "B", "label")
            self.arrays = [np.load(f"{self.prefix}{k}.npy", mmap_mode="r") for k in names]
        a, b, label = self.arrays
        return torch.from_numpy(np.array(a[i])), torch.from_numpy(np.array(b[i])), int(label[i])


def dataloader_batches(work: Path, side: int, bs: int) -> Callable[[], Any]:
    """A plain DataLoader (shuffled, pinned, 12 workers or the cores), then the same
    normalisation to bfloat16 on the GPU; no flip or crop."""
    workers = min(12, len(os.sched_getaffinity(0)))
    loader = torch.utils.data.DataLoader(
        MemmapPairs(work, side), batch_size=bs, shuffle=True, num_workers=workers,
        pin_memory=True, drop_last=True, persistent_workers=True,
    )  # fmt: skip
    dev = torch.device("cuda", torch.cuda.current_device())
    m, s = (torch.tensor(v, device=dev).reshape(1, 3, 1, 1) for v in (MEAN, STD))

    def batches() -> Any:
        for a, b, label in loader:
            a, b = (((x.to(dev, non_blocking=True).float() - m) / s).bfloat16() for x in (a, b))
            yield a, b, label.to(dev, non_blocking=True)

    return batches
