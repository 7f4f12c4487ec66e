"""What the writer's workers do: fill data pages, write them at their final offsets and
digest them.

A task is one of (see :mod:`~ffcv_pairs.write.plan`):

* ``("pages", p0, p1)``, *gather*: for each data page, read the samples that land
  on it (in source order, or ``Permutation.source_of`` when shuffled), assemble
  the page, ``pwrite`` it with its metadata rows and return its CRC32 and SHA-256.
* ``("files", k0, k1)``, *scatter*, for batched sources: load batch files
  ``k0 .. k1-1`` one at a time, each once, and write each sample where it lands.
  Pages that lie wholly inside the range are written and digested whole; the
  pages at either end, shared with the neighbouring range, get only this range's
  slots, and the writer digests them once every range touching them is done.

Both also write each sample's image statistics (:mod:`~ffcv_pairs.format.stats`) to
``OUT.stats.partial``, at the sample's position, when the job has any.

The job (source, layout, converter) is inherited through ``fork``, never pickled.
Workers record each step on the job's :class:`~ffcv_pairs.write.activity.Board`, so
that one making no progress is named for what it is doing.
"""

from __future__ import annotations

import collections
import errno
import mmap
import os
import sys
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .._fileio import pwrite_all
from ..format.layout import BetonLayout
from ..format.schema import PairSchema
from ..format.sidecar import block_digest
from ..format.stats import RECORD_SHAPE, field_stats_kinds, record_offset
from ..kernels.bytesums import STATS_FIRST, STATS_LAST, STATS_TOTAL, image_stats
from .activity import Board, Step
from .batched import BatchedSource
from .convert import Converter
from .shuffle import Permutation
from .sources import PairSource, int64_labels
from .testhook import hook
from .values import fill_values, scalar_record, split_item

__all__ = [
    "Job",
    "TaskResult",
    "run_task",
    "set_job",
    "stats_kinds",
    "worker_init",
    "worker_torch_threads",
]

_STATS_KINDS: dict[str | None, int] = {
    "first": STATS_FIRST,
    "last": STATS_LAST,
    "total": STATS_TOTAL,
}


def stats_kinds(schema: PairSchema) -> tuple[int, int]:
    """How each field's image statistics are summed (``STATS_*``; -1: none, not uint8)."""
    a, b = (_STATS_KINDS.get(kind, -1) for kind in field_stats_kinds(schema).values())
    return a, b


@dataclass
class Job:
    """What a worker process needs; ``inherited_fds`` are the parent's, closed in workers.

    ``stats``: the image-statistics file to fill (None: none); ``stats_kinds``: how each
    field's sums are taken (``STATS_*`` of :mod:`~ffcv_pairs.kernels.bytesums`; -1: none).
    ``board``: where workers record what they are doing (None: nowhere).
    """

    source: PairSource
    layout: BetonLayout
    converter: Converter
    partial: Path
    order: Permutation | None
    parent: int = field(default_factory=os.getpid)
    inherited_fds: tuple[int, ...] = ()
    stats: Path | None = None
    stats_kinds: tuple[int, int] = (-1, -1)
    board: Board | None = None

    def doing(self, step: Step, number: int = 0) -> None:
        """Record this worker's step on the board."""
        if self.board is not None:
            self.board.doing(step, number)


class TaskResult(NamedTuple):
    """What a task did: samples written, ``(page, crc32, sha256)`` of each page it
    wrote whole, and ``(fast, torch.load)`` ``.pt`` reads."""

    samples: int
    pages: list[tuple[int, int, bytes]]
    reads: tuple[int, int]


_JOB: Job | None = None
_FD: int | None = None
_DIRECT: int | None = None  # an O_DIRECT descriptor for whole pages, when the file system has it
_STATS: int | None = None  # the image-statistics file, when the job has one
_PAGES: list[np.ndarray] | None = None  # two page buffers: one gathered, one written


