"""A dataset of several `.beton` shards: the dataset manifest, ``<name>.json``.

A dataset manifest is a small JSON file listing shards in order, each with its path
(relative to the manifest's folder), sample count, file size, whole-file digest (the
shard sidecar's), page size and schema fingerprint. The dataset's sample ``g`` is sample
``g - offset[k]`` of shard ``k``, where ``offset`` is the running sum of the counts. One
`.beton` is a dataset of one shard.

The manifest is written by temp file, fsync and rename (:meth:`DatasetManifest.save`),
so a reader sees the old list or the new one, never a mix; :func:`add_shards` rereads
and rewrites it under a lock file, so two appenders never drop each other's shards.
The existing shards are never touched.

A shard written as part ``K`` of ``N`` (``write --part K/N``) says so in its sidecar's
fingerprint (:data:`PART_KEY`): which slice of which source it holds. :func:`merge_parts`
builds a manifest from the parts given (the runs that reported success), and refuses a
missing or duplicated part, one still being written, or slices that do not tile the
source; it never lists a directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .reader import BetonError, PairReader, require_file
from .sidecar import Manifest, sidecar_to_read

__all__ = [
    "DATASET_FORMAT",
    "PART_KEY",
    "DatasetManifest",
    "ShardEntry",
    "add_shards",
    "is_dataset_manifest",
    "merge_parts",
    "part_slice",
    "schema_fingerprint",
    "shard_entry",
]

DATASET_FORMAT = "ffcv-pairs-dataset/1"
#: The key of a part's record in its sidecar's fingerprint: ``{"index", "count", "first",
#: "stop", "of", "source"}`` (slice ``[first, stop)`` of a source of ``of`` samples whose
#: fingerprint digest is ``source``).
PART_KEY = "part"
_SNIFF_BYTES = 4096


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
                raise ValueError(f"format {got!r}, expected {DATASET_FORMAT!r}")
            shards = tuple(_entry(e) for e in raw["shards"])
            manifest = cls(dict(raw["schema"]), shards, raw["format"])
            if raw.get("samples") != manifest.num_samples:
                raise ValueError(
                    f"says {raw.get('samples')} samples, its shards hold {manifest.num_samples}"
                )
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
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"shard {entry.path!r}: {name} must be a positive integer, got {value!r}"
            )
    if not isinstance(entry.path, str) or not entry.path or Path(entry.path).is_absolute():
        raise ValueError(f"shard path must be relative to the manifest, got {entry.path!r}")
    return entry


def is_dataset_manifest(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file that starts as a dataset manifest does (reads 4 KiB)."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    with open(p, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    return f'"format": "{DATASET_FORMAT}"'.encode() in head or DATASET_FORMAT.encode() in head


def _sidecar(beton: Path) -> Manifest:
    side = sidecar_to_read(beton)
    if not side.exists():
        raise BetonError(
            f"{beton}: no sidecar {side.name}; a shard needs the checksums its writer leaves"
        )
    try:
        return Manifest.load(side)
    except ValueError as e:
        raise BetonError(str(e)) from None


def shard_entry(beton: str | os.PathLike[str], root: str | os.PathLike[str]) -> ShardEntry:
    """The entry of a finished `.beton` for a manifest in folder ``root``: read from its
    header and its sidecar, which must agree.

    Raises:
        BetonError: naming the file: not a finished `.beton`, still being written (its
            ``.partial`` or ``.journal`` is beside it), no sidecar, or one that disagrees.
    """
    path = Path(beton)
    if path.name.endswith((".partial", ".journal")):
        raise BetonError(f"{path}: a half-written file; only finished .beton files are shards")
    for suffix in (".partial", ".journal"):
        if path.with_name(path.name + suffix).exists():
            raise BetonError(
                f"{path}: {path.name}{suffix} is beside it: a write to it is still running or "
                f"was interrupted (finish it with --resume first)"
            )
    require_file(path)
    side = _sidecar(path)
    reader = PairReader(path)
    size = path.stat().st_size
    if (side.file_size, side.num_samples) != (size, reader.num_samples):
        raise BetonError(
            f"{path}: its sidecar says {side.num_samples} samples in {side.file_size} bytes, the "
            f"file holds {reader.num_samples} in {size}: a stale sidecar"
        )
    part = (side.fingerprint or {}).get(PART_KEY)
    return ShardEntry(
        path=Path(os.path.relpath(path, root)).as_posix(),
        samples=reader.num_samples,
        bytes=size,
        digest=f"{side.digest_kind}:{side.digest}",
        page_size=int(reader.page_size),
        schema=schema_fingerprint(reader.schema.to_json()),
        part=part,
    )


def _same_schema(entries: Sequence[tuple[Path, ShardEntry, dict[str, Any]]]) -> dict[str, Any]:
    first_path, first, schema = entries[0]
    for path, entry, other in entries[1:]:
        if entry.schema != first.schema:
            raise BetonError(
                f"{path} and {first_path} hold different schemas ({json.dumps(other)} and "
                f"{json.dumps(schema)}); one dataset has one schema"
            )
    return schema


def _described(betons: Sequence[str | os.PathLike[str]], root: Path) -> list[Any]:
    out: list[Any] = []
    seen: dict[str, Any] = {}
    for beton in betons:
        real = os.path.realpath(beton)
        if real in seen:
            raise BetonError(f"{beton}: given twice (also as {seen[real]})")
        seen[real] = beton
        out.append((Path(beton), shard_entry(beton, root), PairReader(beton).schema.to_json()))
    return out


def merge_parts(
    betons: Sequence[str | os.PathLike[str]], manifest: str | os.PathLike[str]
) -> DatasetManifest:
    """The dataset manifest of ``betons`` for a file at ``manifest`` (not written here).

    Shards written by ``write --part K/N`` are put in part order and must be exactly parts
    ``0 .. N-1`` of one source, tiling it; other shards keep the order given.

    Raises:
        BetonError: naming the file: no files, a file given twice, a half-written one, a
            schema that differs, a mix of parts and whole files, a part missing, a part
            twice, parts of different sources or counts, or slices that do not tile.
    """
    if not betons:
        raise BetonError(f"{manifest}: no shards given")
    root = Path(manifest).parent
    entries = _described(betons, root)
    schema = _same_schema(entries)
    parts = [e.part for _, e, _ in entries]
    if any(p is not None for p in parts):
        entries = _check_parts(entries)
    return DatasetManifest(schema, tuple(e for _, e, _ in entries))


def _check_parts(entries: list[Any]) -> list[Any]:
    whole = [str(path) for path, e, _ in entries if e.part is None]
    if whole:
        raise BetonError(f"{whole[0]}: not written with --part, but the others were")
    first_path, first, _ = entries[0]
    count, source, total = first.part["count"], first.part["source"], first.part["of"]
    by_index: dict[int, Path] = {}
    for path, e, _ in entries:
        p = e.part
        if (p["count"], p["source"], p["of"]) != (count, source, total):
            raise BetonError(
                f"{path}: part {p['index']}/{p['count']} of a source of {p['of']} samples "
                f"({p['source'][:12]}), but {first_path} is part {first.part['index']}/{count} "
                f"of {total} ({source[:12]}): parts of different conversions"
            )
        if p["index"] in by_index:
            also = by_index[p["index"]]
            raise BetonError(f"{path}: part {p['index']}/{count} again (also {also})")
        if (p["first"], p["stop"]) != part_slice(p["index"], count, total):
            raise BetonError(
                f"{path}: part {p['index']}/{count} holds samples [{p['first']}, {p['stop']}), "
                f"expected {list(part_slice(p['index'], count, total))}: slices overlap or "
                f"leave gaps"
            )
        by_index[p["index"]] = path
    missing = [k for k in range(count) if k not in by_index]
    if missing:
        k = missing[0]
        lo, hi = part_slice(k, count, total)
        raise BetonError(
            f"part {k}/{count} (samples [{lo}, {hi})) of the source of {first_path} is missing"
            f"{f', and {len(missing) - 1} more' if len(missing) > 1 else ''}: a manifest is built "
            f"from every part of the source (rerun part {k} with --part {k}/{count})"
        )
    return sorted(entries, key=lambda item: item[1].part["index"])


@contextlib.contextmanager
def _locked(manifest: Path) -> Iterator[None]:
    lock = manifest.with_name(f".{manifest.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def add_shards(
    manifest: str | os.PathLike[str], betons: Sequence[str | os.PathLike[str]]
) -> DatasetManifest:
    """Append finished ``betons`` to the dataset manifest at ``manifest`` (created when it
    does not exist yet) and rewrite it atomically, under a lock. Existing shards are not
    touched; a loader that opened the old manifest keeps reading the old dataset.

    Raises:
        BetonError: naming the file: one of :func:`merge_parts`' refusals, a shard already
            listed, or a schema that differs from the dataset's.
    """
    path = Path(manifest)
    with _locked(path):
        old = DatasetManifest.load(path) if path.exists() else None
        new = merge_parts(betons, path)
        if old is None:
            new.save(path)
            return new
        listed = {os.path.realpath(p) for p in old.paths(path)}
        for beton in betons:
            if os.path.realpath(beton) in listed:
                raise BetonError(f"{beton}: already a shard of {path}")
        if schema_fingerprint(old.schema) != schema_fingerprint(new.schema):
            raise BetonError(
                f"{betons[0]}: schema {json.dumps(new.schema)} differs from {path}'s "
                f"{json.dumps(old.schema)}; one dataset has one schema"
            )
        both = DatasetManifest(old.schema, old.shards + new.shards)
        both.save(path)
        return both
