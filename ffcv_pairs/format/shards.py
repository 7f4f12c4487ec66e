"""A dataset of several `.beton` shards: the dataset manifest, ``<name>.json``.

A dataset manifest is a small JSON file listing shards in order, each with its path
(relative to the manifest's folder), sample count, file size, whole-file digest (the
shard sidecar's), page size and schema fingerprint. The dataset's sample ``g`` is sample
``g - offset[k]`` of shard ``k``, where ``offset`` is the running sum of the counts. One
`.beton` is a dataset of one shard.

The manifest is written by temp file, fsync and rename (:meth:`DatasetManifest.save`),
so a reader sees the old list or the new one, never a mix. Building one from finished
shards, and appending to one, is :mod:`~ffcv_pairs.format.merging`.

A shard written as part ``K`` of ``N`` (``write --part K/N``) says so in its sidecar's
fingerprint (:data:`PART_KEY`): which slice of which source it holds.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .reader import BetonError

__all__ = [
    "DATASET_FORMAT",
    "PART_KEY",
    "DatasetManifest",
    "ShardEntry",
    "is_dataset_manifest",
    "part_slice",
    "schema_fingerprint",
]

DATASET_FORMAT = "ffcv-pairs-dataset/1"
#: The key of a part's record in its sidecar's fingerprint: ``{"index", "count", "first",
#: "stop", "of", "source"}`` (slice ``[first, stop)`` of a source of ``of`` samples whose
#: fingerprint digest is ``source``).
PART_KEY = "part"
_SNIFF_BYTES = 4096
_SIDECAR_PREFIX = "ffcv-pairs-manifest/"
_PART_INTS = ("index", "count", "first", "stop", "of")
_MOST = 2**62  # counts and sizes beyond this are not a real file's (and overflow int64 sums)


def schema_fingerprint(schema: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the schema's canonical JSON."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def part_slice(index: int, count: int, num_samples: int) -> tuple[int, int]:
    """``[first, stop)``: the ``index``-th of ``count`` contiguous, near-equal slices of
    ``num_samples`` samples (the first ``num_samples % count`` slices hold one more).

    Raises:
        ValueError: ``index`` outside ``[0, count)``, or more parts than samples.
    """
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"part {index}/{count}: K must be in [0, N) with N >= 1")
    if count > num_samples:
        raise ValueError(f"part {index}/{count}: {count} parts of {num_samples} samples")
    return index * num_samples // count, (index + 1) * num_samples // count


@dataclass(frozen=True)
class ShardEntry:
    """One shard of a dataset manifest.

    Attributes:
        path: The `.beton`, relative to the manifest's folder (POSIX separators).
        samples: Its sample count.
        bytes: Its file size.
        digest: Its sidecar's whole-file digest, ``"root_sha256:<hex>"`` or ``"sha256:<hex>"``.
        page_size: Its page size.
        schema: :func:`schema_fingerprint` of its schema.
        part: Its part record (see :data:`PART_KEY`), or None.
    """

    path: str
    samples: int
    bytes: int
    digest: str
    page_size: int
    schema: str
    part: dict[str, Any] | None = None


@dataclass(frozen=True)
class DatasetManifest:
    """The shards of a dataset, in order, and their one schema (as JSON)."""

    schema: dict[str, Any]
    shards: tuple[ShardEntry, ...]
    format: str = DATASET_FORMAT

    def __post_init__(self) -> None:
        if not self.shards:
            raise ValueError("a dataset manifest lists at least one shard")
        want = schema_fingerprint(self.schema)
        for entry in self.shards:
            if entry.schema != want:
                raise ValueError(
                    f"shard {entry.path}: schema {entry.schema} differs from the dataset's {want}"
                )

    @property
    def num_samples(self) -> int:
        return sum(e.samples for e in self.shards)

    @property
    def offsets(self) -> np.ndarray:
        """int64 ``(shards + 1,)``: where each shard's samples start, and the total."""
        return np.concatenate([[0], np.cumsum([e.samples for e in self.shards])]).astype(np.int64)

    def to_bytes(self) -> bytes:
        body = {
            "format": self.format,
            "samples": self.num_samples,
            "schema": self.schema,
            "shards": [asdict(e) for e in self.shards],
        }
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()

    @property
    def digest(self) -> str:
        """SHA-256 of the manifest's canonical bytes: what a resume state names."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def listing(self, where: str) -> str:
        """What ``inspect`` prints of the dataset at ``where``: its shards, samples, schema and
        digest, then each shard's path, samples, first global id, bytes (and part)."""
        offsets = self.offsets.tolist()
        lines = [
            f"dataset:      {where} ({self.format})",
            f"shards:       {len(self.shards)}",
            f"samples:      {self.num_samples}",
            f"schema:       {json.dumps(self.schema, sort_keys=True)}",
            f"digest:       sha256 {self.digest[:16]}..",
            "shards (path, samples, first global id, bytes):",
        ]
        width = max(len(e.path) for e in self.shards)
        for i, entry in enumerate(self.shards):
            part = entry.part and f"  part {entry.part['index']}/{entry.part['count']}"
            lines.append(
                f"  {i:>4}  {entry.path:<{width}}  {entry.samples:>10}  {offsets[i]:>10}  "
                f"{entry.bytes:>12}{part or ''}"
            )
        return "\n".join(lines)

    def paths(self, manifest: str | os.PathLike[str]) -> list[Path]:
        """Each shard's path, resolved against the folder of the file at ``manifest``."""
        root = Path(manifest).parent
        return [root / e.path for e in self.shards]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write to ``path`` atomically: a temp file beside it, fsync, rename, fsync the
        folder. A reader sees the old manifest or this one."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        data = self.to_bytes()
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DatasetManifest:
        """Read a dataset manifest.

        Raises:
            BetonError: naming ``path`` and what is wrong (not JSON, another format, a
                field missing or of the wrong type, a sample total that does not add up).
        """
        try:
            raw = json.loads(Path(path).read_text())
            if not isinstance(raw, dict) or raw.get("format") != DATASET_FORMAT:
                got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
                if isinstance(got, str) and got.startswith(_SIDECAR_PREFIX):
                    raise ValueError(f"format {got!r}: a .beton's sidecar; give the .beton")
                raise ValueError(f"format {got!r}, expected {DATASET_FORMAT!r}")
            shards = tuple(_entry(e) for e in raw["shards"])
            listed = [os.path.normpath(e.path) for e in shards]
            if len(set(listed)) < len(listed):  # its samples would be read twice an epoch
                twice = next(p for k, p in enumerate(listed) if p in listed[:k])
                raise ValueError(f"shard {twice!r} is listed twice")
            manifest = cls(dict(raw["schema"]), shards, raw["format"])
            if raw.get("samples") != manifest.num_samples:
                raise ValueError(
                    f"says {raw.get('samples')} samples, its shards hold {manifest.num_samples}"
                )
            if manifest.num_samples > _MOST:
                raise ValueError(f"{manifest.num_samples} samples, more than {_MOST}")
            return manifest
        except (OSError, KeyError, TypeError, ValueError) as e:
            what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            raise BetonError(f"{path}: not a readable dataset manifest ({what})") from None


