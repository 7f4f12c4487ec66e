"""The batched source: ``{split}_batch_{k}.pt`` for ``k = 0 .. K-1``, each a list of
``(A, B, label)`` tuples.

Lengths without loading every file: ``torch.save`` of a list of tuples writes one
zip entry per tensor storage plus a fixed set of records. Batch 0 is loaded (the
writer needs sample 0 anyway) and its zip directory tells the number of records
and of storages per item; the length of every other file then follows from the
entry count in its zip end record, read from the last bytes of the file. A file
where that does not divide evenly, or counts no item at all (the legacy non-zip
format; items with no tensor storage, such as numpy arrays, which live in the pickle
alone) is loaded with ``torch.load(mmap=True)``, which reads no tensor data, and what
it holds is its length (or it is refused, by name). The writer's workers load every
other file in full anyway and check its length; a file whose items are stored
differently is refused there, by name. So no file is counted empty unless it is.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from .._fileio import read_regular
from .discover import SplitFiles, scan
from .ptfile import read_zip_entries, zip_entry_count
from .sources import PairSource, SourceError, load_pt

__all__ = ["BatchedSource"]

_KIND = "batch"
_SAMPLED = 8  # batch files whose sizes and mtimes go into the fingerprint


def _entry_count(path: str) -> int | None:
    """Entries in the zip archive at ``path``, touching only its end; None if not a zip
    (or not a regular file: :func:`~ffcv_pairs.write.sources.load_pt` refuses it)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
            try:
                return zip_entry_count(view, path)
            except ValueError:
                return None


class BatchedSource(PairSource):
    """``{split}_batch_{k}.pt``, each a list of ``(A, B, label)`` tuples.

    Args:
        root: The directory.
        split: The file prefix, e.g. ``train``.
        files: What :func:`~ffcv_pairs.write.discover.scan` found (scans when None).

    Attributes:
        offsets: ``offsets[k]`` is the index of batch file ``k``'s first sample;
            ``offsets[-1]`` is the length.
    """

    def __init__(self, root: str | os.PathLike[str], split: str, files: SplitFiles | None = None):
        self.root = Path(root)
        self.split = split
        files = files if files is not None else scan(self.root, [split])[split]
        k = files.complete_count((_KIND,), "batched")
        family = files.family(_KIND)
        self._prefix, self._width = os.path.join(self.root, family.prefix), family.width
        self._cached: tuple[int, list[Any]] | None = None
        self.offsets = np.concatenate([[0], np.cumsum(self._lengths(k))]).astype(np.int64)

    def path(self, k: int) -> str:
        """The file of batch ``k``."""
        return f"{self._prefix}{str(k).zfill(self._width)}.pt"

    def _lengths(self, k: int) -> np.ndarray:
        first = self._load(0, mmap_only=False)
        self._cached = (0, first)
        lengths = np.empty(k, dtype=np.int64)
        lengths[0] = len(first)
        buf = read_regular(self.path(0))
        try:
            entries = read_zip_entries(buf, self.path(0)) if buf[:4] == b"PK\x03\x04" else None
        except ValueError:
            entries = None
        per_item, fixed = 0, 0
        if entries is not None and len(first):
            storages = sum(1 for name in entries if name.partition("/")[2].startswith("data/"))
            per_item = storages // len(first) if storages % len(first) == 0 else 0
            fixed = len(entries) - storages
        for b in range(1, k):
            count = _entry_count(self.path(b)) if per_item else None
            rest = -1 if count is None else count - fixed
            if rest > 0 and rest % per_item == 0:  # checked by read_file when it is read
                lengths[b] = rest // per_item
            else:  # counted empty: a pack with no item is never read, so never checked
                lengths[b] = len(self._load(b, mmap_only=True))
        return lengths

    def _load(self, k: int, mmap_only: bool) -> list[Any]:
        path = self.path(k)
        try:
            data = load_pt(path, mmap=mmap_only)
        except SourceError:
            if not mmap_only:
                raise
            data = load_pt(path)  # legacy (non-zip) .pt files cannot be memory-mapped
        if not isinstance(data, list | tuple):
            raise SourceError(
                f"{path}: expected a list of (A, B, label) tuples, got {type(data).__name__}"
            )
        return list(data)

    def read_file(self, k: int) -> list[Any]:
        """All items of batch file ``k``, checked to number as many as counted at the start."""
        data = self._load(k, mmap_only=False)
        want = int(self.offsets[k + 1] - self.offsets[k])
        if len(data) != want:
            raise SourceError(
                f"{self.path(k)}: holds {len(data)} items, but {want} were counted from its zip "
                f"directory when the conversion started: it changed since, or its items hold "
                f"another number of tensors than those of {os.path.basename(self.path(0))} (say "
                f"0-d tensor labels here and Python ints there); save every pack's items alike"
            )
        return data

    def locate(self, i: int) -> tuple[int, int]:
        """``(batch file, position in it)`` of sample ``i``."""
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return k, i - int(self.offsets[k])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def item(self, data: list[Any], k: int, j: int) -> tuple[Any, ...]:
        """Item ``j`` of loaded batch file ``k``, checked to be an ``(A, B, label)`` triple
        or an ``(A, B, label, {name: value})`` tuple."""
        item = data[j]
        if isinstance(item, list | tuple) and len(item) == 4 and isinstance(item[3], dict):
            return (*item[:3], item[3]) if item[3] else (item[0], item[1], item[2])
        if not isinstance(item, list | tuple) or len(item) != 3:
            raise SourceError(
                f"{self.path(k)}[{j}]: expected an (A, B, label) or (A, B, label, "
                f"{{name: value}}) tuple, got "
                f"{type(item).__name__}"
                + (f" of length {len(item)}" if isinstance(item, list | tuple) else "")
            )
        return item[0], item[1], item[2]

    def read(self, i: int) -> tuple[Any, ...]:
        k, j = self.locate(i)
        if self._cached is None or self._cached[0] != k:
            self._cached = (k, self.read_file(k))
        return self.item(self._cached[1], k, j)

    def release(self) -> None:
        """Drop the cached batch file (before forking workers)."""
        self._cached = None

    def where(self, i: int, part: str) -> str:
        k, j = self.locate(i)
        return f"{self.path(k)}[{j}].{part}"

    def describe(self) -> str:
        return f"batched:{self.root}/{self.split}_batch_{{k}}.pt"

    def fingerprint(self) -> dict[str, Any]:
        """Adds the size and mtime of a few batch files spread over ``0..K-1``."""
        stats = {}
        last = len(self.offsets) - 2
        for k in np.unique(np.linspace(0, last, _SAMPLED).astype(np.int64)).tolist():
            st = os.stat(self.path(k))
            stats[os.path.basename(self.path(k))] = [st.st_size, st.st_mtime_ns]
        return super().fingerprint() | {"files": stats}
