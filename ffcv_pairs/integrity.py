"""Checks of a `.beton` against its checksum sidecar and against its sources.

* :func:`check_tables` runs on every open when a sidecar exists: the header,
  field table and metadata blocks (what the loader trusts) must match their
  CRCs, so a corrupt label or pointer is refused, not loaded.
* :func:`verify_checksums` streams the whole file and names the first bad
  block: header/metadata, data page (with its samples) or allocation table.
* :func:`compare_with_source` compares samples bit-exactly with the .pt files.
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .manifest import Manifest, manifest_path
from .reader import BetonError, PairReader
from .schema import PairSchema
from .sources import PairSource, to_array, to_label

log = logging.getLogger(__name__)

__all__ = [
    "Mismatch",
    "check_tables",
    "compare_with_source",
    "describe_block",
    "load_manifest",
    "open_beton",
    "split_of",
    "verify_checksums",
]


@dataclass(frozen=True)
class Mismatch:
    """The first thing that did not match, in words."""

    message: str


def load_manifest(reader: PairReader) -> Manifest | None:
    """The sidecar of ``reader``'s file, checked to belong to it; None when there is none."""
    path = manifest_path(reader.path)
    if not path.exists():
        return None
    manifest = Manifest.load(path)
    if manifest.file_size != reader.file_size:
        raise BetonError(
            f"{reader.path}: file is {reader.file_size} bytes but its manifest {path.name} "
            f"says {manifest.file_size}: truncated, or a stale manifest"
        )
    if manifest.num_samples != reader.num_samples or manifest.page_size != reader.page_size:
        raise BetonError(f"{reader.path}: header does not match its manifest {path.name}")
    return manifest


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


def _crc_blocks(path: Path, block_size: int, blocks: range) -> list[int]:
    crcs = []
    with open(path, "rb") as f:
        for b in blocks:
            f.seek(b * block_size)
            crcs.append(zlib.crc32(f.read(block_size)))
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
    for b, crc in zip(blocks, _crc_blocks(reader.path, ps, blocks)):
        if b >= len(expected) or crc != expected[b]:
            raise BetonError(
                f"{reader.path}: checksum mismatch in {describe_block(reader, b)}: "
                f"the file is corrupt"
            )


def verify_checksums(reader: PairReader, manifest: Manifest) -> Mismatch | None:
    """Stream the whole file; the first block whose CRC differs, or None."""
    ps = int(reader.page_size)
    expected = manifest.crcs()
    with open(reader.path, "rb", buffering=0) as f:
        buf = bytearray(ps)
        view = memoryview(buf)
        block = 0
        while n := f.readinto(buf):
            if block >= len(expected) or zlib.crc32(view[:n]) != expected[block]:
                return Mismatch(f"checksum mismatch in {describe_block(reader, block)}")
            block += 1
    if block != len(expected):
        return Mismatch(f"file has {block} blocks, manifest lists {len(expected)}")
    return None


def _stored(reader: PairReader, field: str, sid: int) -> np.ndarray:
    spec = reader.schema.spec(field)
    ptr = int(reader.image_pointers(field)[sid])
    raw = np.fromfile(reader.path, dtype=np.uint8, count=spec.nbytes, offset=ptr)
    return raw.view(spec.np_dtype).reshape(spec.shape)


def compare_with_source(
    reader: PairReader,
    source: PairSource,
    samples: int | None,
    seed: int = 0,
    store_dtype: str | None = None,
) -> Mismatch | None:
    """Compare ``samples`` random samples (all when None) with ``source``, bit-exactly."""
    from .writer import _cast

    n = reader.num_samples
    if len(source) < n:
        return Mismatch(f"source has {len(source)} samples, the file {n}")
    ids = (
        np.arange(n)
        if samples is None or samples >= n
        else np.sort(np.random.default_rng(seed).choice(n, size=samples, replace=False))
    )
    labels = reader.metadata[f"f{reader.field_index(PairSchema.LABEL_FIELD)}"]
    for sid in ids.tolist():
        raw = source.read(sid)
        for value, field in zip(raw[:2], PairSchema.IMAGE_FIELDS):
            where = source.where(sid, field)
            want = _cast(to_array(value, where), store_dtype, where)
            got = _stored(reader, field, sid)
            if (
                want.shape != got.shape
                or want.dtype != got.dtype
                or (want.tobytes() != got.tobytes())
            ):
                return Mismatch(f"sample {sid}: field {field!r} differs from {where}")
        where = source.where(sid, PairSchema.LABEL_FIELD)
        if to_label(raw[2], where) != int(labels[sid]):
            return Mismatch(f"sample {sid}: label {int(labels[sid])} differs from {where}")
    return None


def split_of(path: str | os.PathLike[str]) -> str:
    """``out/train.beton`` -> ``train``."""
    name = Path(path).name
    return name[: -len(".beton")] if name.endswith(".beton") else Path(path).stem