def set_job(job: Job | None) -> None:
    """Install the job before the workers fork (or run tasks in-process); None clears it."""
    global _JOB, _FD, _DIRECT, _STATS, _PAGES
    for fd in (_FD, _DIRECT, _STATS):
        if fd is not None:
            os.close(fd)
    _JOB, _FD, _DIRECT, _STATS, _PAGES = job, None, None, None, None


def _open_direct(path: Path) -> int | None:
    """``path`` opened for ``O_DIRECT`` writes, or None where that is not offered (tmpfs).

    Whole pages go to storage without passing through the page cache: on a VM, filling
    fresh page-cache pages runs at a fifth of the speed (measured: 0.45 vs 2.1 GB/s), and
    at the user's scale a buffered writer would evict every other cached file. Small
    writes (metadata rows, the parts of shared pages) stay buffered; Linux keeps the two
    coherent, and they never share a 4 KiB block (pages are page-aligned).
    """
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | flag)
    except OSError:
        return None


def _write_page(fd: int, buf: np.ndarray, offset: int) -> None:
    """A whole page at ``offset``: through the ``O_DIRECT`` descriptor when there is one."""
    global _DIRECT
    if _DIRECT is not None:
        try:
            pwrite_all(_DIRECT, buf, offset)
            return
        except OSError as e:
            if e.errno != errno.EINVAL:  # EINVAL: the file system refuses direct writes
                raise
            os.close(_DIRECT)
            _DIRECT = None
    pwrite_all(fd, buf, offset)


def _aligned_page(size: int) -> np.ndarray:
    """A zeroed page buffer aligned to the memory page, as ``O_DIRECT`` needs."""
    return np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8)


def worker_torch_threads() -> None:
    """In a fresh worker: torch, when loaded, on one thread."""
    torch = sys.modules.get("torch")
    if torch is not None:
        # The worker inherits the OpenMP runtime's bookkeeping of its thread team but not
        # the threads: the first multithreaded op (e.g. ``(t * 255).round()`` on an image
        # of over 32k values) would wait forever for them, when the parent has run one (it
        # reads sample 0 itself). One thread per worker also keeps N workers from running
        # N x cores threads. PyTorch's DataLoader does the same in its workers.
        torch.set_num_threads(1)


def worker_init() -> None:
    """In a fresh worker: torch on one thread, the parent's file descriptors closed, a row
    of the activity board taken. Runs before any task, so before the source's code."""
    worker_torch_threads()
    job = _JOB
    if job is not None:
        for fd in job.inherited_fds:
            os.close(fd)
        if job.board is not None:
            job.board.claim()


def _gather(job: Job, page: int, buf: np.ndarray) -> np.ndarray:
    """Assemble data page ``page`` into ``buf``; returns the labels of its samples."""
    layout, conv, src = job.layout, job.converter, job.source
    schema = layout.schema
    start, stop = layout.page_samples(page)
    k, na, sb = stop - start, schema.a.nbytes, schema.slot_bytes
    slots = buf[: k * sb].reshape(k, sb)
    a_name, b_name = schema.IMAGE_FIELDS
    job.doing(Step.PAGE_SAMPLES, page)
    if not schema.plain:
        positions = np.arange(start, stop)
        read = positions if job.order is None else job.order.source_of(positions)
        values = scalar_record(schema, k)
        for j, i in enumerate(read.tolist()):
            job.doing(Step.SAMPLE, i)
            _sample_into(job, i, src.read(i), slots[j], values[j : j + 1])
        buf[k * sb :] = 0
        return values
    block = src.read_arrays(start, stop) if job.order is None else None
    if block is not None:
        a = conv.image(block[0], f"{src.describe()}.{a_name}[{start}:{stop}]")
        b = conv.image(block[1], f"{src.describe()}.{b_name}[{start}:{stop}]")
        conv.check(a, schema.a, f"{src.describe()}.{a_name}", batched=True)
        conv.check(b, schema.b, f"{src.describe()}.{b_name}", batched=True)
        slots[:, :na] = a.reshape(k, -1).view(np.uint8)
        slots[:, na:] = b.reshape(k, -1).view(np.uint8)
        labels = int64_labels(block[2], f"{src.describe()}.{PairSchema.LABEL_FIELD}", start)
    else:
        ids = (
            range(start, stop)
            if job.order is None
            else job.order.source_of(np.arange(start, stop)).tolist()
        )
        labels = np.empty(k, dtype=np.int64)
        fast = src.read_block(ids, (slots[:, :na], slots[:, na:]), (schema.a, schema.b))
        todo: Iterable[int] = range(k)
        if fast is not None:
            labels[:] = fast[0]
            todo = np.flatnonzero(~fast[1]).tolist()
        for j in todo:
            i = ids[j]
            job.doing(Step.SAMPLE, i)
            a, b, label = src.read(i)
            slots[j, :na] = conv.sample_bytes(a, schema.a, src, i, a_name)
            slots[j, na:] = conv.sample_bytes(b, schema.b, src, i, b_name)
            labels[j] = conv.label(label, src, i)
    buf[k * sb :] = 0
    return labels


