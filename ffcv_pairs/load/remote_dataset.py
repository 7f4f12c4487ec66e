"""A dataset manifest at a URL (``s3://bucket/train.json``), opened through a node cache.

Opening reads, through fsspec, the manifest, each shard's sidecar, and with ranged reads
the bytes the loader needs before any sample: each shard's header and field table, then
its metadata table (its end computed from them), and for JPEG fields its allocation table
(the sizes; raw fields have their field's size, and their table comes with the shard).
These go into a **skeleton** of each shard under ``<cache_dir>/<name>-<key>/meta/``: a
sparse file of the shard's size holding only those bytes, beside its sidecar (the requests
of each kind are in flight together). The skeletons are opened as a local dataset would be
(:class:`~ffcv_pairs.format.joined.JoinedReader`: header, tables and their block CRCs
checked, the rest of the header's page as the zeros the writer leaves, every entry checked
against the manifest), so the loader knows every pointer without downloading a data page.
The data pages come with the shard, put together in the node's cache from its skeleton and
ranged reads of its samples and allocation table (:class:`~.shard_cache.Assembly`, checked
whole against its digest) when a batch needs it (:mod:`~.shard_cache`), and mapped for as
long as it does (:mod:`~.residency`); the skeletons are never mapped for reading.

The skeletons are built once per node: under a lock, temp file then rename, so ranks that
open the dataset together, or a rerun after a crash, find them whole or build them again.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from ffcv.fields import RGBImageField
from ffcv.reader import get_handlers
from ffcv.types import FieldDescType, HeaderType, get_metadata_type

from ..format.joined import JoinedReader
from ..format.objectstore import StoreError, open_url, read_range, sibling
from ..format.reader import BetonError, PairReader
from ..format.schema import PairSchema
from ..format.shards import DatasetManifest, ShardEntry
from ..format.sidecar import Manifest
from ..format.stats import STATS_SUFFIX
from .cache_plan import parse_bytes
from .shard_cache import Assembly, ShardCache, flocked

__all__ = ["CONCURRENT", "RemoteReader", "open_remote"]

#: Requests in flight at once while a dataset's skeletons are built.
CONCURRENT = 16
_DESC = FieldDescType.itemsize
_MAX_FIELDS = 64


class RemoteReader(JoinedReader):
    """A :class:`~ffcv_pairs.format.joined.JoinedReader` over a remote dataset's
    skeletons, with the node cache that holds its shards.

    Attributes:
        url: The manifest's URL.
        cache: The node's :class:`~.shard_cache.ShardCache` of its shards.
    """

    def __init__(self, manifest: Path, url: str, cache: ShardCache):
        super().__init__(manifest)
        self.url, self.cache = url, cache
        cache.assembly = [self._assembly(r) for r in self.shards]

    def _assembly(self, shard: PairReader) -> Assembly:
        """How shard ``shard``'s download is put together: its header, field table and
        metadata from its skeleton, its data (from the first sample's byte to the last
        one's, or the whole data region for JPEG fields, whose pages end in trailers) and
        its allocation table fetched, zeros between. A skeleton of raw fields holds no
        allocation table: the loader needs none of it (every A and B has its field's
        size), so its rows come with the shard, checked with it."""
        size, alloc = int(shard.file_size), int(shard.header["alloc_table_ptr"])
        names = [*PairSchema.IMAGE_FIELDS, *self.schema.arrays]
        starts = [int(np.min(shard.image_pointers(name))) for name in names]
        if self.schema.compressed:
            return Assembly(shard.path, ((0, shard.metadata_end), (alloc, size)),
                            ((min(starts), alloc),))  # fmt: skip
        nbytes = [int(shard.schema.spec(n).nbytes) if n in PairSchema.IMAGE_FIELDS
                  else int(self.schema.arrays[n].nbytes) for n in names]  # fmt: skip
        end = max(int(np.max(shard.image_pointers(n))) + b for n, b in zip(names, nbytes))
        sizes = np.empty((shard.num_samples, 2), dtype=np.uint64)
        sizes[:] = nbytes[:2]
        shard.stand_in_sizes(sizes)
        return Assembly(shard.path, ((0, shard.metadata_end),), ((min(starts), end), (alloc, size)))


def open_remote(
    url: str, cache_dir: str | os.PathLike[str] | None, cache_limit: int | str | None
) -> RemoteReader:
    """The reader of the dataset manifest at ``url``, its shards cached in ``cache_dir``.

    Raises:
        ValueError: no ``cache_dir``; a ``limit`` below the largest shard; a protocol
            whose package is missing (see :func:`~ffcv_pairs.format.objectstore.open_url`).
        BetonError: the manifest, a sidecar or a shard's tables do not match (named).
    """
    limit = None if cache_limit is None else parse_bytes("cache_limit", cache_limit)
    if cache_dir is None:
        raise ValueError(
            f"{url}: a remote dataset is read through a node-local cache: give cache_dir "
            f"(a local folder with room for cache_limit bytes)"
        )
    fs, path = open_url(url)
    try:
        raw = bytes(fs.cat_file(path))
    except Exception as e:  # each store's client raises its own kinds (botocore's too)
        raise BetonError(f"{url}: cannot read the dataset manifest ({e})") from None
    key = hashlib.sha256(url.encode() + b"\0" + raw).hexdigest()[:16]
    name = posixpath.basename(path)
    root = Path(cache_dir) / f"{Path(name).stem}-{key}"
    meta = root / "meta"
    (root / "locks").mkdir(parents=True, exist_ok=True)
    with flocked(root / "locks" / "meta"):
        local = meta / name
        if not local.exists():
            _put(local, raw)
        manifest = DatasetManifest.load(local)
        try:
            remote = [sibling(path, entry.path) for entry in manifest.shards]
        except ValueError as e:
            raise BetonError(f"{url}: {e}") from None
        _skeletons(
            fs,
            [
                (shard, meta / entry.path, entry)
                for shard, entry in zip(remote, manifest.shards)
                if not (meta / entry.path).exists()
            ],
        )
    cache = ShardCache(root, fs, remote, list(manifest.shards), limit)
    reader = RemoteReader(local, url, cache)
    largest = max(cache.held)
    if limit is not None and limit < largest:
        raise ValueError(
            f"{url}: cache_limit {limit} bytes is below its largest shard, {largest} bytes"
        )
    return reader


def _put(
    path: Path, data: bytes, size: int | None = None, tail: tuple[int, bytes] | None = None
) -> None:
    """Write ``path`` whole or not at all: a temp file (``size`` bytes, sparse, ``data`` at
    0 and ``tail`` at its offset), then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if size is not None:
            os.ftruncate(fd, size)
        os.pwrite(fd, data, 0)
        if tail is not None:
            os.pwrite(fd, tail[1], tail[0])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _skeletons(fs: Any, todo: list[tuple[str, Path, ShardEntry]]) -> None:
    """Each shard's sidecar (and image statistics) and skeleton (``(remote, local,
    entry)``), the requests of each kind in flight together: the sidecars, then each
    shard's header and field table, then its metadata table (with, for JPEG fields, its
    allocation table)."""
    if not todo:
        return
    shards = [shard for shard, _, _ in todo]
    sides = _each(fs, [(f"{s}.json", None, None) for s in shards])
    firsts, stats = [], []
    for (shard, local, entry), side_bytes in zip(todo, sides):
        url = fs.unstrip_protocol(shard)
        if isinstance(side_bytes, Exception):
            raise BetonError(
                f"{url}.json: cannot read the shard's sidecar ({side_bytes}); a remote shard "
                f"is checked against its sidecar's digest, so it needs one"
            )
        _put(Path(f"{local}.json"), side_bytes)
        side = Manifest.load(Path(f"{local}.json"))
        if f"{side.digest_kind}:{side.digest}" != entry.digest or side.file_size != entry.bytes:
            raise BetonError(
                f"{url}.json: sidecar of {side.file_size} bytes, {side.digest_kind}:"
                f"{side.digest[:16]}.., but the manifest lists {entry.bytes} bytes, "
                f"{entry.digest[:28]}..: the shard was replaced or the manifest is stale"
            )
        if side.stats is not None:  # without them the loader goes on as for a local file
            stats.append((f"{shard}{STATS_SUFFIX}", Path(f"{local}{STATS_SUFFIX}")))
        # The header and a field descriptor for each field of the sidecar's schema.
        firsts.append(min(HeaderType.itemsize + _DESC * len(side.schema), entry.bytes))
    for (_, local_stats), got in zip(stats, _each(fs, [(s, None, None) for s, _ in stats])):
        if not isinstance(got, Exception):
            _put(local_stats, got)
    heads = _each(fs, [(s, 0, end) for s, end in zip(shards, firsts)])
    found = [_tables(fs, s, h, e.bytes) for s, h, (_, _, e) in zip(shards, heads, todo)]
    reads: list[tuple[str, int | None, int | None]]
    reads = [(s, len(t.head), t.metadata_end) for s, t in zip(shards, found)]
    reads += [(s, t.alloc, e.bytes if t.jpeg else t.alloc) for s, t, (_, _, e) in zip(
        shards, found, todo)]  # fmt: skip
    got = _each(fs, reads)
    for i, ((shard, local, entry), t) in enumerate(zip(todo, found)):
        rest, alloc = got[i], got[len(todo) + i]
        for part in (rest, alloc):
            if isinstance(part, Exception):
                raise BetonError(f"{fs.unstrip_protocol(shard)}: {part}")
        _put(local, t.head + rest, entry.bytes, (t.alloc, alloc) if alloc else None)


@dataclass(frozen=True)
class _Tables:
    """What a shard's header and field table say: its first bytes (``head``), where its
    metadata table ends and its allocation table starts, and whether a field is JPEG (the
    loader then needs the allocation table, the sizes, when it opens the dataset)."""

    head: bytes
    metadata_end: int
    alloc: int
    jpeg: bool


def _tables(fs: Any, shard: str, head: bytes | Exception, size: int) -> _Tables:
    """Where a shard's tables lie, from its first bytes (the rest of its field table is
    read first if its sidecar's schema listed fewer fields than its header does).

    Raises:
        BetonError: not the header and field table of a `.beton` (naming the URL).
    """
    url = fs.unstrip_protocol(shard)
    if isinstance(head, Exception):
        raise BetonError(f"{url}: {head}")
    if len(head) < HeaderType.itemsize:
        raise BetonError(f"{url}: {len(head)} bytes is too small to be a .beton")
    header = np.frombuffer(head[: HeaderType.itemsize], dtype=HeaderType)[0]
    count, n = int(header["num_fields"]), int(header["num_samples"])
    alloc = int(header["alloc_table_ptr"])
    fields_end = HeaderType.itemsize + _DESC * count
    if not 1 <= count <= _MAX_FIELDS or fields_end > size:
        raise BetonError(f"{url}: corrupt header: {count} fields")
    if len(head) < fields_end:
        head += read_range(fs, shard, len(head), fields_end)
    try:
        descriptors = np.frombuffer(head, FieldDescType, count=count, offset=HeaderType.itemsize)
        handlers = get_handlers(descriptors)
        if any(h is None for h in handlers):
            raise ValueError("a field of a kind this version does not know")
        row = get_metadata_type(handlers).itemsize
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise BetonError(f"{url}: corrupt field table ({type(e).__name__}: {e})") from None
    metadata_end = fields_end + n * row
    if not metadata_end <= alloc <= size:
        raise BetonError(f"{url}: corrupt header: allocation table at byte {alloc}")
    jpeg = any(isinstance(h, RGBImageField) for h in handlers)
    return _Tables(head[:fields_end], metadata_end, alloc, jpeg)


def _each(fs: Any, reads: list[tuple[str, int | None, int | None]]) -> list[Any]:
    """Each ``(path, start, end)`` read (the whole object where ``start`` is None), up to
    :data:`CONCURRENT` at once: its bytes, or the error (a :class:`StoreError` naming it)."""

    def one(read: tuple[str, int | None, int | None]) -> bytes | Exception:
        path, start, end = read
        try:
            if start is None or end is None:
                return bytes(fs.cat_file(path))
            return read_range(fs, path, start, end) if end > start else b""
        except StoreError as e:
            return e
        except Exception as e:  # each store's client raises its own kinds
            return StoreError(f"{fs.unstrip_protocol(path)}: {e}")

    with ThreadPoolExecutor(min(CONCURRENT, max(1, len(reads)))) as pool:
        return list(pool.map(one, reads))
