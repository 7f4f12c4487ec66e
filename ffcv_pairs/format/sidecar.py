"""The checksum sidecar ``<file>.beton.json`` written next to every `.beton`.

The `.beton` itself stays byte-for-byte FFCV 1.0.2, so plain upstream FFCV reads
it. The sidecar records a CRC32 for every ``page_size`` block of the file (the
header and metadata blocks, every data page, the allocation table), a SHA-256
of the whole file, the schema, the sample count and where the data came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST_FORMAT", "Manifest", "hash_file", "manifest_path"]

MANIFEST_FORMAT = "ffcv-pairs-manifest/1"


def manifest_path(beton: str | os.PathLike[str]) -> Path:
    """``train.beton`` -> ``train.beton.json``."""
    return Path(f"{os.fspath(beton)}.json")


def hash_file(path: str | os.PathLike[str], block_size: int) -> tuple[list[int], str]:
    """CRC32 of every ``block_size`` block and the SHA-256 of the whole file, in one pass."""
    crcs: list[int] = []
    digest = hashlib.sha256()
    buf = bytearray(block_size)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            crcs.append(zlib.crc32(view[:n]))
            digest.update(view[:n])
    return crcs, digest.hexdigest()


@dataclass
class Manifest:
    """What the writer knew about a `.beton` when it finished it."""

    schema: dict[str, Any]
    num_samples: int
    page_size: int
    file_size: int
    block_crc32: str  # one 8-digit hex CRC32 per page_size block, space-separated
    sha256: str
    source: str
    data_start: int
    samples_per_page: int
    writer_version: str
    store_dtype: str | None = None
    format: str = MANIFEST_FORMAT
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def block_size(self) -> int:
        return self.page_size

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write to ``path`` durably (fsync) in one piece."""
        data = json.dumps(asdict(self), indent=1).encode()
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Manifest:
        """Read a sidecar; a malformed one raises ``ValueError`` naming the file."""
        try:
            raw = json.loads(Path(path).read_text())
            if raw.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {raw.get('format')!r}, expected {MANIFEST_FORMAT!r}")
            return cls(**raw)
        except (OSError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: unreadable manifest ({e})") from None

    def crcs(self) -> list[int]:
        return [int(x, 16) for x in self.block_crc32.split()]

    @staticmethod
    def encode_crcs(crcs: list[int]) -> str:
        return " ".join(f"{c:08x}" for c in crcs)
