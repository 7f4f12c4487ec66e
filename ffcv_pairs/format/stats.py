"""The image-statistics sidecar ``<file>.beton.stats``: per image, its largest value and
its channel sums.

The contrast op scales every value around the image's mean, so without these
numbers the loader must read an image twice (once for the mean, once to map it).
The writer computes them as it packs the pages (see
:func:`~ffcv_pairs.kernels.bytesums.image_stats`), for uint8 fields only.

File layout: a :data:`HEADER_BYTES` header (magic, the `.beton`'s whole-file
digest ``root_sha256`` as 32 bytes, the sample count), then ``num_samples``
records of ``uint32[2, 4]``, little-endian: for A then B, ``[max, s0, s1, s2]``.
The sums follow the field's :func:`stats_kind`:

* ``"first"`` (shape ``(3, H, W)``): ``s0..s2`` sum each channel plane;
* ``"last"`` (shape ``(H, W, 3)``): ``s0..s2`` sum each interleaved channel;
* ``"total"`` (any other shape): ``s0`` sums every value, ``s1 = s2 = 0``.

The checksum sidecar names the file and its SHA-256 (``Manifest.stats``), and
the header names the `.beton`'s digest: a stats file from another conversion,
or one whose bytes no longer match that SHA-256, is never used
(:func:`open_stats` refuses it with a warning; the loader then computes the
means itself, so results never depend on the file being there or intact).
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import FfcvPairsError
from .schema import ArraySpec, PairSchema
from .sidecar import sidecar_to_read

log = logging.getLogger(__name__)

__all__ = [
    "HEADER_BYTES",
    "RECORD_SHAPE",
    "STATS_FORMAT",
    "STATS_SUFFIX",
    "StatsKind",
    "StatsWarning",
    "field_stats_kinds",
    "hash_stats",
    "open_stats",
    "record_offset",
    "stats_entry",
    "stats_header",
    "stats_kind",
    "stats_path",
    "stats_size",
]

STATS_FORMAT = "ffcv-pairs-stats/1"
MAGIC = b"ffcv-pairs-stats"  # 16 bytes
HEADER_BYTES = 64
RECORD_SHAPE = (2, 4)  # per sample: A and B, each [max, s0, s1, s2] as uint32
_MAX_ELEMENTS = (2**32 - 1) // 255  # larger images could overflow a uint32 sum
StatsKind = Literal["first", "last", "total"]


class StatsWarning(FfcvPairsError, UserWarning):
    """A stats file that cannot be trusted was ignored (the loader computes the means)."""


#: What the stats file's name adds to its `.beton`'s.
STATS_SUFFIX = ".stats"


def stats_path(beton: str | os.PathLike[str]) -> Path:
    """``train.beton`` -> ``train.beton.stats`` (where the writer puts it; a reader looks
    with :func:`~ffcv_pairs.format.sidecar.sidecar_to_read`, which follows symlinks)."""
    return Path(f"{os.fspath(beton)}{STATS_SUFFIX}")


def stats_kind(spec: ArraySpec) -> StatsKind | None:
    """How the sums of a field are taken (module docstring); None: no statistics (not
    uint8, or so large that a sum could overflow 32 bits)."""
    if spec.dtype != "uint8" or int(np.prod(spec.shape)) > _MAX_ELEMENTS:
        return None
    shape = spec.shape
    if len(shape) == 3 and shape[0] == 3 and shape[2] != 3:
        return "first"
    if len(shape) == 3 and shape[2] == 3 and shape[0] != 3:
        return "last"
    return "total"


def record_offset(sample: int) -> int:
    """Where the record of ``sample`` starts in a stats file."""
    return HEADER_BYTES + sample * int(np.prod(RECORD_SHAPE)) * 4


def field_stats_kinds(schema: PairSchema) -> dict[str, StatsKind | None]:
    """:func:`stats_kind` of each image field, by name."""
    return {name: stats_kind(schema.spec(name)) for name in schema.IMAGE_FIELDS}


def stats_entry(schema: PairSchema, file: str) -> dict[str, Any]:
    """The checksum sidecar's ``stats`` entry for ``file``, before its ``sha256`` is known."""
    # The key keeps its first name ("layouts"), so files written before still read.
    return {"format": STATS_FORMAT, "file": file, "layouts": field_stats_kinds(schema)}


def stats_size(num_samples: int) -> int:
    """Bytes of a stats file of ``num_samples`` records."""
    return record_offset(num_samples)


def stats_header(root_sha256: str, num_samples: int) -> bytes:
    """The header that ties a stats file to the `.beton` with digest ``root_sha256``."""
    head = MAGIC + bytes.fromhex(root_sha256) + int(num_samples).to_bytes(8, "little")
    return head.ljust(HEADER_BYTES, b"\0")


def hash_stats(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a whole stats file (hex)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def open_stats(
    beton: str | os.PathLike[str], entry: dict[str, Any] | None, root_sha256: str, n: int
) -> np.ndarray | None:
    """The records ``uint32 (n, 2, 4)`` of ``beton``'s stats file, mapped read-only; None
    when its manifest lists none (``entry``), or the file is missing or belongs to
    another conversion (with a warning: the means are then computed while loading).

    Args:
        entry: The manifest's ``stats`` entry.
        root_sha256: The manifest's whole-file digest.
        n: The `.beton`'s sample count.
    """
    if entry is None or not root_sha256:
        return None
    path = sidecar_to_read(beton, STATS_SUFFIX)
    if not path.exists():
        log.info("%s: no %s; contrast reads each image for its mean", beton, path.name)
        return None
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if size != stats_size(n) or head != stats_header(root_sha256, n):
        log.warning(
            "%s: %s does not belong to this file (another conversion's?); ignored, "
            "contrast reads each image for its mean",
            beton,
            path.name,
        )
        return None
    # The header only says whose file it is; a damaged record would give a wrong mean and
    # wrong pixels with no other sign, so the whole file is checked against the sidecar
    # (about 50 ms at 3M samples: SHA-256 of 96 MB).
    got, want = hash_stats(path), entry.get("sha256")
    if got != want:
        warnings.warn(
            f"{beton}: {path.name} fails its checksum (SHA-256 {got[:16]}.., the sidecar "
            f"says {str(want)[:16]}..): it is damaged; ignored, contrast reads each image "
            f"for its mean (rewrite the file, or delete {path.name}, to silence this)",
            StatsWarning,
            stacklevel=2,
        )
        return None
    mapped = np.memmap(path, dtype="<u4", mode="r", offset=HEADER_BYTES, shape=(n, *RECORD_SHAPE))
    return mapped.view(np.ndarray)
