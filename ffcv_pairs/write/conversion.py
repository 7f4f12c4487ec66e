"""What every conversion shares, fixed-size or packed: its inputs once checked, what
``resume`` keeps, its report, the sidecar it writes and what a failure says was kept."""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .._version import __version__
from ..format.layout import BetonLayout, PackedLayout
from ..format.schema import PairSchema
from ..format.sidecar import Manifest
from ..format.stats import stats_entry
from .convert import Converter
from .finish import Outputs, PageDigests, complete_renames, up_to_date
from .journal import Journal, what_changed
from .pool import WriteError, WriteInterrupted
from .shuffle import PERMUTATION, Permutation
from .sources import PairSource, SourceError
from .space import allocated, disk_full, no_space

__all__ = ["Conversion", "PageBook", "WriteReport"]


class PageBook(Protocol):
    """The page phase's record of finished pages: their digests, those not yet journaled,
    and the flush that journals them."""

    digests: PageDigests
    pending: list[tuple[int, int, bytes]]

    def flush(self) -> None: ...


@dataclass(frozen=True)
class WriteReport:
    """What :func:`write_pairs` produced.

    Attributes:
        seconds: Wall time of the whole call.
        page_seconds: Wall time of writing pages (not discovery, sample 0, tables, renames).
        fast_reads / fallback_reads: ``.pt`` files read without / with ``torch.load``.
        pages_kept: Data pages taken over from an interrupted run (``resume=True``).
        samples_written: Samples written by this call (fewer when resumed; :meth:`summary`'s rate).
    """

    path: Path
    manifest: Path
    schema: PairSchema
    num_samples: int
    file_size: int
    seconds: float
    page_seconds: float = 0.0
    num_pages: int = 0
    fast_reads: int = 0
    fallback_reads: int = 0
    pages_kept: int = 0
    shuffle_seed: int | None = None
    samples_written: int | None = None

    def summary(self) -> str:
        written = self.num_samples if self.samples_written is None else self.samples_written
        rate = written / max(self.seconds, 1e-9)
        share = self.page_seconds / max(self.seconds, 1e-9)
        parts = [
            f"wrote {self.path}: {self.num_samples} pairs ({self.schema.describe()}), "
            f"{self.file_size / 1e6:.1f} MB in {self.seconds:.1f} s ({rate:,.0f} pairs/s, "
            f"{share:.0%} of it writing pages)"
        ]
        if self.fast_reads or self.fallback_reads:
            parts.append(
                f".pt files: {self.fast_reads} read directly, {self.fallback_reads} by torch.load"
            )
        if self.pages_kept:
            parts.append(f"resumed: kept {self.pages_kept} of {self.num_pages} pages")
        if self.shuffle_seed is not None:
            parts.append(f"shuffled with seed {self.shuffle_seed}")
        return "; ".join([*parts, f"checksums in {self.manifest}"])


