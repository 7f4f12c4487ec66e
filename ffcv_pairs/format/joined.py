"""The shards of a dataset manifest (or of several datasets: a mixture's) read as one
`.beton`.

:class:`JoinedReader` answers what the loader asks a :class:`~ffcv_pairs.format.reader.
PairReader` (schema, sample count, page size, metadata, pointers, sizes) for the dataset
as a whole, as if its shards lay end to end in one file: shard ``k`` starts at byte
``bases[k]``, a multiple of the largest page size, so a pointer's page is still ``ptr >>
page_shift`` and no page holds two shards. The loader maps the files at exactly those
offsets, into one address range (:mod:`~ffcv_pairs.load.joined_mapping`), so the order,
the prefetch and the kernels work on global ids and pointers unchanged.

Every shard is opened as a single file is (:func:`~ffcv_pairs.format.integrity.open_beton`:
its header, tables and sidecar CRCs), and checked against its manifest entry: sample count,
size, page size, schema and whole-file digest. The metadata table is joined into private
memory (24 bytes a sample for raw A and B: 72 MB at 3M samples), its pointers moved by
each shard's base.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .integrity import load_manifest, load_stats, open_beton
from .reader import BetonError, PairReader
from .schema import PairSchema
from .shards import DatasetManifest, schema_fingerprint

__all__ = [
    "DatasetReader",
    "JoinedReader",
    "content_digest",
    "dataset_stats",
    "joined_stats",
    "open_dataset",
]


def _check_entry(reader: PairReader, entry: Any, manifest: Path) -> None:
    """``reader``'s file against its manifest entry; BetonError naming both."""
    size, pages = reader.file_size, int(reader.page_size)
    checks = [
        ("samples", entry.samples, reader.num_samples),
        ("bytes", entry.bytes, size),
        ("page size", entry.page_size, pages),
        ("schema", entry.schema, schema_fingerprint(reader.schema.to_json())),
    ]
    side = load_manifest(reader)
    if side is not None:
        checks.append(("digest", entry.digest, f"{side.digest_kind}:{side.digest}"))
    for what, listed, found in checks:
        if listed != found:
            raise BetonError(
                f"{reader.path}: {what} {found} differs from {manifest}'s entry ({listed}): the "
                f"shard was replaced or the manifest is stale"
            )