def _entry(raw: Any) -> ShardEntry:
    if not isinstance(raw, dict):
        raise TypeError(f"a shard is a JSON object, got {type(raw).__name__}")
    entry = ShardEntry(**raw)
    for name in ("samples", "bytes", "page_size"):
        value = getattr(entry, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MOST:
            raise ValueError(
                f"shard {entry.path!r}: {name} must be an integer in [1, {_MOST}], got {value!r}"
            )
    if not isinstance(entry.path, str) or not entry.path or Path(entry.path).is_absolute():
        raise ValueError(f"shard path must be relative to the manifest, got {entry.path!r}")
    part = entry.part
    if part is not None and not (
        isinstance(part, dict)
        and all(isinstance(part.get(k), int) and not isinstance(part[k], bool) for k in _PART_INTS)
    ):
        raise ValueError(
            f"shard {entry.path!r}: part must be null or an object with integers "
            f"{', '.join(_PART_INTS)}, got {json.dumps(part)}"
        )
    return entry


def is_dataset_manifest(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is read as a dataset manifest: a ``.json`` file of JSON text (one
    that is not a manifest is then refused as one, by :meth:`DatasetManifest.load`, not
    misread as a `.beton`, whose first bytes are binary)."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    with open(p, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    return head.lstrip()[:1] in (b"{", b"[")
