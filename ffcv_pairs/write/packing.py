"""Write a `.beton` whose images are JPEGs: encode in parallel, pack in order.

A JPEG's size is known only once it is encoded, so no page has a final offset before
every sample ahead of it is encoded (the fixed-size writer, :mod:`.writer`, relies on
that). Here workers read and encode runs of samples (the CPU work) and hand back the
bytes; this process packs them in order, A then B, into pages that no sample
straddles, writes and digests each page once it is full, and journals it. After the
last page: the metadata table (from each image's pointer), the allocation table, the
header, the sidecar, the renames (:func:`~ffcv_pairs.write.finish.finish_file`).

Array labels and extra fields (fixed in size) follow each sample's B. Every page ends
with a trailer that plain FFCV never reads (it reads each field by pointer and size):
the scalar fields (the label, for most files) and the two image sizes of each of its
samples, its first sample and their count. So ``resume=True`` keeps the journaled run
of pages from the start, rebuilds their samples' pointers from the trailers and encodes
the rest. The encoder is deterministic, so the file comes out byte for byte as an
uninterrupted run.
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

import numpy as np

from .._fileio import pread_into, pwrite_all
from ..format.layout import PackedLayout
from ..format.schema import ArraySpec, PairSchema
from ..format.sidecar import block_digest
from . import tracker
from .conversion import Conversion, WriteReport
from .convert import Converter
from .encode import encode_jpeg
from .finish import finish_file, fsync_dir
from .journal import PageDigests
from .pool import run_tasks
from .shuffle import Permutation
from .sources import PairSource, SourceError
from .tasks import worker_torch_threads
from .testhook import hook
from .values import fill_values, scalar_record, split_item

__all__ = ["PackedConversion", "page_trailer_size"]

_TAIL = struct.Struct("<QI4s")  # first sample, count, magic
_MAGIC = b"FPK1"
_PER_SAMPLE = 16  # an int64 label, size of A and of B (uint32 each)
_TASK_BYTES = 4 << 20  # raw bytes of the samples one task reads and encodes
_METADATA_CHUNK = 1 << 20


def page_trailer_size(samples: int, per_sample: int = _PER_SAMPLE) -> int:
    """Bytes a page's trailer takes for ``samples`` samples of ``per_sample`` bytes each."""
    return samples * per_sample + _TAIL.size


class Encoded(NamedTuple):
    """What a worker hands back for positions ``start ..``: scalar fields (records),
    ``(k, 2)`` sizes of A and B, and each sample's stored bytes back to back (A0 B0 X0 A1
    B1 X1 ..., X: its array fields)."""

    start: int
    labels: np.ndarray
    sizes: np.ndarray
    data: bytes
    reads: tuple[int, int]


@dataclass(frozen=True)
class _EncodeJob:
    """What a worker needs, inherited through ``fork``."""

    source: PairSource
    schema: PairSchema
    converter: Converter
    order: Permutation | None
    inherited_fds: tuple[int, ...]


_JOB: _EncodeJob | None = None


def _worker_init() -> None:
    worker_torch_threads()
    if _JOB is not None:
        for fd in _JOB.inherited_fds:
            os.close(fd)


def _image(conv: Converter, value: object, spec: ArraySpec, src: PairSource, i: int, part: str):
    flat = conv.sample_bytes(value, spec, src, i, part)
    return flat.view(spec.np_dtype).reshape(spec.shape)


def _encode(task: tuple[int, int]) -> Encoded:
    """Read and encode the samples at positions ``task[0] .. task[1] - 1``."""
    job = _JOB
    assert job is not None, "no job installed"
    s0, s1 = task
    src, conv, schema = job.source, job.converter, job.schema
    specs, names = (schema.a, schema.b), PairSchema.IMAGE_FIELDS
    before = src.read_stats()
    ids = range(s0, s1) if job.order is None else job.order.source_of(np.arange(s0, s1)).tolist()
    labels = scalar_record(schema, s1 - s0)
    sizes = np.empty((s1 - s0, 2), dtype=np.uint32)
    parts: list[bytes] = []
    slot = np.zeros(schema.slot_bytes, dtype=np.uint8)
    for j, i in enumerate(ids):
        a, b, label, extras = split_item(src.read(i), src.where(i, "item"))
        for t, value in enumerate((a, b)):
            spec = specs[t]
            image = _image(conv, value, spec, src, i, names[t])
            data = (
                image.tobytes()
                if spec.jpeg is None
                else encode_jpeg(image, spec.jpeg_axes, spec.jpeg.quality).tobytes()
            )
            sizes[j, t] = len(data)
            parts.append(data)
        if schema.plain:
            labels[j] = conv.label(label, src, i)
        else:
            fill_values(schema, (label, extras), slot, labels[j : j + 1], partial(src.where, i))
            parts.append(slot[schema.sample_bytes :].tobytes())
    after = src.read_stats()
    reads = (after[0] - before[0], after[1] - before[1])
    return Encoded(s0, labels, sizes, b"".join(parts), reads)


