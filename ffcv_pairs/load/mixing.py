"""Weighted mixing of datasets: each epoch's sample list, resolved before it is dealt out.

``make_loader([("real.json", 0.7), ("synthetic.json", 0.3)], epoch_size=100_000)`` reads
the datasets as one id space (:class:`~ffcv_pairs.format.joined.JoinedReader`: dataset
``k``'s samples are ids ``offsets[k] .. offsets[k+1]``) and, every epoch, takes from each
the number of samples its :class:`Stream` asks for, as Mosaic Streaming's ``Stream`` does:

* ``proportion``: a share of ``epoch_size`` (default: the datasets' total), apportioned
  by largest remainders so the counts add up to ``epoch_size`` exactly;
* ``repeat``: that many times the dataset's size (``1.5``: every sample once, half twice);
* ``choose``: that many samples.

Either every stream gives a ``proportion`` or none does (then ``repeat=1`` is the default).
A count of ``c`` from a dataset of ``n`` samples is ``c // n`` copies of every sample plus
``c % n`` distinct samples drawn afresh each epoch: the first of a keyed permutation of the
dataset (:func:`~ffcv_pairs.kernels.permute.permute`, keyed by ``(seed, epoch, stream)``).

The epoch's list is a pure function of ``(seed, epoch)`` and the streams, the same on every
rank, so the order deals it out as it deals one file's samples: every rank gets the same
number of batches, and an elastic resume works on the list's positions (each position is
one entry of the list, so a sample taken twice is two positions). A sample taken twice in
one epoch gets the same augmentation both times (its key is its id and the epoch).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format.joined import DatasetReader, JoinedReader, open_dataset
from ..format.objectstore import is_url
from ..format.schema import PairSchema
from ..kernels.hashing import key3
from ..kernels.permute import permute
from .index import PageIndex
from .node_order import rank_samples
from .order import OrderSpec
from .remote_dataset import RemoteReader, open_remote

if TYPE_CHECKING:
    from .options import LoaderConfig

__all__ = [
    "EpochSamples",
    "Mixture",
    "Stream",
    "absolute_source",
    "as_streams",
    "open_streams",
]

_TAG = 0x4D4958  # "MIX": keeps these keys apart from the order's
_MASK64 = (1 << 64) - 1
_MOST_PER_EPOCH = 1 << 40  # samples a stream may take an epoch (the list is built in memory)


@dataclass(frozen=True)
class Stream:
    """One dataset of a mixture and how much of it an epoch takes (see the module docstring).

    Args:
        path: A `.beton` or a dataset manifest.
        proportion: Its share of the epoch (relative to the other streams' proportions).
        repeat: Times its size per epoch (a float: ``0.5`` takes half, ``2`` every sample twice).
        choose: Samples per epoch.
    """

    path: str | os.PathLike[str]
    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str | os.PathLike):
            raise TypeError(f"stream path must be a file path, got {_shown(self.path)}")
        given = [n for n in ("proportion", "repeat", "choose") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(
                f"stream {self.path}: give one of proportion, repeat or choose, got {given}"
            )
        for name in ("proportion", "repeat"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, numbers.Real)
                and not isinstance(value, bool | np.bool_)
                and 0 < float(value) < math.inf
            ):
                raise ValueError(
                    f"stream {self.path}: {name} must be a positive finite number, "
                    f"got {_shown(value)}"
                )
        choose = self.choose
        if choose is not None and (
            isinstance(choose, bool | np.bool_)
            or not isinstance(choose, numbers.Integral)
            or choose < 1
        ):
            raise ValueError(
                f"stream {self.path}: choose must be a positive integer, got {_shown(choose)}"
            )


def _shown(value: Any) -> str:
    """``value`` for a message: a numpy scalar as the Python number it holds."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def as_streams(value: Any) -> list[Stream]:
    """``value`` as streams: a list of :class:`Stream`, paths (each read whole every
    epoch), ``(path, proportion)`` pairs or dicts with Stream's keys (a YAML list).

    Raises:
        TypeError: naming the entry that is none of those.
    """
    streams = []
    for i, item in enumerate(value):
        if isinstance(item, Stream):
            streams.append(item)
        elif isinstance(item, str | os.PathLike):  # the whole dataset, once an epoch
            streams.append(Stream(item))
        elif isinstance(item, dict):
            try:
                streams.append(Stream(**item))
            except TypeError as e:
                raise TypeError(f"streams[{i}]: {e}") from None
        elif isinstance(item, tuple | list) and len(item) == 2:
            streams.append(Stream(item[0], proportion=item[1]))
        else:
            raise TypeError(
                f"streams[{i}] must be a Stream, a (path, proportion) pair or a dict with "
                f"path and proportion/repeat/choose, got {item!r}"
            )
    if not streams:
        raise ValueError("a mixture needs at least one stream")
    seen: dict[str, int] = {}
    for i, stream in enumerate(streams):
        real = os.path.realpath(stream.path)
        if real in seen:  # its samples would be taken twice, under two streams' counts
            raise ValueError(
                f"streams[{i}]: {stream.path} is also streams[{seen[real]}]; give a dataset "
                f"once, with a larger proportion, repeat or choose"
            )
        seen[real] = i
    return streams


def _apportion(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``weights`` that add up to ``total`` (largest
    remainders; ties to the earlier stream)."""
    exact = weights / weights.sum() * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


class Mixture:
    """Each epoch's sample list of ``streams`` over datasets of ``sizes`` samples, whose ids
    start at ``offsets`` (see the module docstring).

    Raises:
        ValueError: proportions on some streams but not all, ``epoch_size`` without
            proportions, an ``epoch_size`` below 1, or an epoch of no samples.
    """

    def __init__(self, streams: Sequence[Stream], sizes: Sequence[int], epoch_size: int | None):
        self.streams = list(streams)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        with_proportion = [s.proportion is not None for s in self.streams]
        if any(with_proportion) and not all(with_proportion):
            bare = self.streams[with_proportion.index(False)].path
            raise ValueError(
                f"stream {bare} has no proportion but others do: give every stream a "
                f"proportion, or none (then repeat or choose)"
            )
        if epoch_size is not None and epoch_size > _MOST_PER_EPOCH:
            raise ValueError(f"epoch_size={epoch_size} is more than 2**40 samples an epoch")
        if epoch_size is not None and (isinstance(epoch_size, bool) or epoch_size < 1):
            raise ValueError(f"epoch_size must be a positive integer, got {epoch_size!r}")
        if all(with_proportion):
            total = int(self.sizes.sum()) if epoch_size is None else int(epoch_size)
            weights = np.asarray([s.proportion for s in self.streams], dtype=np.float64)
            self.counts = _apportion(weights, total)
        else:
            if epoch_size is not None:
                raise ValueError(
                    f"epoch_size={epoch_size} goes with proportions; with repeat or choose each "
                    f"stream says its own count"
                )
            counts = [
                s.choose if s.choose is not None else round((s.repeat or 1.0) * n)
                for s, n in zip(self.streams, self.sizes.tolist())
            ]
            for stream, count in zip(self.streams, counts):
                if count > _MOST_PER_EPOCH:
                    raise ValueError(
                        f"stream {stream.path}: takes {count:.3g} samples an epoch, more than "
                        f"2**40; a repeat or choose that large is not a real epoch"
                    )
            self.counts = np.asarray(counts, dtype=np.int64)
        self.epoch_size = int(self.counts.sum())
        if self.epoch_size < 1:
            raise ValueError(
                f"the streams take no samples per epoch (counts {self.counts.tolist()})"
            )

    def epoch_samples(self, seed: int, epoch: int) -> np.ndarray:
        """int64: epoch ``epoch``'s samples, ascending (a sample taken twice appears twice)."""
        parts = []
        for k, (count, size) in enumerate(zip(self.counts.tolist(), self.sizes.tolist())):
            whole, rest = divmod(count, size)
            base = int(self.offsets[k])
            parts.append(np.repeat(np.arange(base, base + size, dtype=np.int64), whole))
            if rest:
                key = np.uint64(
                    key3(np.uint64(seed & _MASK64), np.uint64(epoch), np.uint64(_TAG + k))
                )
                drawn = np.empty(rest, dtype=np.int64)
                permute(key, size, np.arange(rest, dtype=np.int64), drawn)
                parts.append(drawn + base)
        return np.sort(np.concatenate(parts), kind="stable")

    def identity(self) -> str:
        """The streams' counts, for a resume state (the datasets are named by the reader)."""
        return "mix:" + ",".join(
            f"{c}/{n}" for c, n in zip(self.counts.tolist(), self.sizes.tolist())
        )


class EpochSamples:
    """What each epoch's order runs over: the loader's fixed :class:`PageIndex`, or a
    mixture's epoch, indexed by position (each entry of the epoch's list once), and the
    sample ids those positions stand for."""

    def __init__(self, index: PageIndex, reader: DatasetReader, mixture: Mixture | None, seed: int):
        self.fixed, self.reader, self.mixture, self.seed = index, reader, mixture, seed
        self._epoch: tuple[int, np.ndarray, PageIndex] | None = None

    def per_rank(self, spec: OrderSpec) -> int:
        """Samples each rank reads in an epoch (the same every epoch)."""
        if spec.partition == "node":  # one dataset: its fixed index
            return rank_samples(self.fixed, spec)
        return spec.num_samples(self.num_samples)

    def identity(self) -> str | None:
        """What a resume state names of the mixture (None: no mixture)."""
        return None if self.mixture is None else self.mixture.identity()

    @property
    def num_samples(self) -> int:
        """Samples per epoch (before the ranks' shares)."""
        return self.fixed.num_samples if self.mixture is None else self.mixture.epoch_size

    def _resolved(self, epoch: int) -> tuple[np.ndarray, PageIndex]:
        assert self.mixture is not None
        if self._epoch is None or self._epoch[0] != epoch:
            ids = self.mixture.epoch_samples(self.seed, epoch)
            ptrs = np.asarray(self.reader.image_pointers(PairSchema.IMAGE_FIELDS[0]))[ids]
            positions = np.arange(len(ids), dtype=np.int64)
            self._epoch = (
                epoch,
                ids,
                PageIndex.of_pointers(positions, ptrs, self.reader.page_shift),
            )
        return self._epoch[1], self._epoch[2]

    def index(self, epoch: int) -> PageIndex:
        """The index epoch ``epoch``'s order deals out."""
        return self.fixed if self.mixture is None else self._resolved(epoch)[1]

    def ids(self, epoch: int, entries: np.ndarray) -> np.ndarray:
        """The sample ids of ``entries`` of :meth:`index` (epoch ``epoch``'s)."""
        return entries if self.mixture is None else self._resolved(epoch)[0][entries]


def open_streams(
    path: Any, config: LoaderConfig
) -> tuple[DatasetReader, list[Stream] | None, Mixture | None]:
    """The reader of ``path`` (a `.beton`, a manifest, a manifest's URL, or a list of
    streams), its streams and their :class:`Mixture` (None for one dataset).

    Raises:
        ValueError: ``epoch_size`` without streams, or ``indices`` with them; a URL
            without ``cache_dir``, or in a mixture.
    """
    epoch_size, indices, verify = config.epoch_size, config.indices, config.verify
    if isinstance(path, str | os.PathLike):
        if epoch_size is not None:
            raise ValueError(
                f"epoch_size={epoch_size} goes with a mixture: give path as a list of streams, "
                f"e.g. [('real.json', 0.7), ('synthetic.json', 0.3)]"
            )
        if is_url(path):  # every download is checked whole, with or without verify
            return open_remote(str(path), config.cache_dir, config.cache_limit), None, None
        return open_dataset(path, full_check=verify), None, None
    streams = as_streams(path)  # a Stream keeps its path as given: a URL stays one
    url = next((s.path for s in streams if is_url(s.path)), None)
    if url is not None:
        raise ValueError(
            f"{url}: a mixture reads local datasets; a URL is read alone, as path (or copy "
            f"the datasets to local disk and mix them there)"
        )
    if indices is not None:
        raise ValueError(
            "indices selects samples of one dataset; a mixture's streams choose theirs "
            "(proportion, repeat or choose)"
        )
    reader = JoinedReader([s.path for s in streams], full_check=verify)
    return reader, streams, Mixture(streams, np.diff(reader.dataset_offsets).tolist(), epoch_size)


def absolute_source(reader: DatasetReader, streams: list[Stream] | None) -> Any:
    """What a loader reads, with absolute paths (for a pickled copy in another directory):
    its file or manifest (a remote one's URL), or its streams."""
    path = reader.path
    if isinstance(reader, RemoteReader):
        return reader.url
    if streams is None:
        return path.absolute()
    return [replace(s, path=Path(s.path).absolute()) for s in streams]
