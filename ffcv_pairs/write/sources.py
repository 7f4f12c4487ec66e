"""Where pairs come from: the .pt layouts on disk and in-memory sources.

Every source is an indexed sequence of ``(A, B, label)`` triples with a
``where(i, part)`` that names the file (or index) a value came from, so that a bad
value can be reported by name. Layouts on disk:

* **per-sample**: ``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt`` and
  ``{split}_labels_{i}.pt`` for ``i = 0 .. N-1``, one tensor per file.
* **batched**: ``{split}_batch_{k}.pt`` for ``k = 0 .. K-1``, each a list of
  ``(A, B, label)`` tuples.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..format.schema import PairSchema

__all__ = [
    "ArraySource",
    "BatchedSource",
    "IndexedSource",
    "PairSource",
    "PerSampleSource",
    "SourceError",
    "as_source",
    "cast_to_store",
    "open_source",
    "to_array",
    "to_label",
]

Layout = Literal["auto", "per-sample", "batched"]
_PER_SAMPLE_KINDS = ("A_images", "B_images", "labels")


class SourceError(ValueError):
    """A bad input: the message names the file (or index), the value and what is wrong."""


def _load_pt(path: Path, mmap: bool = False) -> Any:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except Exception as e:  # torch raises many types for corrupt/unsupported files
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise SourceError(f"{path}: cannot load .pt file ({type(e).__name__}: {first})") from None


def to_array(value: Any, where: str) -> np.ndarray:
    """A C-contiguous numpy array from a tensor or array, or a :class:`SourceError`."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            raise SourceError(f"{where}: bfloat16 tensors are not supported; convert to float32")
        return np.ascontiguousarray(value.detach().cpu().numpy())
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    raise SourceError(f"{where}: expected a tensor or numpy array, got {type(value).__name__}")


def to_label(value: Any, where: str) -> int:
    """An int from an integer scalar (int, 0-d/1-element integer tensor or array)."""
    import torch

    if isinstance(value, bool):
        raise SourceError(f"{where}: label must be an integer scalar, got bool {value}")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, torch.Tensor | np.ndarray):
        arr = to_array(value, where)
        if arr.dtype.kind not in "iu" or arr.size != 1 or arr.ndim > 1:
            raise SourceError(
                f"{where}: label must be an integer scalar, got {arr.dtype} of shape "
                f"{tuple(arr.shape)}"
            )
        return int(arr.reshape(()))
    raise SourceError(f"{where}: label must be an integer scalar, got {type(value).__name__}")


def cast_to_store(arr: np.ndarray, store: str | None, where: str) -> np.ndarray:
    """Cast to the storage dtype, refusing any cast that changes a value."""
    if store is None or arr.dtype == np.dtype(store):
        return arr
    if arr.dtype.kind not in "uif":
        raise SourceError(f"{where}: cannot store {arr.dtype} as {store}")
    out = arr.astype(store)
    with np.errstate(invalid="ignore"):
        if store == "uint8":
            ok = (arr >= 0) & (arr <= 255)
            if arr.dtype.kind == "f":
                ok &= arr == np.floor(arr)
        else:
            ok = out.astype(arr.dtype) == arr
    ok = np.broadcast_to(ok, arr.shape)
    if not ok.all():
        bad = np.unravel_index(int(np.argmin(ok)), arr.shape)
        raise SourceError(
            f"{where}: value {arr[bad]!r} at index {tuple(int(x) for x in bad)} would change "
            f"when stored as {store}; refusing (drop --store-dtype, or fix the data)"
        )
    return out