class _Packer:
    """Packs encoded samples into pages in order and writes each page once full."""

    def __init__(self, conv: PackedConversion, fd: int, digests: PageDigests, next_sample: int):
        layout = conv.layout
        self.conv, self.fd, self.layout = conv, fd, layout
        self.page_size, self.data_start = layout.page_size, layout.data_start
        self.digests = dict(digests)
        self.pending: list[tuple[int, int, bytes]] = []
        self.page = len(digests)
        self.next = next_sample  # the next position to pack
        self.waiting: dict[int, Encoded] = {}
        self.buf = np.zeros(self.page_size, dtype=np.uint8)
        self.used, self.first, self.count = 0, next_sample, 0
        self.reads, self.samples, self.bar = [0, 0], 0, None
        self.last = time.monotonic()
        schema = layout.schema
        self.extra = schema.slot_bytes - schema.sample_bytes  # array fields, after B
        starts = schema.slot_offsets()
        self.at = [starts[name] - schema.sample_bytes for name in schema.arrays]
        self.per_sample = conv.labels.itemsize + 8

    def on_done(self, index: int, result: Encoded) -> None:
        """Take a task's result; pack every result that is next in order."""
        self.waiting[result.start] = result
        while self.next in self.waiting:
            chunk = self.waiting.pop(self.next)
            self._pack(chunk)
            self.next += len(chunk.labels)
            self.reads[0] += chunk.reads[0]
            self.reads[1] += chunk.reads[1]
            self.samples += len(chunk.labels)
            if self.bar is not None:
                self.bar.update(len(chunk.labels))
        if time.monotonic() - self.last >= tracker.JOURNAL_SECONDS:
            self.flush()

    def _pack(self, chunk: Encoded) -> None:
        layout, ps, extra, per = self.layout, self.page_size, self.extra, self.per_sample
        ends = np.cumsum(chunk.sizes.sum(axis=1, dtype=np.int64) + extra)
        data = np.frombuffer(chunk.data, dtype=np.uint8)
        arrays = [spec.nbytes for spec in layout.schema.arrays.values()]
        for j in range(len(chunk.labels)):
            i = chunk.start + j
            sa, sb = (int(x) for x in chunk.sizes[j])
            end, span = int(ends[j]), sa + sb + extra
            if span + page_trailer_size(1, per) > ps:
                raise SourceError(
                    f"{self.conv.src.describe()}: sample {i}: it takes {span} bytes "
                    f"stored, more than a page of {ps} bytes holds; use a larger --page-size"
                )
            if self.used + span + page_trailer_size(self.count + 1, per) > ps:
                self._write_page()
            at = self.data_start + self.page * ps + self.used
            self.buf[self.used : self.used + span] = data[end - span : end]
            layout.ptrs[i] = (at, at + sa, *(at + sa + sb + off for off in self.at))
            layout.sizes[i] = (sa, sb, *arrays)
            self.labels[i] = chunk.labels[j]
            self.used += span
            self.count += 1

    @property
    def labels(self) -> np.ndarray:
        return self.conv.labels

    def _write_page(self) -> None:
        """Write the page being filled, with its trailer, and digest it."""
        if self.count == 0:
            return
        hook("page", self.page)
        first, k, ps = self.first, self.count, self.page_size
        trailer = np.zeros(k * 2, dtype="<u4")
        trailer[:] = self.layout.sizes[first : first + k, :2].reshape(-1)
        tail = (
            self.labels[first : first + k].tobytes()
            + trailer.tobytes()
            + _TAIL.pack(first, k, _MAGIC)
        )
        self.buf[self.used : ps - len(tail)] = 0
        self.buf[ps - len(tail) :] = np.frombuffer(tail, dtype=np.uint8)
        pwrite_all(self.fd, self.buf, self.data_start + self.page * ps)
        d = block_digest(self.buf.data)
        self.digests[self.page] = (d.crc32, d.sha256)
        self.pending.append((self.page, d.crc32, d.sha256))
        self.page += 1
        self.used, self.first, self.count = 0, first + k, 0

    def finish(self) -> None:
        self._write_page()
        self.flush()

    def flush(self) -> None:
        self.conv.journal.commit(self.fd, self.pending)
        self.pending = []
        self.last = time.monotonic()
        hook("journal", len(self.digests))


