"""Open the ``.pt`` files of one or several splits: one directory scan, either kind of
source (per-sample or batched files), chosen by the ``layout`` keyword or found.

Example:
    >>> from ffcv_pairs.write.source_kinds import open_sources
    >>> train, val = open_sources("data/pt", ["train", "val"])
"""

from __future__ import annotations

import os
from typing import Literal

from .batched import BatchedSource
from .discover import SplitFiles, scan
from .persample import PerSampleSource
from .sources import PairSource, SourceError

__all__ = ["SOURCE_KINDS", "SourceKind", "open_source", "open_sources"]

#: What the ``layout`` keyword (and ``--layout``) accepts: the kind of source, or ``auto``.
SourceKind = Literal["auto", "per-sample", "batched"]
SOURCE_KINDS: tuple[str, ...] = ("auto", "per-sample", "batched")


def _pick(files: SplitFiles, layout: str) -> str:
    if layout not in SOURCE_KINDS:
        raise SourceError(f"unknown layout {layout!r}; must be one of {', '.join(SOURCE_KINDS)}")
    if layout != "auto":
        return layout
    found = files.source_kinds
    if len(found) == 2:
        raise SourceError(
            f"{files.root}: both per-sample and batched files exist for split {files.split!r}; "
            f"pass --layout per-sample or --layout batched"
        )
    if not found:
        s = files.split
        raise SourceError(
            f"{files.root}: no files for split {s!r} in a known layout (expected {s}_A_images_0.pt"
            f" ... for per-sample, or {s}_batch_0.pt ... for batched)"
        )
    return found[0]


def open_sources(
    root: str | os.PathLike[str], splits: list[str] | tuple[str, ...], layout: SourceKind = "auto"
) -> list[PairSource]:
    """The sources of ``splits`` under ``root``, in order, from one directory scan.

    Raises:
        SourceError: the directory is missing, a split has no files, files are
            missing or out of range, or the layout is unknown or ambiguous.
    """
    found = scan(root, list(splits))
    sources: list[PairSource] = []
    for split in splits:
        files = found[split]
        if _pick(files, layout) == "per-sample":
            sources.append(PerSampleSource(root, split, files=files))
        else:
            sources.append(BatchedSource(root, split, files=files))
    return sources


def open_source(
    root: str | os.PathLike[str], split: str, layout: SourceKind = "auto"
) -> PairSource:
    """The source of one split: :func:`open_sources` for a single split."""
    return open_sources(root, [split], layout)[0]