def _sample_into(job: Job, i: int, item: tuple, slot: np.ndarray, record: np.ndarray) -> None:
    """Sample ``i`` (a source item) into its ``slot`` and (scalars) ``record``."""
    schema, conv, src = job.layout.schema, job.converter, job.source
    a, b, label, extras = split_item(item, src.where(i, "item"))
    na, nb = schema.a.nbytes, schema.b.nbytes
    a_name, b_name = schema.IMAGE_FIELDS
    slot[:na] = conv.sample_bytes(a, schema.a, src, i, a_name)
    slot[na : na + nb] = conv.sample_bytes(b, schema.b, src, i, b_name)
    fill_values(schema, (label, extras), slot, record, lambda name: src.where(i, name))


def _write_stats(job: Job, block: np.ndarray, first: int) -> None:
    """The statistics records of the samples in ``block`` (``(k, sample bytes)``), which
    sit at positions ``first ..`` of the file."""
    if _STATS is None:
        return
    na, nb = job.layout.schema.a.nbytes, job.layout.schema.b.nbytes
    rows = np.zeros((len(block), *RECORD_SHAPE), dtype="<u4")
    for t, part in enumerate((block[:, :na], block[:, na : na + nb])):
        if job.stats_kinds[t] >= 0:
            image_stats(part, job.stats_kinds[t], rows[:, t])
    pwrite_all(_STATS, rows, record_offset(first))


def _write_pages(job: Job, fd: int, bufs: list[np.ndarray], p0: int, p1: int) -> TaskResult:
    """Pages ``p0 .. p1-1``, gathered and digested here while a helper thread writes the
    page before from the other buffer: an ``O_DIRECT`` write leaves the core idle until
    it lands (a quarter of a worker's time), and ``pwrite`` releases the GIL."""
    layout = job.layout
    sb = layout.schema.slot_bytes
    done: list[tuple[int, int, bytes]] = []
    samples = 0
    writes: collections.deque[tuple[int, Future[None]]] = collections.deque()
    with ThreadPoolExecutor(1, thread_name_prefix="ffcv-pairs-write") as writer:
        for n, page in enumerate(range(p0, p1)):
            hook("page", page)
            if len(writes) == len(bufs):  # the oldest page's buffer is needed again
                _written(job, *writes.popleft())
            buf = bufs[n % len(bufs)]
            labels = _gather(job, page, buf)
            job.doing(Step.WRITE, page)
            start, _ = layout.page_samples(page)
            _write_stats(job, buf[: len(labels) * sb].reshape(len(labels), sb), start)
            at = layout.data_start + page * layout.page_size
            writes.append((page, writer.submit(_write_page, fd, buf, at)))
            rows = layout.metadata_rows(start, labels)
            pwrite_all(fd, rows, layout.metadata_start + start * rows.itemsize)
            d = block_digest(buf.data)
            done.append((page, d.crc32, d.sha256))
            samples += len(labels)
        for page, w in writes:
            _written(job, page, w)
    return TaskResult(samples, done, (0, 0))


def _written(job: Job, page: int, write: Future[None]) -> None:
    """Wait for the helper thread's write of ``page``."""
    job.doing(Step.WRITE, page)
    write.result()