class PackedConversion(Conversion):
    """A conversion with JPEG fields: see the module docstring."""

    layout: PackedLayout
    labels: np.ndarray

    def pages_kept(self, kept: int) -> str:
        return f"{kept} pages"

    def layout_of(self, done: PageDigests) -> PackedLayout:
        self.layout = replace(self.layout, pages=len(done))
        return self.layout

    def _kept_pages(self, fd: int, done: PageDigests) -> tuple[PageDigests, int]:
        """The journaled pages from the start on, their samples' pointers, sizes and labels
        restored from the trailers; and the first position not on them."""
        layout, ps, start = self.layout, self.layout.page_size, self.layout.data_start
        schema, record = layout.schema, self.labels.dtype
        extra = schema.slot_bytes - schema.sample_bytes
        starts = schema.slot_offsets()
        arrays = [(starts[n] - schema.sample_bytes, s.nbytes) for n, s in schema.arrays.items()]
        kept: PageDigests = {}
        nxt = 0
        buf = bytearray(ps if 0 in done else 0)
        while len(kept) in done:
            page = len(kept)
            if pread_into(fd, buf, start + page * ps) < ps or buf[-4:] != _MAGIC:
                break
            if block_digest(memoryview(buf)).crc32 != done[page][0]:
                break
            first, k, _ = _TAIL.unpack_from(buf, ps - _TAIL.size)
            if first != nxt or k < 1 or first + k > layout.num_samples:
                break
            body = ps - page_trailer_size(k, record.itemsize + 8)
            labels = np.frombuffer(buf, dtype=record, count=k, offset=body)
            offset = body + record.itemsize * k
            sizes = np.frombuffer(buf, dtype="<u4", count=2 * k, offset=offset)
            sizes = sizes.reshape(k, 2).astype(np.uint64)
            spans = sizes.sum(axis=1) + np.uint64(extra)
            firsts = np.uint64(start + page * ps) + np.cumsum(spans) - spans
            rows = slice(first, first + k)
            layout.ptrs[rows, 0], layout.ptrs[rows, 1] = firsts, firsts + sizes[:, 0]
            layout.sizes[rows, :2] = sizes
            for t, (off, size) in enumerate(arrays):
                layout.ptrs[rows, 2 + t] = firsts + sizes.sum(axis=1) + np.uint64(off)
                layout.sizes[rows, 2 + t] = size
            self.labels[first : first + k] = labels
            kept[page] = done[page]
            nxt = first + k
        return kept, nxt

    def run(self, resume: bool) -> WriteReport:
        files = self.files
        self.labels = scalar_record(self.layout.schema, self.layout.num_samples)
        done = self.resumable() if resume else {}
        if done is None:
            self.journal.remove()
            return self.report([0, 0], 0, 0.0, self.layout.num_pages)
        fd = -1
        packer: _Packer | None = None
        try:
            fd = os.open(files.partial, os.O_RDWR | os.O_CREAT, 0o644)
            kept, nxt = self._kept_pages(fd, done) if done else ({}, 0)
            if not kept:
                self.journal.start(self.fingerprint)
                os.ftruncate(fd, 0)
            hook("start")
            descriptors = self.layout.descriptors()
            pwrite_all(fd, descriptors, self.layout.metadata_start - descriptors.nbytes)
            fsync_dir(files.out)
            packer = _Packer(self, fd, kept, nxt)
            t_pages = time.perf_counter()
            self._pages(packer, fd)
            page_seconds = time.perf_counter() - t_pages
            self.layout = replace(self.layout, pages=packer.page)
            self._tables(fd)
            finish_file(fd, files, self.layout, self.manifest(False), packer.digests)
            hook("sidecar")
            self.journal.remove()
        except BaseException as e:
            raise self.failed(e, packer) from None
        finally:
            if fd >= 0:
                os.close(fd)
        return self.report(packer.reads, packer.samples, page_seconds, len(kept))

    def _tasks(self, start: int, workers: int) -> list[tuple[int, int]]:
        n = self.layout.num_samples
        per = max(1, _TASK_BYTES // max(1, self.layout.schema.slot_bytes))
        per = max(1, min(per, -(-(n - start) // (4 * workers))))
        return [(s, min(n, s + per)) for s in range(start, n, per)]

    def _pages(self, packer: _Packer, fd: int) -> None:
        global _JOB
        schema = self.layout.schema
        tasks = self._tasks(packer.next, self.workers)
        _JOB = _EncodeJob(self.src, schema, self.conv, self.order, (self.journal.fd, fd))
        try:
            with self.progress_bar(packer.next) as packer.bar:
                run_tasks(
                    _encode,
                    tasks,
                    min(self.workers, max(1, len(tasks))),
                    packer.on_done,
                    initializer=_worker_init,
                )
            packer.finish()
        finally:
            _JOB = None

    def _tables(self, fd: int) -> None:
        """The metadata table, from every sample's pointers; the file cut to its size."""
        layout = self.layout
        for start in range(0, layout.num_samples, _METADATA_CHUNK):
            labels = self.labels[start : start + _METADATA_CHUNK]
            rows = layout.metadata_rows(start, labels)
            pwrite_all(fd, rows, layout.metadata_start + start * rows.itemsize)
        os.ftruncate(fd, layout.file_size)
