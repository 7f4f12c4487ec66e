"""Where pairs come from: the base class, in-memory sources and value checks.

Every source is an indexed sequence of ``(A, B, label)`` triples with a
``where(i, part)`` that names the file (or index) a value came from, so that a bad
value can be reported by name. The two kinds of ``.pt`` source on disk live in
:mod:`~ffcv_pairs.write.persample` and :mod:`~ffcv_pairs.write.batched`, and
:func:`~ffcv_pairs.write.source_kinds.open_source` finds them.
"""

from __future__ import annotations

import re
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import integer, shown
from .._fileio import NotRegularFileError, regular_size
from ..errors import FfcvPairsError

if TYPE_CHECKING:
    from ..format.schema import ArraySpec, Quantization

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "ArraySource",
    "IndexedSource",
    "PairSource",
    "SourceError",
    "as_source",
    "cast_to_store",
    "int64_labels",
    "load_pt",
    "quantize_floats",
    "to_array",
    "to_label",
]


#: The labels a file can store (its label field is int64).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: How torch.load(weights_only=True) names the first global it refuses to unpickle.
_REFUSED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
_UNPICKLER = re.compile(r"WeightsUnpickler error: ([^\n]*)")


class SourceError(FfcvPairsError, ValueError):
    """A bad input: the message names the file (or index), the value and what is wrong."""


def load_pt(path: str | Path, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)``; any failure is a :class:`SourceError` naming it."""
    import torch

    try:
        regular_size(path)  # before torch opens it: a FIFO would block, a device never end
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except NotRegularFileError as e:
        raise SourceError(str(e)) from None
    except Exception as e:  # torch raises many types for corrupt/unsupported files
        raise SourceError(f"{path}: {_load_failure(e)}") from None


def _load_failure(error: Exception) -> str:
    """What a failed ``torch.load(weights_only=True)`` means, in one line without the ANSI
    codes torch puts in its messages: for a pickled object that is not a tensor (a numpy
    array, say), which type it holds."""
    text = _ANSI.sub("", str(error)).strip()
    refused = _REFUSED_GLOBAL.search(text)
    if refused is not None:
        name = refused.group(1)
        if name.endswith("multiarray._reconstruct") or name == "numpy.ndarray":
            held, fix = "a numpy array (numpy.ndarray)", "save torch.from_numpy(array) instead"
        elif name.endswith("multiarray.scalar"):
            held, fix = "a numpy scalar", "save torch.tensor(value) instead"
        else:
            held, fix = f"a pickled {name}", "save a torch tensor instead"
        return f"holds {held}, not a torch tensor; torch.load(weights_only=True) refuses it ({fix})"
    unpickler = _UNPICKLER.search(text)  # torch's first lines are advice, not the cause
    first = unpickler.group(1) if unpickler else (text.splitlines() or [""])[0]
    return f"cannot load .pt file ({type(error).__name__}: {first.strip()})"


def to_array(value: Any, where: str) -> np.ndarray:
    """A C-contiguous numpy array from a tensor or array, or a :class:`SourceError`."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise SourceError(
                f"{where}: holds a sparse tensor ({str(value.layout).removeprefix('torch.')}); "
                f"save a dense one (tensor.to_dense())"
            )
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
        return _in_int64(int(value), where)
    if isinstance(value, torch.Tensor | np.ndarray):
        arr = to_array(value, where)
        shape = tuple(value.shape)  # to_array makes a 0-d value 1-d
        if arr.dtype.kind not in "iu" or arr.size != 1 or len(shape) > 1:
            raise SourceError(
                f"{where}: label must be an integer scalar, got {arr.dtype} of shape {shape}"
            )
        return _in_int64(int(arr.reshape(())), where)
    raise SourceError(f"{where}: label must be an integer scalar, got {type(value).__name__}")


def _outside_int64(value: int, where: str) -> SourceError:
    return SourceError(
        f"{where}: label {value} is outside the int64 range of stored labels "
        f"({INT64_MIN} to {INT64_MAX})"
    )


def _in_int64(value: int, where: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise _outside_int64(value, where)
    return value


def int64_labels(labels: Any, where: str, first: int = 0) -> np.ndarray:
    """Integer ``labels`` (1-d) as int64, refusing one that int64 does not hold (a uint64
    of ``2**63`` or more) by ``where[first + its index]`` and its value."""
    labels = np.asarray(labels)
    if labels.dtype.kind == "u" and labels.dtype.itemsize >= 8:
        over = np.flatnonzero(labels > INT64_MAX)
        if len(over):
            i = int(over[0])
            raise _outside_int64(int(labels[i]), f"{where}[{first + i}]")
    return labels.astype(np.int64)


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
            f"{where}: value {shown(arr[bad])} at index {tuple(int(x) for x in bad)} would change "
            f"when stored as {store}; refusing (drop --store-dtype, or fix the data)"
        )
    return out


def quantize_floats(arr: np.ndarray, q: Quantization, where: str) -> np.ndarray:
    """The uint8 codes of float ``arr`` (see :class:`~ffcv_pairs.format.schema.Quantization`);
    refuses integers, and values outside the range, naming the first and its index."""
    if arr.dtype.kind != "f":
        raise SourceError(
            f"{where}: quantize stores floating-point images, got {arr.dtype}; drop --quantize "
            f"(or use --store-dtype for a cast that keeps every value)"
        )
    outside = q.outside(arr)
    if outside.any():
        bad = np.unravel_index(int(np.argmax(outside)), arr.shape)
        at = tuple(int(x) for x in bad)
        raise SourceError(
            f"{where}: value {float(arr[bad])!r} at index {at} is outside the "
            f"quantize range [{q.lo:g}, {q.hi:g}] ({int(outside.sum())} such values); "
            f"refusing (widen --range, or fix the data)"
        )
    return q.encode(arr)


