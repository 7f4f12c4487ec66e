"""Building a dataset manifest from finished `.beton` shards, and appending to one.

:func:`merge_parts` builds a manifest from the shards given (for ``write --part K/N``, the
runs that reported success) and refuses a missing or duplicated part, one still being
written, or slices that do not tile the source; it never lists a directory.
:func:`add_shards` rereads and rewrites a manifest under a lock file, so two appenders never
drop each other's shards. The existing shards are never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .reader import BetonError, PairReader, require_file
from .shards import (
    PART_KEY,
    DatasetManifest,
    ShardEntry,
    is_dataset_manifest,
    part_slice,
    schema_fingerprint,
)
from .sidecar import Manifest, sidecar_to_read

__all__ = ["add_shards", "merge_parts", "shard_entry"]


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
    return _shard(beton, root)[0]


def _shard(
    beton: str | os.PathLike[str], root: str | os.PathLike[str]
) -> tuple[ShardEntry, dict[str, Any]]:
    """:func:`shard_entry` and the file's schema (JSON), from one open of the file."""
    path = Path(beton)
    if is_dataset_manifest(path):
        raise BetonError(f"{path}: a dataset manifest, not a .beton: give its shards' .beton files")
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
    schema = reader.schema.to_json()
    entry = ShardEntry(
        path=Path(os.path.relpath(path, root)).as_posix(),
        samples=reader.num_samples,
        bytes=size,
        digest=f"{side.digest_kind}:{side.digest}",
        page_size=int(reader.page_size),
        schema=schema_fingerprint(schema),
        part=part,
    )
    return entry, schema


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
        out.append((Path(beton), *_shard(beton, root)))
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
