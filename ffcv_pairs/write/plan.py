"""Which tasks the writer runs, and which pages it digests itself.

* Sources read by index (per-sample files, arrays, datasets) are *gathered*: a
  task is a run of whole data pages, so every page is written and digested by the
  worker that filled it.
* Batched sources are *scattered*: a task is a run of whole batch files holding
  about ``pages_per_task`` pages of samples, so each batch file is loaded once, by
  one process, and a worker holds one batch file at a time. A page that
  straddles two tasks (or, when shuffled, any page) is *shared*: each task writes
  its slots, and the writer reads the page back and digests it once every task
  touching it is done.

When resuming, a task runs if any page it touches is not in the journal; pages
already there are written again with the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..format.layout import BetonLayout
from .batched import BatchedSource
from .shuffle import Permutation
from .sources import PairSource

__all__ = ["Plan", "make_plan"]

_TASK_BYTES = 1 << 20  # gather: group small pages into tasks of about this size
_MAX_PAGES_PER_TASK = 32


@dataclass
class Plan:
    """Tasks to run and the shared pages the writer digests.

    Attributes:
        tasks: ``("pages", p0, p1)`` or ``("files", k0, k1)`` (see :mod:`.tasks`).
        samples: Samples each task writes (for the progress bar).
        shared: For each task, the shared pages it touches.
        waiting: Shared page -> tasks still to finish before it can be digested.
    """

    tasks: list[tuple[str, int, int]]
    samples: list[int]
    shared: list[list[int]]
    waiting: dict[int, int]

    def task_done(self, index: int) -> list[int]:
        """Record task ``index`` as finished; the shared pages that became complete."""
        ready = []
        for page in self.shared[index]:
            self.waiting[page] -= 1
            if self.waiting[page] == 0:
                ready.append(page)
        return ready


def _per_task(layout: BetonLayout, workers: int) -> int:
    """Pages per task: enough tasks to balance the workers, none too large."""
    balance = max(1, layout.num_pages // (4 * max(1, workers)))
    return max(1, min(_MAX_PAGES_PER_TASK, balance))


def _gather(layout: BetonLayout, done: set[int], workers: int) -> Plan:
    size = min(_per_task(layout, workers), max(1, _TASK_BYTES // layout.page_size))
    todo = [p for p in range(layout.num_pages) if p not in done]
    tasks, samples = [], []
    run_start = 0
    for j in range(1, len(todo) + 1):
        if j == len(todo) or todo[j] != todo[j - 1] + 1 or j - run_start == size:
            p0, p1 = todo[run_start], todo[j - 1] + 1
            tasks.append(("pages", p0, p1))
            samples.append(layout.page_samples(p1 - 1)[1] - layout.page_samples(p0)[0])
            run_start = j
    return Plan(tasks, samples, [[] for _ in tasks], {})


def _scatter(
    src: BatchedSource, layout: BetonLayout, order: Permutation | None, done: set[int], workers: int
) -> Plan:
    spp, n = layout.samples_per_page, layout.num_samples
    target = _per_task(layout, workers) * spp
    offsets = np.minimum(src.offsets, n)  # --limit cuts the last files short
    last_file = int(np.searchsorted(offsets, n, side="left"))  # files 0..last_file-1 hold 0..n-1
    plan = Plan([], [], [], {})
    k0 = 0
    while k0 < last_file:
        k1 = int(np.searchsorted(offsets, offsets[k0] + target, side="left"))
        k1 = min(max(k1, k0 + 1), last_file)
        s0, s1 = int(offsets[k0]), int(offsets[k1])
        if order is None:
            touched = np.arange(s0 // spp, (s1 - 1) // spp + 1) if s1 > s0 else np.arange(0)
            edges = [p for p in {s0 // spp, (s1 - 1) // spp} if s1 > s0]
            shared = [
                p
                for p in edges
                if not (layout.page_samples(p)[0] >= s0 and layout.page_samples(p)[1] <= s1)
            ]
        else:
            touched = np.unique(order.position_of(np.arange(s0, s1)) // spp)
            shared = touched.tolist()
        if any(int(p) not in done for p in touched):
            plan.tasks.append(("files", k0, k1))
            plan.samples.append(s1 - s0)
            pending = [p for p in shared if p not in done]
            plan.shared.append(pending)
            for p in pending:
                plan.waiting[p] = plan.waiting.get(p, 0) + 1
        k0 = k1
    return plan


def make_plan(
    src: PairSource,
    layout: BetonLayout,
    order: Permutation | None,
    done: set[int],
    workers: int,
) -> Plan:
    """The tasks that write every page not in ``done``."""
    if isinstance(src, BatchedSource):
        return _scatter(src, layout, order, done, workers)
    return _gather(layout, done, workers)
