"""Memory managers over the file, without upstream's per-sample ``__init__``.

* :class:`PairOSCacheManager` is upstream's ``OSCacheManager`` without that
  ``__init__``: with fixed-size fields the decoders read through the metadata
  pointers, so only the file mapping is needed. A remote dataset's shards are
  mapped batch by batch (:class:`~.residency.ResidentContext`).
"""

from __future__ import annotations

import numpy as np
from ffcv.memory_managers import OSCacheManager, ProcessCacheManager
from ffcv.memory_managers.os_cache import OSCacheContext

from ..format.joined import DatasetReader, JoinedReader
from ..format.schema import PairSchema
from .joined_mapping import map_joined
from .remote_dataset import RemoteReader
from .residency import ResidentContext

__all__ = ["PairOSCacheManager", "PairProcessCacheManager", "SamplePages"]


class _PointerManager:
    """What both managers share: only the file is needed, not the allocation table.

    This project's decoders read each image through its metadata pointer (a
    fixed size per field), so the allocation table and upstream's
    ``searchsorted`` reader are never used, never sorted and never touched.
    Upstream's ``MemoryManager.__init__``, which builds the per-sample dicts,
    is deliberately not called.
    """

    reader: DatasetReader

    def _attach(self, reader: DatasetReader) -> None:
        self.reader = reader
        self.ptrs = self.sizes = np.zeros(0, dtype=np.uint64)

    def compile_reader(self):
        raise NotImplementedError(
            f"{type(self).__name__} has no allocation-table reader; use ffcv_pairs decoders"
        )


class PairOSCacheManager(_PointerManager, OSCacheManager):
    """Upstream's OS-cache memory manager: one shared mapping of the file, or of a
    dataset's shards laid end to end (:mod:`.joined_mapping`)."""

    def __init__(self, reader: DatasetReader):
        self._attach(reader)
        self.context = OSCacheContext(self)
        if isinstance(reader, RemoteReader):  # shards mapped while batches read them
            self.context = ResidentContext(self, reader)
        elif isinstance(reader, JoinedReader):  # upstream's context maps one file itself
            self.context.mmap = map_joined(reader.files, reader.bases.tolist(), reader.file_size)

    def schedule_epoch(self, schedule):
        if isinstance(self.context, ResidentContext):
            self.context.schedule(schedule)
        return self.context


class SamplePages:
    """``sample_id -> pages`` computed on demand from the mapped pointers.

    Upstream's ``ProcessCacheContext`` asks ``manager.sample_to_pages[sample]`` for
    every sample of an epoch; this answers from two pointer columns instead of a
    dict of sets built for all samples at start-up.
    """

    def __init__(self, reader: DatasetReader):
        self.shift = reader.page_shift
        self.ptrs = [reader.image_pointers(name) for name in PairSchema.IMAGE_FIELDS]

    def __getitem__(self, sample_id: int) -> set[int]:
        return {int(p[sample_id] >> self.shift) for p in self.ptrs}


class PairProcessCacheManager(_PointerManager, ProcessCacheManager):
    """Upstream's process cache (``os_cache=False``): pages are read into private
    buffers ahead of the batches that need them, by reader threads.

    Computing each epoch's page schedule is still upstream's Python loop over the
    epoch's samples (about a microsecond a sample). Every rank holds its own copy
    of the pages it has in flight, so prefer the default OS cache when ranks
    share a node.
    """

    def __init__(self, reader: DatasetReader):
        if isinstance(reader, JoinedReader):
            raise ValueError(
                f"{reader.path}: os_cache=False reads one file through upstream's page "
                f"readers; a dataset of {len(reader.shards)} shards is read through the OS "
                f"cache (os_cache=True, the default)"
            )
        self._attach(reader)
        self.sample_to_pages = SamplePages(reader)
