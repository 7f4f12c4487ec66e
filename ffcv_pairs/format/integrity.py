"""Checks of a `.beton` against its checksum sidecar.

* :func:`check_tables` runs on every open when a sidecar exists: the header,
  field table and metadata blocks (what the loader trusts) must match their
  CRCs, so a corrupt label or pointer is refused, not loaded.
* :func:`verify_checksums` streams the whole file and names the first bad
  block: header/metadata, data page (with its samples) or allocation table;
  then checks the whole-file digest (either sidecar format), and the image
  statistics file against its SHA-256 when the sidecar lists one.

Comparing samples with their sources is :mod:`ffcv_pairs.write.compare`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._fileio import pread_exact, read_blocks
from .reader import BetonError, PairReader
from .schema import PairSchema
from .sidecar import Manifest, block_digest, root_digest, sidecar_to_read
from .stats import STATS_SUFFIX, hash_stats, open_stats

log = logging.getLogger(__name__)

__all__ = [
    "Mismatch",
    "check_tables",
    "describe_block",
    "load_manifest",
    "load_stats",
    "open_beton",
    "split_of",
    "verify_checksums",
]


@dataclass(frozen=True)
class Mismatch:
    """The first thing that did not match, in words."""

    message: str


def load_manifest(reader: PairReader) -> Manifest | None:
    """The sidecar of ``reader``'s file, checked to belong to it; None when there is none.
    Read once per reader (opening, stats, checks against a dataset's entry and resume
    identity all ask): later calls return what the first found."""
    if reader.sidecar_read is not None:
        return reader.sidecar_read[0]
    path = sidecar_to_read(reader.path)
    if not path.exists():
        reader.sidecar_read = (None,)
        return None
    manifest = Manifest.load(path)
    if manifest.file_size != reader.file_size:
        raise BetonError(
            f"{reader.path}: file is {reader.file_size} bytes but its manifest {path.name} "
            f"says {manifest.file_size}: truncated, or a stale manifest"
        )
    if manifest.num_samples != reader.num_samples or manifest.page_size != reader.page_size:
        raise BetonError(f"{reader.path}: header does not match its manifest {path.name}")
    reader.sidecar_read = (manifest,)
    return manifest


def load_stats(reader: PairReader) -> tuple[np.ndarray, dict[str, str | None]] | None:
    """``reader``'s image statistics (:func:`~ffcv_pairs.format.stats.open_stats`) and how
    each field was summed; None when the file has none that belong to it."""
    manifest = load_manifest(reader)
    if manifest is None or manifest.stats is None:
        return None
    records = open_stats(reader.path, manifest.stats, manifest.root_sha256, reader.num_samples)
    return None if records is None else (records, dict(manifest.stats["layouts"]))


def open_beton(path: str | os.PathLike[str], full_check: bool = False) -> PairReader:
    """Open ``path``, refusing it if its tables (or, with ``full_check``, any byte)
    do not match the sidecar's checksums.

    Raises:
        BetonError: naming the file and the first bad block.
    """
    reader = PairReader(path)
    manifest = load_manifest(reader)
    if manifest is None:
        if full_check:
            log.warning("%s: no manifest, so its checksums cannot be checked", reader.path)
        return reader
    check_tables(reader, manifest)
    if full_check:
        bad = verify_checksums(reader, manifest)
        if bad is not None:
            raise BetonError(f"{reader.path}: {bad.message}")
    return reader


def describe_block(reader: PairReader, block: int) -> str:
    """Human description of checksum block ``block`` (a ``page_size`` slice of the file)."""
    ps = int(reader.page_size)
    start, end = block * ps, min((block + 1) * ps, reader.file_size)
    span = f"bytes {start}-{end}"
    alloc = int(reader.header["alloc_table_ptr"])
    meta_end = reader.metadata_end
    if start < meta_end:
        return f"block {block} (header/field table/metadata, {span})"
    if start >= alloc:
        return f"block {block} (allocation table, {span})"
    ptrs = np.asarray(reader.image_pointers(PairSchema.IMAGE_FIELDS[0]))
    on_page = np.flatnonzero((ptrs >= start) & (ptrs < end))
    samples = f"samples {on_page[0]}-{on_page[-1]}" if len(on_page) else "no samples"
    return f"page {block} (data, {span}, {samples})"


def _crc_blocks(path: Path, block_size: int, blocks: range, file_size: int) -> list[int]:
    crcs = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for b in blocks:
            size = min(block_size, file_size - b * block_size)  # the last ends with the file
            crcs.append(zlib.crc32(pread_exact(fd, size, b * block_size, str(path))))
    finally:
        os.close(fd)
    return crcs


def check_tables(reader: PairReader, manifest: Manifest) -> None:
    """CRC-check the blocks holding the header, field table and metadata.

    Raises:
        BetonError: naming the first bad block.
    """
    ps = int(reader.page_size)
    meta_end = reader.metadata_end
    blocks = range(-(-meta_end // ps))
    expected = manifest.crcs()
    for b, crc in zip(blocks, _crc_blocks(reader.path, ps, blocks, reader.file_size)):
        if b >= len(expected) or crc != expected[b]:
            raise BetonError(
                f"{reader.path}: checksum mismatch in {describe_block(reader, b)}: "
                f"the file is corrupt"
            )


def verify_checksums(reader: PairReader, manifest: Manifest) -> Mismatch | None:
    """Stream the whole file: the first block whose CRC differs, a whole-file digest
    that differs from the sidecar's (either format), or None."""
    ps = int(reader.page_size)
    expected = manifest.crcs()
    whole = manifest.digest_kind == "sha256"
    file_digest = hashlib.sha256()
    blocks: list[bytes] = []
    block = 0
    for view in read_blocks(reader.path, ps):  # whole blocks, however Linux splits reads
        if block >= len(expected) or zlib.crc32(view) != expected[block]:
            return Mismatch(f"checksum mismatch in {describe_block(reader, block)}")
        if whole:
            file_digest.update(view)
        else:
            blocks.append(block_digest(view).sha256)
        block += 1
    if block != len(expected):
        return Mismatch(f"file has {block} blocks, manifest lists {len(expected)}")
    got = file_digest.hexdigest() if whole else root_digest(blocks)
    if got != manifest.digest:
        return Mismatch(
            f"whole-file digest {got[:16]}.. differs from the manifest's "
            f"{manifest.digest_kind} {manifest.digest[:16]}.. although every block CRC matches"
        )
    return _verify_stats(reader, manifest)


def _verify_stats(reader: PairReader, manifest: Manifest) -> Mismatch | None:
    """The image statistics file against the sidecar's SHA-256 (a missing one is only
    logged: the loader then computes the means itself)."""
    if manifest.stats is None:
        return None
    path = sidecar_to_read(reader.path, STATS_SUFFIX)
    if not path.exists():
        log.warning("%s: its image statistics %s are missing", reader.path, path.name)
        return None
    got = hash_stats(path)
    if got != manifest.stats.get("sha256"):
        return Mismatch(
            f"image statistics {path.name}: SHA-256 {got[:16]}.. differs from the manifest's "
            f"{str(manifest.stats.get('sha256'))[:16]}..: corrupt, or another conversion's"
        )
    return None


def split_of(path: str | os.PathLike[str]) -> str:
    """``out/train.beton`` -> ``train``."""
    name = Path(path).name
    return name[: -len(".beton")] if name.endswith(".beton") else Path(path).stem