@dataclass
class Conversion:
    """One call of ``write_pairs`` once its arguments are checked."""

    src: PairSource
    layout: BetonLayout | PackedLayout
    conv: Converter
    order: Permutation | None
    files: Outputs
    journal: Journal
    fingerprint: dict[str, Any]
    workers: int
    progress: bool
    t0: float

    def report(self, reads: list[int], samples: int, page_seconds: float, kept: int) -> WriteReport:
        return WriteReport(
            path=self.files.out,
            manifest=self.files.sidecar,
            schema=self.layout.schema,
            num_samples=self.layout.num_samples,
            file_size=self.layout.file_size,
            seconds=time.perf_counter() - self.t0,
            page_seconds=page_seconds,
            num_pages=self.layout.num_pages,
            fast_reads=reads[0],
            fallback_reads=reads[1],
            pages_kept=kept,
            shuffle_seed=None if self.order is None else self.order.seed,
            samples_written=samples,
        )

    def resumable(self) -> PageDigests | None:
        """The journaled pages to keep; None when the conversion turns out to be complete.

        Raises:
            SourceError: the journal's fingerprint differs from this run's.
        """
        files = self.files
        old, done = self.journal.read()
        if old is None:  # nothing interrupted: maybe a finished file of the same conversion
            if files.out.exists() and up_to_date(files, self.fingerprint):
                return None
            return {}
        change = what_changed(old, self.fingerprint)
        if change is not None:
            raise SourceError(
                f"{files.out}: cannot resume: {change}; rerun without --resume to start over"
            )
        if not files.partial.exists():  # killed while renaming?
            return None if complete_renames(files, self.layout_of(done), done) else {}
        return done if self.partial_fits() else {}

    def layout_of(self, done: PageDigests) -> BetonLayout | PackedLayout:
        """The layout of the file whose pages ``done`` lists (known in advance here)."""
        return self.layout

    def partial_fits(self) -> bool:
        """Whether ``OUT.partial`` can hold the journaled pages."""
        return True

    def failed(self, e: BaseException, book: PageBook | None) -> BaseException:
        """The error to raise after the conversion failed, saying what was kept of the
        pages ``book`` holds (None: no page phase yet)."""
        kept = 0
        if book is not None:
            try:
                book.flush()
                kept = len(book.digests)
            except (OSError, SourceError):  # the journal holds what it held before
                kept = len(book.digests) - len(book.pending)
        out = self.files.out
        if no_space(e):
            missing = self.layout.file_size - allocated(self.files.partial)
            return WriteError(f"{disk_full(out, missing)}; {self._kept(kept, room=True)}")
        note = self._kept(kept)
        if isinstance(e, KeyboardInterrupt):  # stays a KeyboardInterrupt for callers
            return KeyboardInterrupt(f"{out}: interrupted by Ctrl-C; {note}")
        if isinstance(e, WriteInterrupted):
            name = signal.Signals(e.signum).name
            return WriteInterrupted(e.signum, f"{out}: interrupted by {name}; {note}")
        if isinstance(e, WriteError | OSError):
            return WriteError(f"{out}: {e}; {note}")
        if isinstance(e, SourceError):
            return SourceError(f"{e} ({note})")
        return e

    def _kept(self, kept: int, room: bool = False) -> str:
        """What is left for ``--resume`` and what to do (once there is ``room`` on the disk);
        removes a ``.partial`` that holds no journaled page."""
        files = self.files
        then = "once there is room" if room else "to continue"
        if not files.partial.exists() and files.out.exists():  # renamed: the rest is quick
            done = "and its sidecar are" if files.sidecar.exists() else "is"
            return f"{files.out.name} {done} in place, not yet all: rerun with --resume {then}"
        if kept:
            pages = self.pages_kept(kept)
            return f"{files.partial.name} kept with {pages} written: rerun with --resume {then}"
        files.partial.unlink(missing_ok=True)
        files.stats_partial.unlink(missing_ok=True)
        self.journal.remove()
        return "nothing was kept: rerun once there is room" if room else "nothing was kept"

    def progress_bar(self, initial: int) -> Any:
        """The tqdm bar of the page phase on stderr (off without ``progress``)."""
        from tqdm import tqdm

        return tqdm(
            total=self.layout.num_samples,
            initial=initial,
            unit="pair",
            disable=not self.progress,
            file=sys.stderr,
            desc=self.files.out.name,
            dynamic_ncols=True,
        )

    def pages_kept(self, kept: int) -> str:
        return f"{kept} of {self.layout.num_pages} pages"

    def manifest(self, with_stats: bool) -> Manifest:
        layout = self.layout
        return Manifest(
            schema=layout.schema.to_json(),
            num_samples=layout.num_samples,
            page_size=layout.page_size,
            file_size=layout.file_size,
            block_crc32="",
            source=self.src.describe(),
            data_start=layout.data_start,
            samples_per_page=getattr(layout, "samples_per_page", 0),
            writer_version=__version__,
            store_dtype=self.conv.store,
            shuffle_seed=None if self.order is None else self.order.seed,
            permutation=None if self.order is None else PERMUTATION,
            fingerprint=self.fingerprint,
            stats=stats_entry(layout.schema, self.files.stats.name) if with_stats else None,
        )
