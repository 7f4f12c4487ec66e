"""The user's ``Dataset`` classes at full scale (imported by each simulated rank).

* :class:`PathLists`: as users write it, the path of every file in three Python
  lists built in ``__init__`` (3 x N strings per rank, which every forked
  DataLoader worker shares copy-on-write until reference counting touches them),
  three ``torch.load`` calls per item. The lists are built from the known names,
  which is cheaper than the usual ``sorted(glob(...))`` over the folder.
* :class:`PackFiles`: the "1000 samples per .pt file" advice read at its best: one
  item is one whole pack, loaded once and collated into one batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset, default_collate

__all__ = ["PackFiles", "PathLists", "one_pack"]

SPLIT = "train"


class PathLists(Dataset):
    """The user's ``Dataset``: every file's path in a Python list, ``torch.load`` per item."""

    def __init__(self, root: str, n: int):
        self.a_paths = [f"{root}/{SPLIT}_A_images_{i}.pt" for i in range(n)]
        self.b_paths = [f"{root}/{SPLIT}_B_images_{i}.pt" for i in range(n)]
        self.label_paths = [f"{root}/{SPLIT}_labels_{i}.pt" for i in range(n)]

    def __len__(self) -> int:
        return len(self.a_paths)

    def __getitem__(self, i: int) -> tuple[Any, Any, Any]:
        a = torch.load(self.a_paths[i], weights_only=True)
        b = torch.load(self.b_paths[i], weights_only=True)
        label = torch.load(self.label_paths[i], weights_only=True)
        return a, b, label


class PackFiles(Dataset):
    """Item ``k`` = pack ``k`` (one ``torch.load``), collated into ``[A, B, labels]``."""

    def __init__(self, root: str, n: int, pack_size: int):
        self.paths = [f"{root}/{SPLIT}_batch_{k}.pt" for k in range(-(-n // pack_size))]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, k: int) -> Any:
        return default_collate(torch.load(self.paths[k], weights_only=True))


def one_pack(batch: list[Any]) -> Any:
    """``collate_fn`` for batches of one already collated pack."""
    return batch[0]
