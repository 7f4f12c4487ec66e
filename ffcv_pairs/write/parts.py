"""One of ``N`` contiguous slices of a source, written as its own shard (``write --part K/N``).

Each machine of a cluster converts its own part; ``ffcv-pairs merge`` then lists the
parts in a dataset manifest (:func:`~ffcv_pairs.format.merging.merge_parts`). A part's
sidecar fingerprint holds its record (:data:`~ffcv_pairs.format.shards.PART_KEY`): which
slice of which source it is, so that the merge can check that the parts tile one source.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format.integrity import split_of
from ..format.shards import part_slice
from .sources import PairSource

if TYPE_CHECKING:
    from ..format.schema import ArraySpec

__all__ = [
    "SliceSource",
    "check_part",
    "part_file_name",
    "source_digest",
    "split_of_shard",
    "take_part",
]

_PART_TEXT = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
_PART_NAME = re.compile(r"(.+)\.part-\d{5,}-of-\d{5,}\.beton")


def check_part(name: str, value: Any) -> tuple[int, int] | None:
    """None, or ``(K, N)`` with ``0 <= K < N`` from ``(K, N)`` integers or a ``"K/N"`` string.

    Raises:
        ValueError: naming ``name`` and the value given.
    """
    if value is None:
        return None
    allowed = "K/N with 0 <= K < N (part K of N, counted from 0)"
    if isinstance(value, str):
        found = _PART_TEXT.fullmatch(value)
        if found is None:
            raise ValueError(f"{name} must be {allowed}, got {value!r}")
        k, n = int(found.group(1)), int(found.group(2))
    elif (
        isinstance(value, Sequence)
        and len(value) == 2
        and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value)
    ):
        k, n = int(value[0]), int(value[1])
    else:
        raise ValueError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    if n < 1 or not 0 <= k < n:
        raise ValueError(f"{name} must be {allowed}, got {k}/{n}")
    return k, n


def part_file_name(split: str, part: tuple[int, int]) -> str:
    """``train``, ``(3, 16)`` -> ``train.part-00003-of-00016.beton``."""
    return f"{split}.part-{part[0]:05d}-of-{part[1]:05d}.beton"


def split_of_shard(path: str | os.PathLike[str]) -> str:
    """The split a file was written from: ``out/train.part-00003-of-00016.beton`` and
    ``out/train.beton`` -> ``train``."""
    found = _PART_NAME.fullmatch(Path(path).name)
    return found.group(1) if found is not None else split_of(path)


def source_digest(fingerprint: dict[str, Any]) -> str:
    """SHA-256 (hex) of a whole source's fingerprint, as JSON with sorted keys."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()


class SliceSource(PairSource):
    """Samples ``first .. stop - 1`` of ``source``, as samples ``0 .. stop - first - 1``.

    Errors name the inner source's file and index (:meth:`where`); the fingerprint is the
    whole source's plus the slice, so ``count`` stays the whole source's length.
    """

    def __init__(self, source: PairSource, first: int, stop: int):
        if not 0 <= first < stop <= len(source):
            raise ValueError(
                f"slice [{first}, {stop}) of {source.describe()} must be non-empty and within "
                f"its {len(source)} samples"
            )
        self.source, self.first, self.stop = source, first, stop

    def __len__(self) -> int:
        return self.stop - self.first

    def read(self, i: int) -> tuple[Any, Any, Any]:
        return self.source.read(self.first + i)

    def where(self, i: int, part: str) -> str:
        return self.source.where(self.first + i, part)

    def describe(self) -> str:
        return f"{self.source.describe()}[{self.first}:{self.stop}]"

    def read_arrays(self, start: int, stop: int) -> tuple[np.ndarray, ...] | None:
        return self.source.read_arrays(self.first + start, self.first + stop)

    def read_block(
        self, ids: Sequence[int], images: tuple[np.ndarray, np.ndarray], specs: Sequence[ArraySpec]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        return self.source.read_block([self.first + i for i in ids], images, specs)

    def fingerprint(self) -> dict[str, Any]:
        return self.source.fingerprint() | {"slice": [self.first, self.stop]}

    def read_stats(self) -> tuple[int, int]:
        return self.source.read_stats()

    def release(self) -> None:
        """Drop what the inner source caches (a batch file), before workers fork."""
        release = getattr(self.source, "release", None)
        if release is not None:
            release()


def take_part(
    source: PairSource, part: tuple[int, int], num_samples: int
) -> tuple[SliceSource, dict[str, Any]]:
    """Part ``part`` of the first ``num_samples`` samples of ``source`` (after ``limit``),
    and the part's record for the sidecar's fingerprint: ``{"index", "count", "first",
    "stop", "of", "source"}``.

    Raises:
        ValueError: more parts than samples.
    """
    k, n = part
    first, stop = part_slice(k, n, num_samples)
    record = {
        "index": k,
        "count": n,
        "first": first,
        "stop": stop,
        "of": num_samples,
        "source": source_digest(source.fingerprint()),
    }
    return SliceSource(source, first, stop), record
