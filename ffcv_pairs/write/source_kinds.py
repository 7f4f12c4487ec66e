"""Open the ``.pt`` files of one or several splits: one directory scan, either kind of
source (per-sample or batched files), chosen by the ``kind`` keyword or found.

Example:
    >>> from ffcv_pairs.write.source_kinds import open_sources
    >>> train, val = open_sources("data/pt", ["train", "val"])
"""

from __future__ import annotations

import os
import warnings
from typing import Literal

from .batched import BatchedSource
from .discover import SplitFiles, scan
from .persample import PerSampleSource
from .sources import PairSource, SourceError

__all__ = ["SOURCE_KINDS", "SourceKind", "open_source", "open_sources", "renamed_kind"]

#: What the ``kind`` keyword (and ``--source-kind``) accepts: the kind of source, or ``auto``.
SourceKind = Literal["auto", "per-sample", "batched"]
SOURCE_KINDS: tuple[str, ...] = ("auto", "per-sample", "batched")


def _pick(files: SplitFiles, kind: str) -> str:
    if kind not in SOURCE_KINDS:
        raise SourceError(f"unknown source kind {kind!r}; must be one of {', '.join(SOURCE_KINDS)}")
    if kind != "auto":
        return kind
    found = files.source_kinds
    if len(found) == 2:
        raise SourceError(
            f"{files.root}: both per-sample and batched files exist for split {files.split!r}; "
            f"pass --source-kind per-sample or --source-kind batched"
        )
    if not found:
        s = files.split
        raise SourceError(
            f"{files.root}: no files for split {s!r} of a known kind (expected {s}_A_images_0.pt"
            f" ... for per-sample, or {s}_batch_0.pt ... for batched)"
        )
    return found[0]


def renamed_kind(
    kind: SourceKind, layout: SourceKind | None, old: str = "layout=", new: str = "kind="
) -> SourceKind:
    """``kind``, or the value given under its old name ``layout`` (with a FutureWarning that
    ``old`` is now ``new``)."""
    if layout is None:
        return kind
    warnings.warn(f"{old} is now {new} (the old name will go)", FutureWarning, stacklevel=3)
    return layout


def open_sources(
    root: str | os.PathLike[str],
    splits: list[str] | tuple[str, ...],
    kind: SourceKind = "auto",
    *,
    layout: SourceKind | None = None,
) -> list[PairSource]:
    """The sources of ``splits`` under ``root``, in order, from one directory scan.

    Args:
        kind: ``"per-sample"``, ``"batched"``, or ``"auto"`` (whichever files exist).
        layout: The old name of ``kind`` (warns).

    Raises:
        SourceError: the directory is missing, a split has no files, files are
            missing or out of range, or the kind is unknown or ambiguous.
    """
    kind = renamed_kind(kind, layout)
    found = scan(root, list(splits))
    sources: list[PairSource] = []
    for split in splits:
        files = found[split]
        if _pick(files, kind) == "per-sample":
            sources.append(PerSampleSource(root, split, files=files))
        else:
            sources.append(BatchedSource(root, split, files=files))
    return sources


def open_source(
    root: str | os.PathLike[str],
    split: str,
    kind: SourceKind = "auto",
    *,
    layout: SourceKind | None = None,
) -> PairSource:
    """The source of one split: :func:`open_sources` for a single split."""
    return open_sources(root, [split], renamed_kind(kind, layout))[0]
