"""``inspect`` and ``verify`` of a dataset manifest at a URL (``s3://bucket/train.json``),
through fsspec, without a cache.

* ``inspect URL`` reads the manifest and each shard's header (one ranged read of 24 bytes a
  shard, in flight together): the dataset's summary as for a local manifest, each shard's
  header checked against its entry (samples, page size, where its allocation table lies).
* ``verify URL`` streams every shard a page at a time (memory: one page, whatever the
  shard's size): each page's CRC against the shard's sidecar, then the whole-file digest
  against the sidecar and the manifest entry, and the image statistics file against its
  SHA-256. Exit 0 when all match, 1 at the first mismatch (named by URL and block).

Usage::

    ffcv-pairs inspect s3://bucket/pairs/train.json
    ffcv-pairs verify s3://bucket/pairs/train.json
"""

from __future__ import annotations

import hashlib
import posixpath
import tempfile
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from ffcv.types import HeaderType

from .format.objectstore import open_url, read_range, sibling
from .format.reader import BetonError
from .format.shards import DatasetManifest, ShardEntry
from .format.sidecar import Manifest
from .format.stats import STATS_SUFFIX

__all__ = ["inspect_remote", "verify_remote"]

_IN_FLIGHT = 16


def _loaded(raw: bytes, url: str, load: Callable[[Path], Any]) -> Any:
    """``load`` of ``raw`` (a JSON file's bytes), its errors naming ``url``."""
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / posixpath.basename(url)
        local.write_bytes(raw)
        try:
            return load(local)
        except (BetonError, ValueError) as e:
            raise type(e)(str(e).replace(str(local), url)) from None


def _manifest(url: str) -> tuple[Any, list[str], DatasetManifest]:
    """The file system, each shard's path in it, and the manifest at ``url``.

    Raises:
        BetonError: the manifest cannot be read or is not one (naming the URL).
    """
    fs, path = open_url(url)
    try:
        raw = bytes(fs.cat_file(path))
    except Exception as e:  # each store's client raises its own kinds (botocore's too)
        raise BetonError(f"{url}: cannot read the dataset manifest ({e})") from None
    dataset = _loaded(raw, url, DatasetManifest.load)
    try:
        shards = [sibling(path, e.path) for e in dataset.shards]
    except ValueError as e:
        raise BetonError(f"{url}: {e}") from None
    return fs, shards, dataset


def _header_problem(fs: Any, shard: str, entry: ShardEntry) -> str | None:
    """How shard ``shard``'s header differs from its entry; None when it does not."""
    try:
        head = read_range(fs, shard, 0, HeaderType.itemsize)
    except OSError as e:
        return str(e)
    header = np.frombuffer(head, dtype=HeaderType)[0]
    alloc = int(header["alloc_table_ptr"])
    found = {"samples": int(header["num_samples"]), "page size": int(header["page_size"])}
    for what, want in (("samples", entry.samples), ("page size", entry.page_size)):
        if found[what] != want:
            where = fs.unstrip_protocol(shard)
            return f"{where}: header says {what} {found[what]}, the manifest {want}"
    if not 0 < alloc <= entry.bytes:
        return f"{fs.unstrip_protocol(shard)}: corrupt header: allocation table at byte {alloc}"
    return None


def inspect_remote(url: str, preview: int | None) -> int:
    """``inspect URL``: the manifest's summary and each shard's header against its entry.
    0 when every header agrees, 1 at the first that does not (named)."""
    if preview is not None:
        raise ValueError(
            f"--preview draws pairs from a local .beton; {url} is remote: read it with "
            f"make_loader(url, cache_dir=...) or copy a shard down to preview it"
        )
    fs, shards, dataset = _manifest(url)
    with ThreadPoolExecutor(min(_IN_FLIGHT, len(shards))) as pool:
        problems = list(pool.map(lambda s: _header_problem(fs, *s), zip(shards, dataset.shards)))
    print(dataset.listing(url))
    bad = next((p for p in problems if p is not None), None)
    if bad is not None:
        print(f"FAIL: {bad}")
        return 1
    print(f"headers: OK ({len(shards)} shards agree with their entries)")
    return 0


def _verify_shard(fs: Any, shard: str, entry: ShardEntry) -> str | None:
    """Shard ``shard`` against its sidecar and entry, a page at a time; None when all
    match, else the first mismatch in words."""
    where = fs.unstrip_protocol(shard)
    try:
        side = _loaded(bytes(fs.cat_file(f"{shard}.json")), f"{where}.json", Manifest.load)
    except Exception as e:  # each store's client raises its own kinds
        return f"{where}.json: cannot read the shard's sidecar ({e})"
    if f"{side.digest_kind}:{side.digest}" != entry.digest or side.file_size != entry.bytes:
        return f"{where}.json: its digest or size differs from the manifest's entry"
    crcs, block = side.crcs(), int(side.page_size)
    whole, tops, size = hashlib.sha256(), hashlib.sha256(), 0
    try:
        with fs.open(shard, "rb", block_size=block) as f:
            while chunk := f.read(block):
                b = size // block
                if b >= len(crcs) or zlib.crc32(chunk) != crcs[b]:
                    span = f"bytes {size}-{size + len(chunk)}"
                    return f"{where}: checksum mismatch in block {b} ({span})"
                whole.update(chunk)
                tops.update(hashlib.sha256(chunk).digest())
                size += len(chunk)
    except Exception as e:  # each store's client raises its own kinds
        return f"{where}: reading it failed after {size} bytes ({e})"
    if size != entry.bytes:
        return f"{where}: {size} bytes, the manifest lists {entry.bytes}"
    got = (whole if side.digest_kind == "sha256" else tops).hexdigest()
    if got != side.digest:
        return f"{where}: whole-file digest {got[:16]}.. differs from {side.digest[:16]}.."
    if side.stats is not None and side.stats.get("sha256"):
        h = hashlib.sha256()
        try:
            with fs.open(f"{shard}{STATS_SUFFIX}", "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
        except FileNotFoundError:
            return None  # optional: the loader then computes the means itself
        if h.hexdigest() != side.stats["sha256"]:
            return f"{where}{STATS_SUFFIX}: SHA-256 differs from the sidecar's"
    return None


def verify_remote(url: str, against: Any = None) -> int:
    """``verify URL``: every shard streamed and checked (see the module docstring). 0 when
    all match, 1 at the first mismatch (named).

    Raises:
        ValueError: ``against`` (comparing samples with their sources is for a local file).
    """
    if against is not None:
        raise ValueError(
            f"--against compares a local .beton with its source; {url} is remote: verify "
            f"checks every shard's checksums and digest"
        )
    try:
        fs, shards, dataset = _manifest(url)
    except BetonError as e:
        print(f"FAIL: {e}")
        return 1
    for i, (shard, entry) in enumerate(zip(shards, dataset.shards)):
        bad = _verify_shard(fs, shard, entry)
        if bad is not None:
            print(f"FAIL: shard {i}: {bad}")
            return 1
        print(f"shard {i}: OK {fs.unstrip_protocol(shard)} ({entry.samples} samples, "
              f"{entry.bytes} bytes)")  # fmt: skip
    print(f"OK: {url} ({len(shards)} shards, {dataset.num_samples} samples)")
    return 0