class JoinedReader:
    """The shards of one or more datasets as one file (see the module docstring).

    Args:
        path: A dataset manifest; or, for a mixture, a list of manifests and `.beton`
            files (each a dataset of one shard), laid end to end in that order.
        full_check: Check every checksum of every shard on open.

    Attributes:
        path: The manifest (for a mixture, the first dataset's path).
        paths: Every dataset's path, in order.
        shards: Each shard's :class:`~ffcv_pairs.format.reader.PairReader`.
        bases: uint64 ``(shards,)``: where each shard starts in the joined file.
        offsets: int64 ``(shards + 1,)``: each shard's first global sample id, and the total.
        dataset_offsets: int64 ``(datasets + 1,)``: each dataset's first global sample id.
        file_size: Bytes from the first shard's start to the last one's end.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        full_check: bool = False,
    ):
        given = [path] if isinstance(path, str | os.PathLike) else list(path)
        self.paths = [Path(p) for p in given]
        if not self.paths:
            raise ValueError("a mixture needs at least one dataset")
        self.path = self.paths[0]
        self.shards: list[PairReader] = []
        self._identities: list[str] = []
        counts = [0]
        for dataset in self.paths:
            held = self._open(dataset, full_check)
            counts.append(counts[-1] + sum(r.num_samples for r in held))
            self.shards += held
        self.dataset_offsets = np.asarray(counts, dtype=np.int64)
        first = self.shards[0]
        self.schema: PairSchema = first.schema
        for reader in self.shards:
            if reader.schema != self.schema:
                raise BetonError(
                    f"{reader.path} holds {reader.schema.describe()}, but {first.path} holds "
                    f"{self.schema.describe()}: datasets read together must have one schema"
                )
        self.handlers = first.handlers
        self.field_names = first.field_names
        self.metadata_type = first.metadata_type
        self.page_size = max(int(r.page_size) for r in self.shards)
        sizes = [r.num_samples for r in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.num_samples = int(self.offsets[-1])
        ends, base = [], 0
        for reader in self.shards:
            ends.append(base)
            base = -(-(base + reader.file_size) // self.page_size) * self.page_size
        self.bases = np.asarray(ends, dtype=np.uint64)
        self.file_size = int(self.bases[-1]) + self.shards[-1].file_size
        self.metadata = self._join_metadata()
        self._sizes: np.ndarray | None = None

    def _open(self, dataset: Path, full_check: bool) -> list[PairReader]:
        """The shards of one dataset: a manifest's, checked against their entries, or one
        `.beton`."""
        from .shards import is_dataset_manifest

        if not is_dataset_manifest(dataset):
            reader = open_beton(dataset, full_check=full_check)
            side = load_manifest(reader)
            self._identities.append(f"beton:{side.digest if side else reader.file_size}")
            return [reader]
        manifest = DatasetManifest.load(dataset)
        self._identities.append(f"dataset:{manifest.digest}")
        held = []
        for shard, entry in zip(manifest.paths(dataset), manifest.shards):
            try:
                reader = open_beton(shard, full_check=full_check)
            except BetonError as e:
                raise BetonError(f"{e} (a shard of {dataset})") from None
            _check_entry(reader, entry, dataset)
            held.append(reader)
        return held

    @property
    def files(self) -> list[Path]:
        """The shard files, in order."""
        return [r.path for r in self.shards]

    @property
    def page_shift(self) -> np.uint64:
        return np.uint64(self.page_size.bit_length() - 1)

    def field_index(self, name: str) -> int:
        return list(self.field_names).index(name)

    def _join_metadata(self) -> np.ndarray:
        joined = np.concatenate([r.metadata for r in self.shards])
        for name in (*PairSchema.IMAGE_FIELDS, *self.schema.arrays):
            column = joined[f"f{self.field_index(name)}"]
            ptrs = column["data_ptr"] if column.dtype.names else column
            for k in range(1, len(self.shards)):
                ptrs[self.offsets[k] : self.offsets[k + 1]] += self.bases[k]
        return joined

    def image_pointers(self, name: str) -> np.ndarray:
        """The joined-file pointer of image field ``name`` for every sample."""
        column = self.metadata[f"f{self.field_index(name)}"]
        return column["data_ptr"] if column.dtype.names else column

    def image_sizes(self) -> np.ndarray:
        """``(num_samples, 2)`` uint64: the stored bytes of A and B of every sample."""
        if self._sizes is None:
            self._sizes = np.concatenate([r.image_sizes() for r in self.shards])
        return self._sizes

    def stored_bytes(self, name: str) -> int | np.ndarray:
        spec = self.schema.spec(name)
        if spec.jpeg is None:
            return spec.nbytes
        return self.image_sizes()[:, PairSchema.IMAGE_FIELDS.index(name)]

    def mapped_tables(self) -> list[np.ndarray]:
        """The arrays that map a file (a bus error there names the file): each shard's."""
        return [t for r in self.shards for t in r.mapped_tables()]

    def identity(self) -> str:
        """What a resume state names: the manifest's digest (for a mixture, each
        dataset's, in order)."""
        return "+".join(self._identities)


def joined_stats(reader: JoinedReader) -> tuple[np.ndarray, dict[str, str | None]] | None:
    """Every shard's image statistics, joined; None unless every shard has them, summed
    alike."""
    parts = [load_stats(r) for r in reader.shards]
    if any(p is None for p in parts):
        return None
    layouts = [p[1] for p in parts if p is not None]
    if any(layout != layouts[0] for layout in layouts):
        return None
    records = np.concatenate([p[0] for p in parts if p is not None])
    records.setflags(write=False)
    return records, layouts[0]


def dataset_stats(reader: DatasetReader) -> tuple[np.ndarray, dict[str, str | None]] | None:
    """The image statistics of a file (:func:`~.integrity.load_stats`) or of a dataset's
    shards (:func:`joined_stats`)."""
    return joined_stats(reader) if isinstance(reader, JoinedReader) else load_stats(reader)


def content_digest(reader: JoinedReader, shard_identity: Any) -> str:
    """One digest over each shard's ``shard_identity(reader)``."""
    h = hashlib.blake2b(digest_size=16)
    for shard in reader.shards:
        h.update(shard_identity(shard).encode())
    return f"blake2b:{h.hexdigest()}"


#: What the loader reads: one `.beton`, or a dataset of shards.
DatasetReader = PairReader | JoinedReader


def open_dataset(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], full_check: bool = False
) -> DatasetReader:
    """A :class:`PairReader` of a `.beton`, or a :class:`JoinedReader` of a dataset
    manifest (``.json``) or of a list of datasets (a mixture's)."""
    from .shards import is_dataset_manifest

    if not isinstance(path, str | os.PathLike) or is_dataset_manifest(path):
        return JoinedReader(path, full_check=full_check)
    return open_beton(path, full_check=full_check)
