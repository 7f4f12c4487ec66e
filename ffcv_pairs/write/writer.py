"""Pack ``(A, B, label)`` pairs into one FFCV `.beton`, in parallel and crash-safely.

Example:
    >>> from ffcv_pairs import ArraySource, write_pairs
    >>> write_pairs(ArraySource(a, b, labels), "out/train.beton", workers=2)

How it works: the layout is fixed by the schema (see :mod:`ffcv_pairs.format.layout`),
so each worker process reads the samples of one data page, assembles the page
and ``pwrite``\\ s it, with its metadata rows, at its final offset. Nothing per
sample stays in memory. Everything goes to ``OUT.partial``; the header, which
makes a file readable, is written last, then the file is hashed, fsynced and
renamed over ``OUT``. A failed or killed run leaves no ``OUT`` and never touches
an older one.
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._version import __version__
from ..format.layout import BetonLayout, field_descriptors
from ..format.schema import SUPPORTED_DTYPES, ArraySpec, PairSchema
from ..format.sidecar import Manifest, hash_file, manifest_path
from .sources import PairSource, SourceError, as_source, cast_to_store, to_array, to_label

__all__ = ["DEFAULT_PAGE_SIZE", "StoreDtype", "WriteReport", "write_pairs"]

#: Same as upstream's default (4 x 2 MiB).
DEFAULT_PAGE_SIZE = 8 << 20
StoreDtype = Literal["uint8", "float16"]


@dataclass(frozen=True)
class WriteReport:
    """What :func:`write_pairs` produced."""

    path: Path
    manifest: Path
    schema: PairSchema
    num_samples: int
    file_size: int
    seconds: float

    def summary(self) -> str:
        rate = self.num_samples / max(self.seconds, 1e-9)
        return (
            f"wrote {self.path}: {self.num_samples} pairs ({self.schema.describe()}), "
            f"{self.file_size / 1e6:.1f} MB in {self.seconds:.1f} s ({rate:,.0f} pairs/s); "
            f"checksums in {self.manifest}"
        )


class _Converter:
    """Turns raw values into arrays of the schema, naming the file on any mismatch."""

    def __init__(self, store_dtype: str | None):
        if store_dtype is not None and store_dtype not in ("uint8", "float16"):
            raise ValueError(f"store_dtype must be None, 'uint8' or 'float16', got {store_dtype!r}")
        self.store = store_dtype
        self.schema: PairSchema | None = None

    def image(self, value: Any, where: str) -> np.ndarray:
        return cast_to_store(to_array(value, where), self.store, where)

    def infer(self, source: PairSource) -> PairSchema:
        a_name, b_name = PairSchema.IMAGE_FIELDS
        raw = source.read(0)
        specs = []
        for value, name in zip(raw[:2], (a_name, b_name)):
            where = source.where(0, name)
            arr = self.image(value, where)
            if arr.dtype.name not in SUPPORTED_DTYPES:
                hint = " (or --store-dtype uint8 / float16)" if arr.dtype.kind in "iuf" else ""
                raise SourceError(
                    f"{where}: dtype {arr.dtype} is not supported; store "
                    f"{'/'.join(SUPPORTED_DTYPES)}{hint}"
                )
            if arr.ndim == 0 or arr.size == 0:
                raise SourceError(f"{where}: expected a non-empty array, got shape {arr.shape}")
            specs.append(ArraySpec(arr.shape, arr.dtype.name))
        to_label(raw[2], source.where(0, PairSchema.LABEL_FIELD))
        self.schema = PairSchema(a=specs[0], b=specs[1])
        return self.schema

    def check(self, arr: np.ndarray, spec: ArraySpec, where: str, batched: bool = False) -> None:
        shape = arr.shape[1:] if batched else arr.shape
        if shape != spec.shape or arr.dtype != spec.np_dtype:
            raise SourceError(
                f"{where}: {arr.dtype}{list(shape)} differs from sample 0 "
                f"({spec.describe()}); every sample must match"
            )


@dataclass
class _Job:
    """What a worker process needs (inherited through fork, never pickled)."""

    source: PairSource
    layout: BetonLayout
    converter: _Converter
    partial: Path


_JOB: _Job | None = None
_FD: int | None = None
_PAGE: np.ndarray | None = None


def _worker_init() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fill_page(job: _Job, page: int, buf: np.ndarray) -> np.ndarray:
    """Assemble data page ``page`` into ``buf``; returns the labels of its samples."""
    layout, conv, src = job.layout, job.converter, job.source
    schema = layout.schema
    start, stop = layout.page_samples(page)
    k, na, sb = stop - start, schema.a.nbytes, schema.sample_bytes
    slots = buf[: k * sb].reshape(k, sb)
    a_name, b_name = schema.IMAGE_FIELDS
    block = src.read_arrays(start, stop)
    if block is not None:
        a = conv.image(block[0], f"{src.describe()}.{a_name}[{start}:{stop}]")
        b = conv.image(block[1], f"{src.describe()}.{b_name}[{start}:{stop}]")
        conv.check(a, schema.a, f"{src.describe()}.{a_name}", batched=True)
        conv.check(b, schema.b, f"{src.describe()}.{b_name}", batched=True)
        slots[:, :na] = a.reshape(k, -1).view(np.uint8)
        slots[:, na:] = b.reshape(k, -1).view(np.uint8)
        labels = np.asarray(block[2], dtype=np.int64)
    else:
        labels = np.empty(k, dtype=np.int64)
        for j, i in enumerate(range(start, stop)):
            raw = src.read(i)
            for value, name, spec, lo, hi in (
                (raw[0], a_name, schema.a, 0, na),
                (raw[1], b_name, schema.b, na, sb),
            ):
                where = src.where(i, name)
                arr = conv.image(value, where)
                conv.check(arr, spec, where)
                slots[j, lo:hi] = arr.reshape(-1).view(np.uint8)
            labels[j] = to_label(raw[2], src.where(i, schema.LABEL_FIELD))
    buf[k * sb :] = 0
    return labels


def _write_page(page: int) -> int:
    global _FD, _PAGE
    job = _JOB
    assert job is not None, "worker started without a job"
    if _FD is None:
        _FD = os.open(job.partial, os.O_WRONLY)
    if _PAGE is None:
        _PAGE = np.empty(job.layout.page_size, dtype=np.uint8)
    layout = job.layout
    labels = _fill_page(job, page, _PAGE)
    os.pwrite(_FD, _PAGE.data, layout.data_start + page * layout.page_size)
    start, _ = layout.page_samples(page)
    rows = layout.metadata_rows(start, labels)
    os.pwrite(_FD, rows.tobytes(), layout.metadata_start + start * rows.itemsize)
    return len(labels)


def _run_pages(num_pages: int, workers: int) -> Iterator[int]:
    if workers <= 1:
        try:
            yield from map(_write_page, range(num_pages))
        finally:
            _close_worker_fd()
        return
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, initializer=_worker_init) as pool:
        yield from pool.imap_unordered(_write_page, range(num_pages), chunksize=1)


def _close_worker_fd() -> None:
    global _FD, _PAGE
    if _FD is not None:
        os.close(_FD)
    _FD, _PAGE = None, None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _finish(layout: BetonLayout, fd: int) -> None:
    """Allocation table, then the header: only now does the file look like a .beton."""
    chunk = 1 << 20
    for start in range(0, layout.num_samples, chunk):
        stop = min(layout.num_samples, start + chunk)
        rows = layout.alloc_rows(start, stop)
        os.pwrite(fd, rows.tobytes(), layout.alloc_table_ptr + 2 * start * rows.itemsize)
    os.fsync(fd)
    os.pwrite(fd, layout.header().tobytes(), 0)
    os.fsync(fd)


def write_pairs(
    source: Any,
    path: str | os.PathLike[str],
    *,
    workers: int | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    store_dtype: StoreDtype | None = None,
    limit: int | None = None,
    progress: bool = True,
) -> WriteReport:
    """Write ``source`` to the `.beton` at ``path`` plus its ``path.json`` checksum sidecar.

    Args:
        source: A :class:`~ffcv_pairs.write.sources.PairSource`, or any object with
            ``__len__`` and ``__getitem__`` returning ``(A, B, label)`` (a torch
            ``Dataset``, a list of tuples).
        path: Output file. Written as ``path.partial`` and renamed when complete.
        workers: Worker processes (default: all cores). ``1`` writes in-process.
        page_size: FFCV page size in bytes, a power of two (default 8 MiB).
        store_dtype: Store images as ``"uint8"`` or ``"float16"``; refuses a cast
            that would change a value. Default: store the source dtype exactly.
        limit: Write only the first ``limit`` samples.
        progress: Show a progress bar (samples/s and ETA) on stderr.

    Raises:
        SourceError: bad input; the message names the file or index.
        ValueError: a bad argument.
    """
    global _JOB
    t0 = time.perf_counter()
    src = as_source(source)
    n = len(src) if limit is None else min(len(src), int(limit))
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if n == 0:
        raise SourceError(f"{src.describe()}: source is empty")
    workers = workers if workers is not None else len(os.sched_getaffinity(0))
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    conv = _Converter(store_dtype)
    schema = conv.infer(src)
    layout = BetonLayout(schema, n, int(page_size))

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o644)
    done = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SourceError(f"{partial}: another writer is writing this file") from None
        os.ftruncate(fd, 0)
        os.ftruncate(fd, layout.file_size)
        descriptors = field_descriptors(layout.fields)
        os.pwrite(fd, descriptors.tobytes(), layout.metadata_start - descriptors.nbytes)
        _JOB = _Job(src, layout, conv, partial)
        from tqdm import tqdm

        with tqdm(
            total=n,
            unit="pair",
            disable=not progress,
            file=sys.stderr,
            desc=out.name,
            dynamic_ncols=True,
        ) as bar:
            for count in _run_pages(layout.num_pages, min(workers, layout.num_pages)):
                bar.update(count)
        _finish(layout, fd)
        crcs, sha = hash_file(partial, layout.page_size)
        manifest = Manifest(
            schema=schema.to_json(),
            num_samples=n,
            page_size=layout.page_size,
            file_size=layout.file_size,
            block_crc32=Manifest.encode_crcs(crcs),
            sha256=sha,
            source=src.describe(),
            data_start=layout.data_start,
            samples_per_page=layout.samples_per_page,
            writer_version=__version__,
            store_dtype=store_dtype,
        )
        sidecar = manifest_path(out)
        sidecar_partial = sidecar.with_name(sidecar.name + ".partial")
        manifest.save(sidecar_partial)
        # A stale sidecar must never sit next to the new file: drop it first.
        sidecar.unlink(missing_ok=True)
        os.replace(partial, out)
        os.replace(sidecar_partial, sidecar)
        _fsync_dir(out)
        done = True
    finally:
        _JOB = None
        os.close(fd)
        if not done:
            partial.unlink(missing_ok=True)
            manifest_path(out).with_name(manifest_path(out).name + ".partial").unlink(
                missing_ok=True
            )
    return WriteReport(out, sidecar, schema, n, layout.file_size, time.perf_counter() - t0)
