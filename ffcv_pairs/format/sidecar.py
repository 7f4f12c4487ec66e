"""The checksum sidecar ``<file>.beton.json`` written next to every `.beton`.

The `.beton` itself stays byte-for-byte FFCV 1.0.2, so plain upstream FFCV reads
it. The sidecar records a CRC32 for every ``page_size`` block of the file (the
header and metadata blocks, every data page, the allocation table), a digest of
the whole file, the schema, the sample count and where the data came from.

The whole-file digest depends on the sidecar's format:

* ``ffcv-pairs-manifest/2`` (written now): ``root_sha256``, the SHA-256 of the
  concatenated SHA-256 digests of every ``page_size`` block, in file order (a
  two-level Merkle tree). The writer's workers hash each data page as they write
  it, so nothing reads the file a second time.
* ``ffcv-pairs-manifest/1`` (older writers): ``sha256``, the SHA-256 of the file.

Both still verify.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from .._fileio import read_blocks

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_FORMATS",
    "BlockDigest",
    "Manifest",
    "block_digest",
    "hash_file",
    "manifest_path",
    "root_digest",
    "sidecar_to_read",
]

MANIFEST_FORMAT = "ffcv-pairs-manifest/2"
_V1 = "ffcv-pairs-manifest/1"
MANIFEST_FORMATS = (_V1, MANIFEST_FORMAT)
DigestKind = Literal["root_sha256", "sha256"]


def manifest_path(beton: str | os.PathLike[str]) -> Path:
    """``train.beton`` -> ``train.beton.json`` (where the writer puts it)."""
    return Path(f"{os.fspath(beton)}.json")


def sidecar_to_read(beton: str | os.PathLike[str], suffix: str = ".json") -> Path:
    """The sidecar ``<file><suffix>`` to read for ``beton``: beside the file a symlink
    points to (``os.path.realpath``), where the writer put it, or else beside the link
    itself when only it has one. The path beside the target when neither exists."""
    real = Path(f"{os.path.realpath(beton)}{suffix}")
    given = Path(f"{os.fspath(beton)}{suffix}")
    return given if not real.exists() and given.exists() else real


class BlockDigest(NamedTuple):
    """CRC32 and SHA-256 of one ``page_size`` block."""

    crc32: int
    sha256: bytes


def block_digest(block: bytes | memoryview) -> BlockDigest:
    """The CRC32 and SHA-256 digest of one block."""
    return BlockDigest(zlib.crc32(block), hashlib.sha256(block).digest())


def root_digest(digests: Iterable[bytes]) -> str:
    """The top of the two-level tree: SHA-256 over the blocks' SHA-256 digests, in order."""
    top = hashlib.sha256()
    for d in digests:
        top.update(d)
    return top.hexdigest()


def hash_file(
    path: str | os.PathLike[str], block_size: int, kind: DigestKind = "root_sha256"
) -> tuple[list[int], str]:
    """CRC32 of every ``block_size`` block and the whole-file digest of ``kind``, in one pass.

    Args:
        path: The file.
        block_size: Bytes per block (the page size).
        kind: ``"root_sha256"`` (sidecar format 2) or ``"sha256"`` of the bytes (format 1).
    """
    crcs: list[int] = []
    blocks: list[bytes] = []
    whole = hashlib.sha256()
    for view in read_blocks(path, block_size):  # whole blocks, however Linux splits reads
        crcs.append(zlib.crc32(view))
        if kind == "sha256":
            whole.update(view)
        else:
            blocks.append(hashlib.sha256(view).digest())
    return crcs, whole.hexdigest() if kind == "sha256" else root_digest(blocks)


@dataclass
class Manifest:
    """What the writer knew about a `.beton` when it finished it.

    Attributes:
        block_crc32: One 8-digit hex CRC32 per ``page_size`` block, space-separated.
        root_sha256: Format 2: SHA-256 over the blocks' SHA-256 digests, in order.
        sha256: Format 1 only: SHA-256 of the whole file.
        shuffle_seed: Seed of the order the samples were written in (None: source
            order). Position ``j`` holds source sample
            ``Permutation(num_samples, shuffle_seed).source_of(j)``.
        permutation: Name and version of that permutation (``feistel-mix64/1``).
        fingerprint: What identified the source and settings (see
            :mod:`ffcv_pairs.write.journal`), so ``--resume`` can skip a finished file.
        stats: The image-statistics sidecar (:mod:`~ffcv_pairs.format.stats`):
            ``{"format", "file", "sha256", "layouts": {field: stats kind or None}}``;
            None: not written (no uint8 field, or a resumed run that started without it).
    """

    schema: dict[str, Any]
    num_samples: int
    page_size: int
    file_size: int
    block_crc32: str
    source: str
    data_start: int
    samples_per_page: int
    writer_version: str
    store_dtype: str | None = None
    root_sha256: str = ""
    sha256: str = ""
    shuffle_seed: int | None = None
    permutation: str | None = None
    fingerprint: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    format: str = MANIFEST_FORMAT
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def block_size(self) -> int:
        return self.page_size

    @property
    def digest_kind(self) -> DigestKind:
        """Which whole-file digest this sidecar holds (see the module docstring)."""
        return "sha256" if self.format == _V1 else "root_sha256"

    @property
    def digest(self) -> str:
        return self.sha256 if self.format == _V1 else self.root_sha256

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write to ``path`` durably (fsync) in one piece."""
        data = json.dumps(asdict(self), indent=1).encode()
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Manifest:
        """Read a sidecar (format 1 or 2); a malformed one raises ``ValueError`` naming the file."""
        try:
            raw = json.loads(Path(path).read_text())
            if not isinstance(raw, dict) or raw.get("format") not in MANIFEST_FORMATS:
                got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
                raise ValueError(f"format {got!r}, expected one of {MANIFEST_FORMATS}")
            manifest = cls(**raw)
            if not manifest.digest:
                raise ValueError(f"no whole-file digest ({manifest.digest_kind})")
            return manifest
        except (OSError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: unreadable manifest ({e})") from None

    def crcs(self) -> list[int]:
        return [int(x, 16) for x in self.block_crc32.split()]

    @staticmethod
    def encode_crcs(crcs: list[int]) -> str:
        return " ".join(f"{c:08x}" for c in crcs)