class PairSource(ABC):
    """An indexed source of ``(A, B, label)`` triples: ``len(src)``, ``src[i]`` (``i`` may be
    negative, as for a list) and ``for a, b, label in src``."""

    @abstractmethod
    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> tuple[Any, Any, Any]:
        """What :meth:`read` returns for sample ``i``.

        Raises:
            TypeError: ``i`` is not an integer (slices are not taken: a slice of a large
                source would read it all). IndexError: ``i`` is out of range.
        """
        index, n = integer("index", i), len(self)
        if not -n <= index < n:
            raise IndexError(f"{self.describe()}: index {index} is out of range for {n} samples")
        return self.read(index % n)

    def __iter__(self) -> Iterator[tuple[Any, Any, Any]]:
        return (self.read(i) for i in range(len(self)))

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

    def read_block(
        self, ids: Sequence[int], images: tuple[np.ndarray, np.ndarray], specs: Sequence[ArraySpec]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Samples ``ids`` at once, when cheap: their stored A and B bytes into the rows of
        ``images`` (uint8 ``(len(ids), nbytes)`` each, as ``specs`` stores them); returns
        ``(labels, done)``, and a sample not ``done`` goes through :meth:`read`. The default
        returns None: the writer reads sample by sample.
        """
        return None

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this source's content cheaply, for resuming a conversion.

        The default is the description and the length; file sources add the sizes
        and modification times of sampled files.
        """
        return {"source": self.describe(), "count": len(self)}

    def read_stats(self) -> tuple[int, int]:
        """``(fast reads, torch.load reads)`` of ``.pt`` files in this process so far."""
        return 0, 0


class IndexedSource(PairSource):
    """Any object with ``__len__`` and ``__getitem__`` returning ``(A, B, label)``."""

    def __init__(self, data: Any, name: str | None = None):
        # A string or a mapping has both, but does not hold samples 0, 1, ... .
        indexed = hasattr(data, "__getitem__") and hasattr(data, "__len__")
        if not indexed or isinstance(data, str | bytes | Mapping):
            raise TypeError(
                "source must be a PairSource or a sequence of (A, B, label) triples (with "
                f"__len__ and __getitem__), got {type(data).__name__}"
            )
        self.data = data
        self.name = name or type(data).__name__

    def __len__(self) -> int:
        return len(self.data)

    def read(self, i: int) -> tuple[Any, ...]:
        item = self.data[i]
        if isinstance(item, Sequence) and len(item) == 4 and isinstance(item[3], Mapping):
            return (*item[:3], item[3]) if item[3] else (item[0], item[1], item[2])
        if not isinstance(item, Sequence) or len(item) != 3:
            raise SourceError(
                f"{self.describe()}[{i}]: expected an (A, B, label) triple or an (A, B, label, "
                f"{{name: value}}) tuple, got {type(item).__name__}"
            )
        return item[0], item[1], item[2]

    def describe(self) -> str:
        return self.name


class ArraySource(PairSource):
    """Stacked arrays: ``A[N, ...]``, ``B[N, ...]``, ``labels[N, ...]`` (integers, floats or
    arrays of a fixed shape) and any extra fields by keyword, ``name=array[N, ...]``."""

    def __init__(
        self,
        a: np.ndarray,
        b: np.ndarray,
        labels: np.ndarray,
        name: str = "arrays",
        **extras: np.ndarray,
    ):
        a, b, labels = np.asarray(a), np.asarray(b), np.asarray(labels)
        self.extras = {key: np.asarray(value) for key, value in extras.items()}
        lengths = [len(a), len(b), len(labels), *(len(v) for v in self.extras.values())]
        if len(set(lengths)) != 1:
            extra = "".join(f", {name}" for name in self.extras)
            raise ValueError(
                f"ArraySource: a, b, labels{extra} must have the same length, got "
                f"{', '.join(map(str, lengths))}"
            )
        if labels.ndim == 0 or labels.dtype.kind not in "iuf":
            raise SourceError(
                f"{name}.labels: must be an integer or float array of N labels, got "
                f"{labels.dtype} of shape {labels.shape}"
            )
        self.a, self.b, self.name = a, b, name
        ints = labels.dtype.kind in "iu" and labels.ndim == 1
        self.labels = int64_labels(labels, f"{name}.labels") if ints else labels

    def __len__(self) -> int:
        return len(self.a)

    def read(self, i: int) -> tuple[Any, ...]:
        if self.extras:
            extras = {key: value[i] for key, value in self.extras.items()}
            return self.a[i], self.b[i], self.labels[i], extras
        return self.a[i], self.b[i], self.labels[i]

    def read_arrays(self, start: int, stop: int) -> tuple[np.ndarray, ...]:
        return self.a[start:stop], self.b[start:stop], self.labels[start:stop]

    def fingerprint(self) -> dict[str, Any]:
        """Length plus a CRC32 over a few sampled samples' bytes."""
        crc = 0
        for i in np.unique(np.linspace(0, len(self) - 1, 16).astype(np.int64)).tolist():
            parts = [self.a[i], self.b[i], self.labels[i], *(v[i] for v in self.extras.values())]
            for part in parts:
                crc = zlib.crc32(np.ascontiguousarray(part).tobytes(), crc)
        return super().fingerprint() | {"sampled_crc32": crc}

    def describe(self) -> str:
        return self.name


def as_source(data: Any) -> PairSource:
    """Wrap an indexed object (torch Dataset, list of triples) as a :class:`PairSource`."""
    return data if isinstance(data, PairSource) else IndexedSource(data)
