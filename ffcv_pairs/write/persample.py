"""The per-sample layout: ``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt`` and
``{split}_labels_{i}.pt`` for ``i = 0 .. N-1``, one tensor per file.

Reads go through :mod:`~ffcv_pairs.write.ptfile`: each field's sample 0 is decoded
by ``torch.load`` and becomes the template; a later file whose records match it is
read with one ``read()`` and no unpickling. Every other file (another layout, a
saved view, the legacy format, big-endian data, a label saved as a Python int, a
damaged file) goes through ``torch.load`` and today's checks, so a bad file gets
the same one-line error naming it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..format.schema import PairSchema
from .discover import PER_SAMPLE_KINDS, SplitFiles, scan
from .ptfile import PtTemplate, learn_template, read_tensor
from .sources import PairSource, load_pt

__all__ = ["PerSampleSource"]

_SAMPLED = 8  # indices whose files' sizes and mtimes go into the fingerprint


class PerSampleSource(PairSource):
    """``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt``, ``{split}_labels_{i}.pt``.

    Args:
        root: The directory.
        split: The file prefix, e.g. ``train``.
        files: What :func:`~ffcv_pairs.write.discover.scan` found (scans when None).

    Raises:
        SourceError: no files, or files missing or out of range (named).
    """

    def __init__(self, root: str | os.PathLike[str], split: str, files: SplitFiles | None = None):
        self.root = Path(root)
        self.split = split
        files = files if files is not None else scan(self.root, [split])[split]
        self.n = files.complete_count(PER_SAMPLE_KINDS, "per-sample")
        families = [files.family(k) for k in PER_SAMPLE_KINDS]
        self._prefixes = [os.path.join(self.root, f.prefix) for f in families]
        self._widths = [f.width for f in families]
        self._templates: list[PtTemplate | None] | None = None
        self._plain_loads = 0

    def path(self, kind: int, i: int) -> str:
        """The file of field ``kind`` (0: A, 1: B, 2: label) of sample ``i``."""
        return f"{self._prefixes[kind]}{str(i).zfill(self._widths[kind])}.pt"

    def _learn(self) -> list[PtTemplate | None]:
        templates: list[PtTemplate | None] = []
        for kind in range(len(PER_SAMPLE_KINDS)):
            try:
                templates.append(learn_template(self.path(kind, 0)))
            except (ValueError, OSError):  # not one tensor: torch.load and its checks decide
                templates.append(None)
        return templates

    def _read_one(self, kind: int, i: int) -> Any:
        template = self._templates[kind]  # type: ignore[index]
        path = self.path(kind, i)
        if template is None:
            self._plain_loads += 1
        else:
            try:
                return read_tensor(path, template)
            except (ValueError, OSError):  # counted; torch.load below names the problem
                pass
        return load_pt(path)

    def __len__(self) -> int:
        return self.n

    def read(self, i: int) -> tuple[Any, Any, Any]:
        if self._templates is None:
            self._templates = self._learn()
        return self._read_one(0, i), self._read_one(1, i), self._read_one(2, i)

    def read_stats(self) -> tuple[int, int]:
        live = [t for t in self._templates or [] if t is not None]
        fast = sum(t.fast_reads for t in live)
        return fast, sum(t.fallback_reads for t in live) + self._plain_loads

    def where(self, i: int, part: str) -> str:
        names = PairSchema.field_names()
        return self.path(names.index(part), i) if part in names else f"{self.path(0, i)}:{part}"

    def describe(self) -> str:
        return f"per-sample:{self.root}/{self.split}_*_{{i}}.pt"

    def fingerprint(self) -> dict[str, Any]:
        """Adds the size and mtime of the files of a few indices spread over ``0..n-1``."""
        stats = {}
        for i in np.unique(np.linspace(0, self.n - 1, _SAMPLED).astype(np.int64)).tolist():
            for kind in range(len(PER_SAMPLE_KINDS)):
                path = self.path(kind, i)
                st = os.stat(path)
                stats[os.path.basename(path)] = [st.st_size, st.st_mtime_ns]
        return super().fingerprint() | {"files": stats}
