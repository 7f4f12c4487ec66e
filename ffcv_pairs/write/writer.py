"""Pack ``(A, B, label)`` pairs into one FFCV `.beton`: in parallel, in one pass, resumably.

Example:
    >>> from ffcv_pairs import ArraySource, write_pairs
    >>> write_pairs(ArraySource(a, b, labels), "out/train.beton", workers=2)
    >>> write_pairs(open_source("data/pt", "train"), "out/train.beton", resume=True)

How it works: the layout is fixed by the schema (see :mod:`ffcv_pairs.format.layout`),
so worker processes write each data page, with its metadata rows, at its final offset
in ``OUT.partial`` and return its CRC32 and SHA-256 (:mod:`.tasks`). The writer appends
those to the journal ``OUT.journal`` (:mod:`.journal`), which also holds the lock and
the source's fingerprint. When every page is done it writes the allocation table and
then the header (which makes a file readable), digests those small table blocks,
derives the whole-file digest from the block digests (:mod:`ffcv_pairs.format.sidecar`)
and renames ``OUT.partial`` over ``OUT``: the data is read once. A run stopped at any
point (kill, crash, SIGTERM, Ctrl-C, a bad file) leaves no ``OUT`` and never touches an
older one; ``resume=True`` keeps the journaled pages and writes the rest, giving the
same bytes as an uninterrupted run.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .._checks import flag, integer, optional
from .._fileio import pwrite_all
from ..format.layout import BetonLayout, PackedLayout
from ..format.shards import PART_KEY
from .activity import Board, step_words
from .arguments import (
    StoreDtype,
    check_codec,
    check_out_path,
    check_page_size,
    check_quantize,
    check_shuffle_seed,
    check_store_dtype,
    check_workers,
)
from .batched import BatchedSource
from .conversion import Conversion, WriteReport
from .convert import Converter
from .finish import (
    Outputs,
    finish_file,
    fsync_dir,
    open_stats_partial,
)
from .journal import Journal, journal_path
from .packing import PackedConversion
from .parts import SliceSource, check_part, take_part
from .plan import make_plan
from .pool import WriteError, run_tasks, signals_as_exceptions
from .shuffle import Permutation
from .sources import SourceError, as_source
from .space import disk_full, no_space
from .tasks import Job, run_task, set_job, stats_kinds, worker_init
from .testhook import hook
from .tracker import PageTracker

__all__ = ["DEFAULT_PAGE_SIZE", "STALL_SECONDS", "StoreDtype", "WriteReport", "write_pairs"]

#: Same as upstream's default (4 x 2 MiB).
DEFAULT_PAGE_SIZE = 8 << 20
#: A conversion in which no worker has gone on to its next step (a sample, a page, a
#: batch file) for this long stops, naming what each busy worker is doing.
STALL_SECONDS = 600.0


class _PageConversion(Conversion):
    """A conversion of fixed-size samples: pages written at their final offsets."""

    layout: BetonLayout

    def partial_fits(self) -> bool:
        return self.files.partial.stat().st_size == self.layout.file_size

    def run(self, resume: bool) -> WriteReport:
        layout, files = self.layout, self.files
        done = self.resumable() if resume else {}
        if done is None:
            self.journal.remove()
            return self.report([0, 0], 0, 0.0, layout.num_pages)
        plan = make_plan(self.src, layout, self.order, set(done), self.workers)
        tracker = PageTracker(self.journal, -1, layout, plan, done)
        try:  # from the first byte written on, a failure says what was kept
            if not done:
                self.journal.start(self.fingerprint)
            hook("start")
            tracker.fd = os.open(files.partial, os.O_RDWR | os.O_CREAT, 0o644)
            tracker.stats_fd = open_stats_partial(files, layout, bool(done))
            if not done:
                os.ftruncate(tracker.fd, 0)
                os.ftruncate(tracker.fd, layout.file_size)
            descriptors = layout.descriptors()
            pwrite_all(tracker.fd, descriptors, layout.metadata_start - descriptors.nbytes)
            fsync_dir(files.out)
            t_pages = time.perf_counter()
            self._pages(tracker)
            page_seconds = time.perf_counter() - t_pages
            manifest = self.manifest(tracker.stats_fd is not None)
            finish_file(tracker.fd, files, layout, manifest, tracker.digests, tracker.stats_fd)
            hook("sidecar")  # every file in place, the journal not yet removed
            self.journal.remove()  # here: a signal before it is reported with what is left
        except BaseException as e:
            raise self.failed(e, tracker) from None
        finally:
            for fd in (tracker.fd, tracker.stats_fd):
                if fd is not None and fd >= 0:
                    os.close(fd)
        return self.report(tracker.reads, tracker.samples, page_seconds, len(done))

    def _pages(self, tracker: PageTracker) -> None:
        plan, stats_fd, n = tracker.plan, tracker.stats_fd, self.layout.num_samples
        job = Job(self.src, self.layout, self.conv, self.files.partial, self.order)
        job.inherited_fds = (self.journal.fd, tracker.fd)
        if stats_fd is not None:
            job.inherited_fds += (stats_fd,)
            job.stats, job.stats_kinds = self.files.stats_partial, stats_kinds(self.layout.schema)
        workers = min(self.workers, len(plan.tasks))
        if workers > 1:
            job.board = Board(workers, step_words(self.src, self.layout, self.files.partial))
        set_job(job)
        try:
            with self.progress_bar(max(0, n - sum(plan.samples))) as tracker.bar:
                run_tasks(
                    run_task,
                    plan.tasks,
                    workers,
                    tracker.on_done,
                    initializer=worker_init,
                    stall_seconds=STALL_SECONDS,
                    watch=job.board,
                )
            tracker.flush()
        finally:
            set_job(None)


def write_pairs(
    source: Any,
    path: str | os.PathLike[str],
    *,
    workers: int | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    store_dtype: StoreDtype | None = None,
    quantize: str | None = None,
    quantize_range: tuple[float, float] | None = None,
    codec: str | dict[str, str] | None = None,
    quality: int | None = None,
    limit: int | None = None,
    progress: bool = True,
    resume: bool = False,
    shuffle_seed: int | None = None,
    part: tuple[int, int] | str | None = None,
) -> WriteReport:
    """Write ``source`` to the `.beton` at ``path`` plus its ``path.json`` checksum sidecar.

    Args:
        source: A :class:`~ffcv_pairs.write.sources.PairSource`, or any object with
            ``__len__`` and ``__getitem__`` returning ``(A, B, label)`` (a torch
            ``Dataset``, a list of tuples).
        path: Output file. Written as ``path.partial`` and renamed when complete.
        workers: Worker processes (default: all cores). ``1`` writes in-process; at most
            :func:`~ffcv_pairs.write.arguments.worker_limit` (4 per CPU, 1024 at most).
        page_size: FFCV page size in bytes, a power of two from 4 KiB to 2 GiB
            (default 8 MiB).
        store_dtype: Store images as ``"uint8"`` or ``"float16"``; refuses a cast
            that would change a value. Default: store the source dtype exactly.
        quantize, quantize_range: ``"uint8"`` and ``(lo, hi)``: store float images of that
            range as their nearest of 256 levels, at most ``(hi - lo) / 510`` off (plus
            float32's rounding when read back); values outside it, and a range whose step
            float32 cannot resolve, are refused (see
            :class:`~ffcv_pairs.format.quantization.Quantization`).
        codec, quality: ``"jpeg"``: store A and B as JPEGs of ``quality`` (1-100, default
            90), lossy, with upstream's encoder (``RGBImageField``); per field:
            ``{A: "jpeg", B: "raw"}``. Only uint8 images of 1 or 3 channels, ``(C, H,
            W)``, ``(H, W, C)`` or ``(H, W)``. Default ``"raw"``: stored exactly.
        limit: Write only the first ``limit`` samples (at least 1).
        progress: Show a progress bar (samples/s and ETA) on stderr.
        resume: Keep the finished pages of an interrupted run of the same conversion.
        shuffle_seed: Write the samples in the seeded order of
            :class:`~ffcv_pairs.write.shuffle.Permutation` instead of source order; an
            integer in ``[0, 2**64)``; with ``part``, a permutation of the part's samples.
        part: ``(K, N)`` or ``"K/N"``: write only the ``K``-th of ``N`` contiguous slices
            of the source (after ``limit``; see
            :func:`~ffcv_pairs.format.shards.part_slice`), as a shard whose sidecar
            records the slice, for :func:`~ffcv_pairs.format.merging.merge_parts`.

    Raises:
        SourceError: bad input, a changed source on resume, or another writer on
            ``path``; the message names the file or index.
        WriteError: a worker died; no worker went on to its next step (a sample, a
            page, a batch file) for :data:`STALL_SECONDS`, and the message says what
            each was doing; the disk is full, and it says how much is free; another
            ``OSError``. WriteInterrupted: SIGTERM; KeyboardInterrupt: Ctrl-C. Each says
            whether ``resume=True`` can continue.
        TypeError, ValueError: a bad argument, named with the value given.
    """
    t0 = time.perf_counter()
    out = check_out_path("path", path)
    workers = check_workers("workers", workers) or len(os.sched_getaffinity(0))
    page_size = check_page_size("page_size", page_size)
    store_dtype = check_store_dtype("store_dtype", store_dtype)
    q = check_quantize("quantize", quantize, "quantize_range", quantize_range, store_dtype)
    jpeg = check_codec("codec", codec, "quality", quality)
    limit = optional(integer)("limit", limit, 1)
    progress, resume = flag("progress", progress), flag("resume", resume)
    shuffle_seed = check_shuffle_seed("shuffle_seed", shuffle_seed)
    part = check_part("part", part)
    src = as_source(source)
    n = len(src) if limit is None else min(len(src), limit)
    if n == 0:
        raise SourceError(f"{src.describe()}: source is empty")
    record = None
    if part is not None:
        src, record = take_part(src, part, n)
        n = len(src)
    conv = Converter(store_dtype, q)
    schema = conv.infer(src, jpeg)
    layout: BetonLayout | PackedLayout
    if schema.compressed:
        layout = PackedLayout.empty(schema, n, page_size)
    else:
        layout = BetonLayout(schema, n, page_size)
    order = None if shuffle_seed is None else Permutation(n, shuffle_seed)
    if isinstance(src, BatchedSource | SliceSource):
        src.release()  # workers load their own batch files
    fingerprint = src.fingerprint() | {
        "samples written": n,
        "schema": schema.to_json(),
        "page size": layout.page_size,
        "store dtype": store_dtype,
        "quantize": None if q is None else [q.lo, q.hi],
        "shuffle seed": shuffle_seed,
    }
    if record is not None:  # which slice of which source: merge_parts checks the parts
        fingerprint[PART_KEY] = record
    files = Outputs.of(out)
    with signals_as_exceptions():
        try:
            files.out.parent.mkdir(parents=True, exist_ok=True)
            journal = Journal.acquire(journal_path(files.out), files.out)
            try:
                kind = PackedConversion if schema.compressed else _PageConversion
                conversion = kind(
                    src, layout, conv, order, files, journal, fingerprint, workers, progress, t0
                )
                return conversion.run(resume)
            except BaseException:
                if os.fstat(journal.fd).st_size == 0:  # made by this call, never started
                    journal.remove()
                raise
            finally:
                journal.close()
        except OSError as e:  # before any page: the rest says what was kept
            if not no_space(e):
                raise
            message = disk_full(files.out, layout.file_size)
            raise WriteError(f"{message}; nothing was written: rerun once there is room") from None
