"""The per-sample source: ``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt`` and
``{split}_labels_{i}.pt`` for ``i = 0 .. N-1``, one tensor per file.

Reads go through :mod:`~ffcv_pairs.write.ptfile`: each field's sample 0 is decoded
by ``torch.load`` and becomes the template; a later file whose records match it is
read with one ``read()`` and no unpickling. Every other file (other strides, a
saved view, the legacy format, big-endian data, a label saved as a Python int, a
damaged file) goes through ``torch.load`` and today's checks, so a bad file gets
the same one-line error naming it. Before a chunk of files is read, the kernel is asked
for all of them at once (:mod:`~ffcv_pairs.write.readahead`), so that a cold folder is
read at the storage's pace rather than at one read's latency.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..format.schema import ArraySpec, PairSchema
from .discover import PER_SAMPLE_KINDS, SplitFiles, scan
from .ptblock import ROWS, read_samples, stage_bytes, storage_rows
from .ptfile import PtTemplate, learn_template, read_tensor
from .readahead import ReadAhead
from .sources import PairSource, load_pt

__all__ = ["PerSampleSource"]

_SAMPLED = 8  # indices whose files' sizes and mtimes go into the fingerprint


class PerSampleSource(PairSource):
    """``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt``, ``{split}_labels_{i}.pt``
    (any tensor or number), and any ``{split}_{name}_{i}.pt`` (extra field ``name``).

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
        self.extras = files.extra_kinds
        kinds = (*PER_SAMPLE_KINDS, *self.extras)
        self.n = files.complete_count(kinds, "per-sample")
        families = [files.family(k) for k in kinds]
        self._prefixes = [os.path.join(self.root, f.prefix) for f in families]
        self._widths = [f.width for f in families]
        self._templates: list[PtTemplate | None] | None = None
        self._plain_loads = 0
        self._stages: dict[int, np.ndarray] = {}
        self.readahead = ReadAhead()  # FFCV_PAIRS_READAHEAD is read here; workers inherit it

    def path(self, kind: int, i: int) -> str:
        """The file of field ``kind`` (0: A, 1: B, 2: label) of sample ``i``."""
        return f"{self._prefixes[kind]}{str(i).zfill(self._widths[kind])}.pt"

    def _learn(self) -> list[PtTemplate | None]:
        templates: list[PtTemplate | None] = []
        for kind in range(len(self._prefixes)):
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

    def read(self, i: int) -> tuple[Any, ...]:
        if self._templates is None:
            self._templates = self._learn()
        a, b, label = self._read_one(0, i), self._read_one(1, i), self._read_one(2, i)
        if not self.extras:
            return a, b, label
        return a, b, label, {name: self._read_one(3 + k, i) for k, name in enumerate(self.extras)}

    def read_block(
        self, ids: Sequence[int], images: tuple[np.ndarray, np.ndarray], specs: Sequence[ArraySpec]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Samples ``ids`` at once (:mod:`~ffcv_pairs.write.ptblock`): the stored
        bytes of A and B into the rows of ``images`` (uint8 ``(len(ids), nbytes)`` each);
        returns ``(labels, done)``. A sample not ``done`` must be read by :meth:`read`.

        None when a field's files cannot go this way (their tensors need converting to
        ``specs``, or their template has no fast path).
        """
        if self._templates is None:
            self._templates = self._learn()
        templates = [t for t in self._templates if t is not None and not t.reason]
        if len(templates) != len(PER_SAMPLE_KINDS):
            return None
        if any(t.dtype != s.np_dtype or t.shape != s.shape for t, s in zip(templates, specs)):
            return None
        lab = templates[2]
        fits = lab.dtype.kind == "i" or (lab.dtype.kind == "u" and lab.dtype.itemsize < 8)
        if not fits or len(lab.shape) > 1 or lab.nbytes != lab.dtype.itemsize:
            return None  # a label is an integer scalar that int64 holds
        k = len(ids)
        labels = np.zeros((k, lab.nbytes), dtype=np.uint8)
        done = np.ones(k, dtype=bool)
        outs = (*images, labels)
        longest = max(stage_bytes(t, 1) for t in templates)  # read_samples reads no more
        for lo in range(0, k, ROWS):
            part = ids[lo : lo + ROWS]
            stages = [
                self._staging(kind, stage_bytes(t, len(part))) for kind, t in enumerate(templates)
            ]
            paths = [[self.path(kind, i) for i in part] for kind in range(len(templates))]
            self.readahead.before([p for sample in zip(*paths) for p in sample], longest)
            staged = read_samples(paths, templates, stages)
            for field, template, out in zip(staged, templates, outs):
                done[lo : lo + len(part)] &= storage_rows(field, template, out[lo : lo + len(part)])
        for template in templates:
            template.fast_reads += int(done.sum())
        return labels.view(lab.dtype).reshape(k).astype(np.int64), done

    def _staging(self, kind: int, size: int) -> np.ndarray:
        """Field ``kind``'s staging buffer, at least ``size`` bytes (kept between pages)."""
        stage = self._stages.get(kind)
        if stage is None or stage.size < size:
            stage = self._stages[kind] = np.empty(size, dtype=np.uint8)
        return stage

    def read_stats(self) -> tuple[int, int]:
        live = [t for t in self._templates or [] if t is not None]
        fast = sum(t.fast_reads for t in live)
        return fast, sum(t.fallback_reads for t in live) + self._plain_loads

    def where(self, i: int, part: str) -> str:
        names = (*PairSchema.field_names(), *self.extras)
        return self.path(names.index(part), i) if part in names else f"{self.path(0, i)}:{part}"

    def describe(self) -> str:
        return f"per-sample:{self.root}/{self.split}_*_{{i}}.pt"

    def fingerprint(self) -> dict[str, Any]:
        """Adds the size and mtime of the files of a few indices spread over ``0..n-1``."""
        stats = {}
        for i in np.unique(np.linspace(0, self.n - 1, _SAMPLED).astype(np.int64)).tolist():
            for kind in range(len(self._prefixes)):
                path = self.path(kind, i)
                st = os.stat(path)
                stats[os.path.basename(path)] = [st.st_size, st.st_mtime_ns]
        return super().fingerprint() | {"files": stats}
