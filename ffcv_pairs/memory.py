"""Index structures over the file, built with numpy instead of per-sample Python objects.

Upstream's ``MemoryManager.__init__`` builds ``dict``\\ s of ``set``\\ s over the
whole allocation table in every rank: 8-14 s and 3-6 GB at 3M samples. Here:

* :class:`PageIndex` is the page -> samples map in CSR form (two int64 arrays),
  from one vectorised pass over the memory-mapped metadata.
* :class:`PairOSCacheManager` is upstream's ``OSCacheManager`` without that
  ``__init__``: with fixed-size fields the decoders read through the metadata
  pointers, so only the file mapping is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ffcv.memory_managers import OSCacheManager, ProcessCacheManager
from ffcv.memory_managers.os_cache import OSCacheContext

from .reader import PairReader
from .schema import PairSchema

__all__ = ["PageIndex", "PairOSCacheManager", "PairProcessCacheManager", "SamplePages"]


@dataclass(frozen=True)
class PageIndex:
    """Which samples live on which page, for a subset of sample ids (CSR).

    Attributes:
        pages: Page numbers that hold at least one selected sample, ascending.
        starts: ``samples[starts[k]:starts[k+1]]`` are the samples on ``pages[k]``.
        samples: Selected sample ids grouped by page (ascending within a page).
    """

    pages: np.ndarray
    starts: np.ndarray
    samples: np.ndarray

    @classmethod
    def build(cls, reader: PairReader, indices: np.ndarray | None = None) -> PageIndex:
        ptrs = reader.image_pointers(PairSchema.IMAGE_FIELDS[0])
        shift = reader.page_shift
        if indices is None:
            samples = np.arange(reader.num_samples, dtype=np.int64)
            page_of = np.asarray(ptrs) >> shift
        else:
            samples = np.unique(np.asarray(indices, dtype=np.int64))
            page_of = np.asarray(ptrs[samples]) >> shift
        if len(page_of) > 1 and np.any(page_of[1:] < page_of[:-1]):
            # Files from upstream's multi-process writer are not in page order.
            by_page = np.argsort(page_of, kind="stable")
            samples, page_of = samples[by_page], page_of[by_page]
        if len(page_of):
            first = np.flatnonzero(np.diff(page_of, prepend=page_of[0] - np.uint64(1)))
        else:
            first = np.zeros(0, dtype=np.int64)
        pages = page_of[first].astype(np.int64)
        starts = np.append(first, len(samples)).astype(np.int64)
        return cls(pages=pages, starts=starts, samples=samples)

    @property
    def num_pages(self) -> int:
        return len(self.pages)

    @property
    def num_samples(self) -> int:
        return len(self.samples)

    def counts(self) -> np.ndarray:
        return np.diff(self.starts)

    def page_lookup(self, reader: PairReader, ids: np.ndarray) -> np.ndarray:
        """Page number of each sample id in ``ids``."""
        ptrs = reader.image_pointers(PairSchema.IMAGE_FIELDS[0])
        return (np.asarray(ptrs[np.asarray(ids)]) >> reader.page_shift).astype(np.int64)


class _ByPointer:
    """What both managers share: only the file is needed, not the allocation table.

    This project's decoders read each image through its metadata pointer (a
    fixed size per field), so the allocation table and upstream's
    ``searchsorted`` reader are never used, never sorted and never touched.
    Upstream's ``MemoryManager.__init__``, which builds the per-sample dicts,
    is deliberately not called.
    """

    reader: PairReader

    def _attach(self, reader: PairReader) -> None:
        self.reader = reader
        self.ptrs = self.sizes = np.zeros(0, dtype=np.uint64)

    def compile_reader(self):
        raise NotImplementedError(
            f"{type(self).__name__} has no allocation-table reader; use ffcv_pairs decoders"
        )


class PairOSCacheManager(_ByPointer, OSCacheManager):
    """Upstream's OS-cache memory manager: one shared mapping of the file."""

    def __init__(self, reader: PairReader):
        self._attach(reader)
        self.context = OSCacheContext(self)


class SamplePages:
    """``sample_id -> pages`` computed on demand from the mapped pointers.

    Upstream's ``ProcessCacheContext`` asks ``manager.sample_to_pages[sample]`` for
    every sample of an epoch; this answers from two pointer columns instead of a
    dict of sets built for all samples at start-up.
    """

    def __init__(self, reader: PairReader):
        self.shift = reader.page_shift
        self.ptrs = [reader.image_pointers(name) for name in PairSchema.IMAGE_FIELDS]

    def __getitem__(self, sample_id: int) -> set[int]:
        return {int(p[sample_id] >> self.shift) for p in self.ptrs}


class PairProcessCacheManager(_ByPointer, ProcessCacheManager):
    """Upstream's process cache (``os_cache=False``): pages are read into private
    buffers ahead of the batches that need them, by reader threads.

    Planning each epoch's page schedule is still upstream's Python loop over the
    epoch's samples (about a microsecond a sample). Every rank holds its own copy
    of the pages it has in flight, so prefer the default OS cache when ranks
    share a node.
    """

    def __init__(self, reader: PairReader):
        self._attach(reader)
        self.sample_to_pages = SamplePages(reader)