def _scatter(job: Job, fd: int, buf: np.ndarray, k0: int, k1: int) -> TaskResult:
    """Write batch files ``k0 .. k1-1`` (each loaded once) where their samples land."""
    src, layout, conv = job.source, job.layout, job.converter
    assert isinstance(src, BatchedSource), "scatter tasks need a batched source"
    schema, spp = layout.schema, layout.samples_per_page
    na, sb = schema.a.nbytes, schema.slot_bytes
    a_name, b_name = schema.IMAGE_FIELDS
    n = layout.num_samples  # less than the source's length under --limit
    s0, s1 = int(src.offsets[k0]), min(n, int(src.offsets[k1]))
    labels = np.empty(spp, dtype=np.int64) if schema.plain else scalar_record(schema, spp)
    done: list[tuple[int, int, bytes]] = []

    def flush(page: int, lo: int, hi: int) -> None:
        job.doing(Step.WRITE, page)
        start, stop = layout.page_samples(page)
        at = layout.data_start + page * layout.page_size
        if job.order is None and start >= s0 and stop <= s1:  # ours alone: write, digest
            buf[(stop - start) * sb :] = 0
            _write_page(fd, buf, at)
            d = block_digest(buf.data)
            done.append((page, d.crc32, d.sha256))
        else:
            pwrite_all(fd, buf[lo * sb : hi * sb], at + lo * sb)
        rows = layout.metadata_rows(start + lo, labels[lo:hi])
        pwrite_all(fd, rows, layout.metadata_start + (start + lo) * rows.itemsize)
        _write_stats(job, buf[lo * sb : hi * sb].reshape(hi - lo, sb), start + lo)

    page, lo, hi = -1, 0, 0
    for k in range(k0, k1):
        job.doing(Step.BATCH_FILE, k)
        data = src.read_file(k)
        base = int(src.offsets[k])
        count = min(len(data), n - base)
        dest = None if job.order is None else job.order.position_of(np.arange(base, base + count))
        for j in range(count):
            i = base + j
            item = src.item(data, k, j)
            d = i if dest is None else int(dest[j])
            p, slot = divmod(d, spp)
            if p != page or dest is not None:
                if page >= 0:
                    flush(page, lo, hi)
                page, lo = p, slot
            hi = slot + 1
            if not schema.plain:
                _sample_into(job, i, item, buf[slot * sb : hi * sb], labels[slot:hi])
                continue
            a, b, label = item
            buf[slot * sb : slot * sb + na] = conv.sample_bytes(a, schema.a, src, i, a_name)
            buf[slot * sb + na : (slot + 1) * sb] = conv.sample_bytes(b, schema.b, src, i, b_name)
            labels[slot] = conv.label(label, src, i)
            hi = slot + 1
        del data
    if page >= 0:
        flush(page, lo, hi)
    return TaskResult(s1 - s0, done, (0, 0))


def run_task(task: tuple[str, int, int]) -> TaskResult:
    """Run one task of the installed job (in a worker, or in-process)."""
    global _FD, _DIRECT, _STATS, _PAGES
    job = _JOB
    assert job is not None, "no job installed"
    if _FD is None:
        _FD = os.open(job.partial, os.O_WRONLY)
        _DIRECT = _open_direct(job.partial)
        _STATS = None if job.stats is None else os.open(job.stats, os.O_WRONLY)
    if _PAGES is None:
        _PAGES = [_aligned_page(job.layout.page_size) for _ in range(2)]
    kind, lo, hi = task
    before = job.source.read_stats()
    try:
        if kind == "pages":
            result = _write_pages(job, _FD, _PAGES, lo, hi)
        else:
            assert isinstance(job.source, BatchedSource)
            hook("page", int(job.source.offsets[lo]) // job.layout.samples_per_page)
            result = _scatter(job, _FD, _PAGES[0], lo, hi)
    finally:
        job.doing(Step.IDLE)
    after = job.source.read_stats()
    return result._replace(reads=(after[0] - before[0], after[1] - before[1]))
