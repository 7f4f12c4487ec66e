"""Order-driven prefetch: ask the kernel for the pages the next batches will read.

The epoch order is known before the epoch starts, so so is the 8 MiB page of
every image of every batch. A helper thread stays ``ahead`` batches in front of
the epoch thread and calls ``madvise(MADV_WILLNEED)`` on the file mapping, once
per page, the first time a page is needed in the epoch: the kernel then reads
the whole page asynchronously, in large requests, instead of the decoder
faulting it in 4 KiB at a time in shuffled order.

``MADV_WILLNEED`` only starts reads into the page cache: no copy, no private
memory (the pages are file-backed and shared by the ranks of a node), and the
bytes the decoders see are the file's either way. Measured against
``MADV_POPULATE_READ``, ``posix_fadvise`` and ``pread`` from the same thread,
it was the fastest cold (see ``bench/tables/cold.py``).

Pages requested but not yet used are capped (``max_in_flight``), so a ``random``
order, whose first batches touch every page, does not ask for the whole file at
once (which, for a file larger than RAM, would evict pages before their use).

A ``random`` order over a file that does not fit in the page cache asks for the
bytes of each image instead (:func:`prefetch_mode`, :class:`SamplePrefetcher`),
and turns the kernel's fault readahead off for the mapping (``MADV_RANDOM``):
its samples are spread over every page, so a page read whole for one sample is
evicted before most of its other samples are used. Measured on a 30.6 GiB file
with 23.5 GiB of RAM, 4 ranks, whole-page prefetch read from storage at
1.2-1.3 GB/s for over 10 minutes (about 0.8 TB, 24 times the file) without
finishing one epoch; with no prefetch, 8 minutes at 1.1-1.6 GB/s did not finish
one either: this VM's ``read_ahead_kb`` is 8 MiB, so each fault read 8 MiB
around it.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
from collections.abc import Sequence

import numpy as np
import psutil

from ..kernels.pages import first_use
from . import small_orders

__all__ = [
    "CHUNK",
    "MADV_RANDOM",
    "MADV_WILLNEED",
    "RANDOM_RAM_SHARE",
    "WARM_PAGES",
    "Prefetcher",
    "SamplePrefetcher",
    "madvise",
    "page_schedule",
    "prefetch_mode",
    "resident",
    "sample_schedule",
]

log = logging.getLogger(__name__)

MADV_WILLNEED = getattr(mmap, "MADV_WILLNEED", 3)
MADV_RANDOM = getattr(mmap, "MADV_RANDOM", 1)
#: Bytes per WILLNEED call (measured: an 8 MiB call read 4 MiB at read_ahead_kb=128).
CHUNK = 1 << 20
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.mincore.restype = ctypes.c_int


def madvise(address: int, length: int, advice: int) -> None:
    """libc ``madvise`` through ctypes (which releases the GIL while the kernel works).

    Raises:
        OSError: the kernel refused (errno and message included).
    """
    if _libc.madvise(address, length, advice) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"madvise({address:#x}, {length}, {advice}): {os.strerror(err)}")


def resident(address: int, length: int, out: np.ndarray) -> np.ndarray | None:
    """Which OS pages of ``[address, address + length)`` are in memory (``address``
    page-aligned): the first ``ceil(length / PAGESIZE)`` bytes of ``out`` (uint8), bit 0
    set for a resident page; ``None`` when ``mincore`` refuses. For pages mapped by this
    process it reads the page tables only, so it costs far less than a ``WILLNEED``
    over pages that are already there."""
    n = -(-length // mmap.PAGESIZE)
    if n > len(out) or _libc.mincore(address, length, out.ctypes.data) != 0:
        return None
    return out[:n]


#: An epoch whose first this many pages are all in memory prefetches no further: the file
#: is cached, and the helper's hand-offs with the epoch thread cost more than they save
#: (measured warm, 2 GiB file: 15-20% of the no-prefetch rate).
WARM_PAGES = 16

#: ``random`` orders prefetch whole pages only for a file of at most this share of RAM.
RANDOM_RAM_SHARE = 0.5


def physical_ram() -> int:
    """Bytes of RAM of this machine (as the memory budget reads it: psutil)."""
    return int(psutil.virtual_memory().total)


def prefetch_mode(order: str, file_size: int, ram: int | None = None) -> str:
    """``"samples"`` for a ``random`` order over a file larger than :data:`RANDOM_RAM_SHARE`
    of ``ram`` (default: this machine's), else ``"pages"`` (see the module doc)."""
    ram = physical_ram() if ram is None else ram
    if order == "random" and ram > 0 and file_size > RANDOM_RAM_SHARE * ram:
        return "samples"
    return "pages"


def sample_schedule(
    order: np.ndarray,
    batch_size: int,
    pointers: Sequence[np.ndarray],
    nbytes: Sequence[int | np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every image an epoch reads, in order: ``(batch, start, length)`` int64 arrays
    (``nbytes``: per field, like ``pointers``, one image's bytes, or every sample's)."""
    order = np.asarray(order, dtype=np.int64)
    fields = len(pointers)
    starts = np.empty((len(order), fields), dtype=np.int64)
    lengths = np.empty((len(order), fields), dtype=np.int64)
    for f, column in enumerate(pointers):
        starts[:, f] = np.asarray(column)[order].astype(np.int64)
        size = nbytes[f]
        lengths[:, f] = size[order] if isinstance(size, np.ndarray) else size
    batch = np.repeat(np.arange(len(order), dtype=np.int64) // batch_size, fields)
    return batch, starts.ravel(), np.ascontiguousarray(lengths).ravel()


def page_schedule(
    order: np.ndarray, batch_size: int, pointers: Sequence[np.ndarray], page_shift: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every page an epoch touches, in order of first use.

    Args:
        order: Sample ids in the order the epoch reads them.
        batch_size: Samples per batch.
        pointers: One column of byte offsets per image field (indexed by sample id).
        page_shift: ``log2`` of the page size.

    Returns:
        ``(first_batch, page)``: int64 arrays sorted by ``first_batch``, the batch
        that first reads each page.
    """
    order = np.asarray(order, dtype=np.int64)
    columns = [np.asarray(p).astype(np.uint64, copy=False) for p in pointers]
    if len(order) == 0 or not columns:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    # First use of each page, as a position in (sample, field) order.
    top = max(int(c.max(initial=0)) for c in columns) >> page_shift
    never = np.iinfo(np.int64).max
    first = np.full(top + 1, never, dtype=np.int64)
    for f, column in enumerate(columns):
        args = (order, column, np.uint64(page_shift), len(columns), f, first)
        small_orders.twin_or_kernel(small_orders.first_use, first_use, len(order), *args)
    pages = np.flatnonzero(first != never)
    first_batch = first[pages] // len(columns) // batch_size
    by_use = np.argsort(first_batch, kind="stable")
    return first_batch[by_use], pages[by_use].astype(np.int64)


class Prefetcher(threading.Thread):
    """Requests each page of an epoch ``ahead`` batches before the batch that reads it.

    The epoch thread calls :meth:`advance` with the batch it is about to build;
    that returns once every page of that batch has been requested (at once, in
    normal running: the helper is ``ahead`` batches in front). :meth:`stop`
    ends the thread (epoch over or abandoned, loader closed) and joins it.
    A failing ``madvise`` (an unsupported platform) switches prefetch off for
    the epoch with a warning; it never fails the loader.

    Args:
        address: Start of the file mapping (page-aligned).
        size: Bytes mapped.
        page_size: The file's page size (bytes).
        schedule: ``(first_batch, page)`` from :func:`page_schedule`.
        ahead: Batches to stay ahead of the consumer (at least 1).
        max_in_flight: Most pages requested before any batch has used them.
    """

    def __init__(
        self,
        address: int,
        size: int,
        page_size: int,
        schedule: tuple[np.ndarray, np.ndarray],
        ahead: int,
        max_in_flight: int,
    ):
        super().__init__(name="ffcv-pairs-prefetch", daemon=True)
        if ahead < 1:
            raise ValueError(f"ahead must be at least 1, got {ahead}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.address, self.size, self.page_size = address, size, page_size
        self.first_batch, self.pages = schedule
        # Entries due by each batch: a lookup per batch (a searchsorted per batch held the
        # epoch thread's GIL about as long as a kernel call takes).
        last = int(self.first_batch[-1]) + 1 if len(self.first_batch) else 0
        self._need = np.searchsorted(self.first_batch, np.arange(last), side="right")
        self.ahead, self.max_in_flight = ahead, max_in_flight
        self.skipped = 0  # CHUNK pieces found resident (no WILLNEED sent)
        self.sent = 0  # WILLNEED calls made
        self.warm_pages = 0  # pages found wholly in memory
        self._vec = np.empty(page_size // mmap.PAGESIZE + 2, dtype=np.uint8)  # mincore's
        self.requested = 0  # schedule entries issued so far
        self.current = 0  # the batch the consumer is building
        self.stopped = False
        self.error: OSError | None = None
        self._cond = threading.Condition()

    # -- consumer side -----------------------------------------------------------------
    def advance(self, batch: int) -> None:
        """The epoch thread is about to build ``batch``: wait until its pages are requested."""
        if self.stopped:  # done, failed or found the file cached: nothing to wait for
            return
        need = self._due_by(batch)
        with self._cond:
            self.current = max(self.current, batch)
            self._cond.notify_all()
            while self.requested < need and not self.stopped:
                self._cond.wait()

    def _due_by(self, batch: int) -> int:
        """Schedule entries whose first batch is at most ``batch``."""
        if batch < 0:
            return 0
        return int(self._need[batch]) if batch < len(self._need) else len(self.first_batch)

    def stop(self) -> None:
        """End the thread (idempotent) and wait for it."""
        with self._cond:
            self.stopped = True
            self._cond.notify_all()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()

    # -- helper side -------------------------------------------------------------------
    def _due(self) -> int:
        """Schedule entries that may be requested now (under the lock)."""
        due = self._due_by(self.current + self.ahead)
        return min(due, self._due_by(self.current) + self.max_in_flight)

    def _request(self, page: int) -> None:
        """Ask for the whole page, in ``CHUNK`` pieces: the kernel reads at most
        ``max(read_ahead_kb, max_sectors_kb)`` per WILLNEED call (128 KiB on many
        systems), so one 8 MiB call would leave most of the page to faults.

        Pieces whose OS pages are all resident are skipped: a ``WILLNEED`` walks the
        page cache even when there is nothing to read: on a warm cache, about 5% of the
        loader's CPU time in a profile at 224x224."""
        offset = page * self.page_size
        end = self.address + offset + min(self.page_size, self.size - offset)
        start = (self.address + offset) & ~(mmap.PAGESIZE - 1)  # the OS page under it
        there = resident(start, end - start, self._vec)
        pieces = range(start, end, CHUNK)
        done: list[bool] = [False] * len(pieces)
        if there is not None:
            per = CHUNK // mmap.PAGESIZE
            full = np.ones(len(pieces) * per, dtype=np.uint8)  # past the end: "resident"
            full[: len(there)] = there & 1
            whole = np.asarray(full.reshape(len(pieces), per).all(axis=1))
            done = [bool(b) for b in whole]
        self.skipped += sum(done)
        self.warm_pages += all(done)
        for at, skip in zip(pieces, done):
            if not skip:
                madvise(at, min(CHUNK, end - at), MADV_WILLNEED)
                self.sent += 1

    def _cached(self) -> bool:
        """The epoch's first :data:`WARM_PAGES` pages (or all, if fewer) were in memory."""
        return self.sent == 0 and self.warm_pages >= min(len(self.pages), WARM_PAGES)

    def _request_entry(self, i: int) -> None:
        self._request(int(self.pages[i]))

    def run(self) -> None:
        n = len(self.pages)
        try:
            while True:
                with self._cond:
                    while not self.stopped and self.requested >= self._due():
                        if self.requested >= n:
                            return
                        self._cond.wait()
                    if self.stopped:
                        return
                    start, end = self.requested, self._due()
                for i in range(start, end):  # outside the lock: the kernel may block
                    self._request_entry(i)
                if self._cached():
                    return  # stopped (finally): advance() returns at once from now on
                with self._cond:
                    self.requested = end
                    self._cond.notify_all()
        except OSError as e:
            log.warning("prefetch disabled for this epoch: %s", e)
            self.error = e
        finally:
            with self._cond:
                self.stopped = True
                self._cond.notify_all()


class SamplePrefetcher(Prefetcher):
    """A :class:`Prefetcher` over the byte ranges of single images (``schedule``:
    ``(batch, start, length)`` from :func:`sample_schedule`); ``max_in_flight`` counts
    images. It first turns fault readahead off for the mapping (``MADV_RANDOM``)."""

    def __init__(
        self,
        address: int,
        size: int,
        schedule: tuple[np.ndarray, np.ndarray, np.ndarray],
        ahead: int,
        max_in_flight: int,
    ):
        batch, starts, self.lengths = schedule
        super().__init__(address, size, 1, (batch, starts), ahead, max_in_flight)

    def _request_entry(self, i: int) -> None:
        at = self.address + int(self.pages[i])
        start = at & ~(mmap.PAGESIZE - 1)  # the OS page under it
        madvise(start, at + int(self.lengths[i]) - start, MADV_WILLNEED)

    def run(self) -> None:
        try:
            madvise(self.address, self.size, MADV_RANDOM)
        except OSError as e:
            log.warning("MADV_RANDOM refused (fault readahead stays on): %s", e)
        super().run()
