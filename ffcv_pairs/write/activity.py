"""What each of the writer's workers is doing, so that one that makes no progress is
named for it.

Each worker owns one row of a small table in memory shared with the writer (an
anonymous ``mmap`` made before the workers fork): its pid, its :class:`Step`, the
step's number (a sample, a data page or a batch file) and when the step began
(``time.monotonic``, one clock for every process). A worker updates its row as it
goes, a few stores per sample. When nothing has moved for the stall time the writer
reads the table and says what each busy worker is doing, e.g. ``worker process 4242
has been inside Frames.__getitem__(1234) for 601 s``.
"""

from __future__ import annotations

import enum
import mmap
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..format.layout import BetonLayout
from ..format.schema import PairSchema
from .batched import BatchedSource
from .sources import IndexedSource, PairSource

__all__ = ["Board", "Step", "step_words"]

_PID, _STEP, _NUMBER, _SINCE = range(4)
_CLAIM_SECONDS = 1.0


class Step(enum.IntEnum):
    """What a worker is doing; the number recorded with it is in brackets."""

    IDLE = 0  #: between tasks
    SAMPLE = 1  #: reading one sample from the source (its index)
    PAGE_SAMPLES = 2  #: reading all the samples of a data page at once (the page)
    BATCH_FILE = 3  #: loading a batch file (its number)
    WRITE = 4  #: writing a data page with its metadata rows and statistics (the page)


def step_words(
    source: PairSource, layout: BetonLayout, partial: Path
) -> Callable[[Step, int], str]:
    """``words(step, number)``: a step of a worker of this job, in words."""
    a_name = PairSchema.IMAGE_FIELDS[0]

    def words(step: Step, number: int) -> str:
        if step == Step.SAMPLE and isinstance(source, IndexedSource):
            return f"inside {type(source.data).__name__}.__getitem__({number})"
        if step == Step.SAMPLE:
            return f"reading sample {number} ({source.where(number, a_name)}, ...)"
        if step == Step.PAGE_SAMPLES:
            start, stop = layout.page_samples(number)
            return (
                f"reading the {stop - start} samples of data page {number} from {source.describe()}"
            )
        if step == Step.BATCH_FILE and isinstance(source, BatchedSource):
            return f"loading batch file {source.path(number)}"
        return f"writing data page {number} to {partial}"

    return words


class Board:
    """The table of what each worker is doing; made by the writer before the workers fork.

    Args:
        rows: One per worker.
        words: Puts a step in words (:func:`step_words`), for :meth:`describe`.
    """

    def __init__(self, rows: int, words: Callable[[Step, int], str]):
        shared = mmap.mmap(-1, max(1, rows) * 4 * 8)  # MAP_SHARED: forked workers write here
        self._table = np.frombuffer(shared, dtype=np.float64).reshape(-1, 4)
        self._lock = mp.get_context("fork").Lock()
        self._words = words
        self._row: np.ndarray | None = None  # this worker's row

    def claim(self) -> None:
        """In a new worker: take a free row. Without one (or the lock, lost to a worker
        killed while holding it) the worker runs all the same, reporting nothing."""
        if not self._lock.acquire(timeout=_CLAIM_SECONDS):
            return
        try:
            free = np.flatnonzero(self._table[:, _PID] == 0)
            if len(free):
                self._row = self._table[int(free[0])]
                self._row[_PID] = os.getpid()
                self.doing(Step.IDLE)
        finally:
            self._lock.release()

    def doing(self, step: Step, number: int = 0) -> None:
        """Record this worker's step (nothing in a process without a row)."""
        row = self._row
        if row is not None:
            row[_SINCE] = time.monotonic()
            row[_NUMBER] = number
            row[_STEP] = step

    def last_change(self) -> float:
        """When a worker last went on to another step (0.0 before any took a row)."""
        claimed = self._table[self._table[:, _PID] != 0]
        return float(claimed[:, _SINCE].max()) if len(claimed) else 0.0

    def describe(self, now: float) -> str:
        """What each busy worker is doing, and for how long, in words."""
        busy = [
            f"worker process {int(pid)} has been {self._words(Step(int(step)), int(number))} "
            f"for {now - since:.0f} s"
            for pid, step, number, since in self._table.tolist()
            if pid and step != Step.IDLE
        ]
        return ", and ".join(busy) or "every worker is waiting for a task"
