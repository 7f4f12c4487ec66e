"""The writer's side of the page phase: page digests, journal batches, progress."""

from __future__ import annotations

import os
import time
from typing import Any

from .._fileio import pread_exact
from ..format.layout import BetonLayout
from ..format.sidecar import block_digest
from .journal import Journal
from .plan import Plan
from .sources import SourceError
from .tasks import TaskResult
from .testhook import hook

__all__ = ["JOURNAL_SECONDS", "PageTracker"]

PageDigests = dict[int, tuple[int, bytes]]

#: Finished pages are made durable and journaled in batches, at most this far apart.
JOURNAL_SECONDS = 1.0


class PageTracker:
    """Digests of the finished pages (the journaled ones to begin with), the batch not yet
    journaled, ``.pt`` read counts and the progress bar."""

    def __init__(
        self, journal: Journal, fd: int, layout: BetonLayout, plan: Plan, done: PageDigests
    ):
        self.journal, self.fd, self.plan = journal, fd, plan
        self.page_size, self.data_start = layout.page_size, layout.data_start
        self.stats_fd: int | None = None  # fsynced before pages are journaled
        self.digests = dict(done)
        self.pending: list[tuple[int, int, bytes]] = []
        self.reads = [0, 0]
        self.samples = 0
        self.every = JOURNAL_SECONDS
        self.last = time.monotonic()
        self.bar: Any = None

    def _add(self, page: int, crc: int, sha: bytes) -> None:
        if page in self.digests:
            if self.digests[page] != (crc, sha):
                raise SourceError(
                    f"data page {page} came out different from the one written before the "
                    f"interruption: the source changed; rerun without --resume to start over"
                )
            return
        self.digests[page] = (crc, sha)
        self.pending.append((page, crc, sha))

    def on_done(self, index: int, result: TaskResult) -> None:
        for page, crc, sha in result.pages:
            self._add(page, crc, sha)
        for page in self.plan.task_done(index):
            at = self.data_start + page * self.page_size
            partial = str(self.journal.path.with_suffix(".partial"))
            d = block_digest(pread_exact(self.fd, self.page_size, at, partial))
            self._add(page, d.crc32, d.sha256)
        self.reads[0] += result.reads[0]
        self.reads[1] += result.reads[1]
        self.samples += result.samples
        if self.bar is not None:
            self.bar.update(result.samples)
        if time.monotonic() - self.last >= self.every:
            self.flush()

    def flush(self) -> None:
        if self.stats_fd is not None and self.pending:
            os.fsync(self.stats_fd)
        self.journal.commit(self.fd, self.pending)
        self.pending = []
        self.last = time.monotonic()
        hook("journal", len(self.digests))