class PairSource(ABC):
    """An indexed source of ``(A, B, label)`` triples."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def read(self, i: int) -> tuple[Any, Any, Any]:
        """The raw triple of sample ``i`` (tensors/arrays and an integer label)."""

    def where(self, i: int, part: str) -> str:
        """Human-readable origin of ``part`` (a field name) of sample ``i``."""
        return f"{self.describe()}[{i}].{part}"

    def describe(self) -> str:
        return type(self).__name__

    def read_arrays(self, start: int, stop: int) -> tuple[np.ndarray, ...] | None:
        """Samples ``start:stop`` as stacked ``(A, B, labels)`` arrays, when cheap.

        Sources that hold stacked arrays return views; the default returns None
        and the writer reads sample by sample.
        """
        return None


class IndexedSource(PairSource):
    """Any object with ``__len__`` and ``__getitem__`` returning ``(A, B, label)``."""

    def __init__(self, data: Any, name: str | None = None):
        if not hasattr(data, "__getitem__") or not hasattr(data, "__len__"):
            raise TypeError(f"source must have __len__ and __getitem__, got {type(data).__name__}")
        self.data = data
        self.name = name or type(data).__name__

    def __len__(self) -> int:
        return len(self.data)

    def read(self, i: int) -> tuple[Any, Any, Any]:
        item = self.data[i]
        if not isinstance(item, Sequence) or len(item) != 3:
            raise SourceError(
                f"{self.describe()}[{i}]: expected an (A, B, label) triple, got "
                f"{type(item).__name__}"
            )
        return item[0], item[1], item[2]

    def describe(self) -> str:
        return self.name


class ArraySource(PairSource):
    """Three stacked arrays: ``A[N, ...]``, ``B[N, ...]`` and ``labels[N]``."""

    def __init__(self, a: np.ndarray, b: np.ndarray, labels: np.ndarray, name: str = "arrays"):
        a, b, labels = np.asarray(a), np.asarray(b), np.asarray(labels)
        if not (len(a) == len(b) == len(labels)):
            raise ValueError(
                f"ArraySource: A, B and labels must have the same length, got "
                f"{len(a)}, {len(b)}, {len(labels)}"
            )
        if labels.dtype.kind not in "iu" or labels.ndim != 1:
            raise SourceError(
                f"{name}.labels: must be a 1-d integer array, got {labels.dtype} "
                f"of shape {labels.shape}"
            )
        self.a, self.b, self.labels, self.name = a, b, labels.astype(np.int64), name

    def __len__(self) -> int:
        return len(self.a)

    def read(self, i: int) -> tuple[Any, Any, Any]:
        return self.a[i], self.b[i], self.labels[i]

    def read_arrays(self, start: int, stop: int) -> tuple[np.ndarray, ...]:
        return self.a[start:stop], self.b[start:stop], self.labels[start:stop]

    def describe(self) -> str:
        return self.name


class _IndexBitmap:
    """Which indices 0..n-1 were seen, without a Python object per file."""

    def __init__(self) -> None:
        self.bits = np.zeros(1024, dtype=bool)
        self.count = 0

    def add(self, i: int) -> bool:
        if i >= len(self.bits):
            grown = np.zeros(max(2 * len(self.bits), i + 1), dtype=bool)
            grown[: len(self.bits)] = self.bits
            self.bits = grown
        if self.bits[i]:
            return False
        self.bits[i] = True
        self.count += 1
        return True

    def span(self) -> int:
        """One past the largest index seen (0 when empty)."""
        nz = np.flatnonzero(self.bits)
        return int(nz[-1]) + 1 if len(nz) else 0


class PerSampleSource(PairSource):
    """``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt``, ``{split}_labels_{i}.pt``."""

    def __init__(self, root: str | os.PathLike[str], split: str):
        self.root = Path(root)
        self.split = split
        pattern = re.compile(rf"^{re.escape(split)}_({'|'.join(_PER_SAMPLE_KINDS)})_(\d+)\.pt$")
        seen = {kind: _IndexBitmap() for kind in _PER_SAMPLE_KINDS}
        with os.scandir(self.root) as entries:
            for entry in entries:
                m = pattern.match(entry.name)
                if m is None:
                    continue
                digits = m.group(2)
                if len(digits) > 1 and digits.startswith("0"):
                    raise SourceError(
                        f"{self.root / entry.name}: index {digits!r} has leading zeros; "
                        f"expected {split}_{m.group(1)}_{int(digits)}.pt"
                    )
                seen[m.group(1)].add(int(digits))
        n = max(bm.span() for bm in seen.values())
        if n == 0:
            raise SourceError(
                f"{self.root}: no per-sample files for split {split!r} "
                f"(expected {split}_A_images_0.pt, {split}_B_images_0.pt, {split}_labels_0.pt)"
            )
        for kind in _PER_SAMPLE_KINDS:
            bits = seen[kind].bits
            have = np.zeros(n, dtype=bool)
            have[: min(n, len(bits))] = bits[:n]
            if not have.all():
                first = int(np.flatnonzero(~have)[0])
                raise SourceError(
                    f"{self._path(kind, first)}: missing; per-sample files must cover "
                    f"indices 0..{n - 1} for A_images, B_images and labels"
                )
        self.n = n

    def _path(self, kind: str, i: int) -> Path:
        return self.root / f"{self.split}_{kind}_{i}.pt"

    def __len__(self) -> int:
        return self.n

    def read(self, i: int) -> tuple[Any, Any, Any]:
        a, b, label = (_load_pt(self._path(k, i)) for k in _PER_SAMPLE_KINDS)
        return a, b, label

    def where(self, i: int, part: str) -> str:
        names = PairSchema.field_names()
        kind = _PER_SAMPLE_KINDS[names.index(part)] if part in names else part
        return str(self._path(kind, i))

    def describe(self) -> str:
        return f"per-sample:{self.root}/{self.split}_*_{{i}}.pt"


class BatchedSource(PairSource):
    """``{split}_batch_{k}.pt``, each a list of ``(A, B, label)`` tuples."""

    def __init__(self, root: str | os.PathLike[str], split: str):
        self.root = Path(root)
        self.split = split
        pattern = re.compile(rf"^{re.escape(split)}_batch_(\d+)\.pt$")
        found = _IndexBitmap()
        with os.scandir(self.root) as entries:
            for entry in entries:
                m = pattern.match(entry.name)
                if m is not None:
                    found.add(int(m.group(1)))
        k = found.span()
        if k == 0:
            raise SourceError(
                f"{self.root}: no batched files for split {split!r} "
                f"(expected {split}_batch_0.pt, {split}_batch_1.pt, ...)"
            )
        if found.count != k:
            first = int(np.flatnonzero(~found.bits[:k])[0])
            raise SourceError(f"{self._path(first)}: missing; batch files must cover 0..{k - 1}")
        # Lengths from a memory-mapped load: tensor data is not read.
        lengths = np.array([len(self._load(b, mmap=True)) for b in range(k)], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self._cached: tuple[int, list[Any]] | None = None

    def _path(self, k: int) -> Path:
        return self.root / f"{self.split}_batch_{k}.pt"

    def _load(self, k: int, mmap: bool = False) -> list[Any]:
        path = self._path(k)
        try:
            data = _load_pt(path, mmap=mmap)
        except SourceError:
            if not mmap:
                raise
            data = _load_pt(path)  # legacy (non-zip) .pt files cannot be memory-mapped
        if not isinstance(data, list | tuple):
            raise SourceError(
                f"{path}: expected a list of (A, B, label) tuples, got {type(data).__name__}"
            )
        return list(data)

    def _locate(self, i: int) -> tuple[int, int]:
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return k, i - int(self.offsets[k])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def read(self, i: int) -> tuple[Any, Any, Any]:
        k, j = self._locate(i)
        if self._cached is None or self._cached[0] != k:
            self._cached = (k, self._load(k))
        item = self._cached[1][j]
        if not isinstance(item, list | tuple) or len(item) != 3:
            raise SourceError(
                f"{self._path(k)}[{j}]: expected an (A, B, label) tuple, got "
                f"{type(item).__name__}"
                + (f" of length {len(item)}" if isinstance(item, list | tuple) else "")
            )
        return item[0], item[1], item[2]

    def where(self, i: int, part: str) -> str:
        k, j = self._locate(i)
        return f"{self._path(k)}[{j}].{part}"

    def describe(self) -> str:
        return f"batched:{self.root}/{self.split}_batch_{{k}}.pt"


def _detect_layout(root: Path, split: str) -> str:
    has_per_sample = (root / f"{split}_A_images_0.pt").exists()
    has_batched = (root / f"{split}_batch_0.pt").exists()
    if has_per_sample and has_batched:
        raise SourceError(
            f"{root}: both per-sample and batched files exist for split {split!r}; "
            f"pass --layout per-sample or --layout batched"
        )
    if has_per_sample:
        return "per-sample"
    if has_batched:
        return "batched"
    raise SourceError(
        f"{root}: no files for split {split!r} in a known layout (expected "
        f"{split}_A_images_0.pt ... for per-sample, or {split}_batch_0.pt ... for batched)"
    )


def open_source(root: str | os.PathLike[str], split: str, layout: Layout = "auto") -> PairSource:
    """Open the .pt files of ``split`` under ``root``.

    Raises:
        SourceError: the directory is missing, empty, or in no known (or an ambiguous) layout.
    """
    root = Path(root)
    if not root.is_dir():
        raise SourceError(f"{root}: not a directory")
    if layout == "auto":
        layout = _detect_layout(root, split)  # type: ignore[assignment]
    if layout == "per-sample":
        return PerSampleSource(root, split)
    if layout == "batched":
        return BatchedSource(root, split)
    raise SourceError(f"unknown layout {layout!r}; must be one of auto, per-sample, batched")


def as_source(data: Any) -> PairSource:
    """Wrap an indexed object (torch Dataset, list of triples) as a :class:`PairSource`."""
    return data if isinstance(data, PairSource) else IndexedSource(data)
