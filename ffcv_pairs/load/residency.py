"""A remote dataset's shards mapped while a batch reads them, fetched ahead by the plan.

The loader reads a dataset of shards through one address range (shard ``k`` at byte
``bases[k]``, see :mod:`~.joined_mapping`). For a remote dataset the range starts
reserved and inaccessible (``PROT_NONE``), and :class:`ResidentContext` (the OS-cache
memory context of a :class:`~.remote_dataset.RemoteReader`) keeps it in step with the
batches:

* **Before batch b** (``start_batch``, called by the epoch thread before its kernels run):
  the shards batch ``b`` reads are made present (waiting for, or doing, their download)
  and mapped over their part of the range with ``MAP_FIXED``, each under a shared lock
  of its ``.use`` file (the node's count of mappings, see :mod:`~.shard_cache`); shards
  mapped for earlier batches that batch ``b`` does not read are made ``PROT_NONE`` again
  and their locks dropped, so the cache may evict them.
* **Ahead** (a helper thread): the shards of the next :data:`AHEAD_STEPS` batches are
  fetched, in plan order, each only if the cache has room or holds a shard used later
  than it (Belady's rule for prefetch: never fetch ahead what would push out something
  needed sooner).
* **The plan** each eviction weighs is the node's: every local rank writes its epoch's
  plan (the shards of each of its batches) to the cache's ``jobs/<job>/`` folder when
  its epoch starts, and each reads the others' (:func:`~.cache_plan.merge_plans`),
  taking its own batch as the node's step (DDP keeps the ranks within a few batches).

A ``cache_limit`` below what two consecutive batches read (:func:`~.cache_plan.needed_bytes`)
is refused, naming both numbers: by ``make_loader``, over every local rank's plan of the
first epoch (:func:`check_cache`, the same on every rank), and when each later epoch
starts, over this rank's. A fetch that finds no room (ranks far out of step) waits for
ranks to unmap shards, then fails naming the limit.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from ffcv.memory_managers.os_cache import OSCacheContext

from .cache_plan import Plan, merge_plans, needed_bytes, next_uses, plan_of
from .elastic import resumed_order
from .joined_mapping import Reserved
from .remote_dataset import RemoteReader
from .world import local_ranks

__all__ = ["AHEAD_STEPS", "ResidentContext", "check_cache", "job_name"]

log = logging.getLogger(__name__)

#: Batches the fetch-ahead thread looks ahead.
AHEAD_STEPS = 8


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_name() -> str:
    """What names this job's shared state: ``FFCV_PAIRS_JOB``, else the launcher's job id
    (torchrun's ``TORCHELASTIC_RUN_ID``, Slurm's ``SLURM_JOB_ID``), else the rendezvous
    address, else ``"local"``."""
    for name in ("FFCV_PAIRS_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        value = os.environ.get(name, "")
        if value and value != "none":
            return "".join(c if c.isalnum() or c in "-_." else "_" for c in value)[:64]
    if "MASTER_ADDR" in os.environ:
        return f"{os.environ['MASTER_ADDR']}_{os.environ.get('MASTER_PORT', '')}"
    return "local"


class ResidentContext(OSCacheContext):
    """The memory context of a remote dataset (see the module docstring)."""

    def __init__(self, manager: Any, reader: RemoteReader):
        super().__init__(manager)
        self.reader, self.cache = reader, reader.cache
        self.sizes = np.asarray([e.bytes for e in self.cache.entries], dtype=np.int64)
        self.held = np.asarray(self.cache.held, dtype=np.int64)  # what the limit counts
        self.bases = [int(b) for b in reader.bases]
        self.reserved = Reserved(reader.file_size)
        self.mmap = self.reserved.array
        self.jobs = self.cache.root / "jobs" / job_name()
        self.jobs.mkdir(parents=True, exist_ok=True)
        self.me = f"{os.getpid()}-{id(self):x}"  # a plan's writer: its process, and which
        self.mapped: dict[int, int] = {}  # shard -> descriptor holding its .use lock
        self.epochs = 0
        self.own = self.node = Plan(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self._seen: frozenset[str] = frozenset()
        self.step = 0
        self._moved = threading.Condition()
        self._stop = threading.Event()
        self._ahead: threading.Thread | None = None

    # -- the epoch ------------------------------------------------------------------------
    def schedule(self, batches: Sequence[np.ndarray]) -> None:
        """Take the epoch's batches: publish this rank's plan, check the limit against it,
        start fetching ahead.

        Raises:
            ValueError: ``cache_limit`` below what the plan needs (both numbers named).
        """
        self.own = plan_of(batches, self.reader.offsets)
        self.epochs += 1
        self.step = 0
        mine = self.jobs / f"plan-{self.epochs}-{self.me}.npz"
        tmp = mine.with_name(f".{mine.name}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, ptr=self.own.ptr, shards=self.own.shards)
        os.replace(tmp, mine)
        self._seen = frozenset()
        self.check_limit(self.own)

    def check_limit(self, plan: Plan) -> None:
        """Refuse a ``cache_limit`` below what two consecutive steps of ``plan`` read.

        Raises:
            ValueError: naming the limit and the bytes needed.
        """
        limit = self.cache.limit
        need = needed_bytes(plan, self.held)
        if limit is not None and limit < need:
            raise ValueError(
                f"{self.reader.url}: cache_limit {limit} bytes is below the {need} bytes that "
                f"two consecutive batches of this epoch's order read (their shards); raise "
                f"cache_limit to at least {need}, or read with a smaller window_bytes"
            )

    def _uses(self) -> np.ndarray:
        """Each shard's next use in the node's plan, from this rank's step."""
        files = frozenset(p.name for p in self.jobs.glob(f"plan-{self.epochs}-*.npz"))
        if files != self._seen:  # another rank wrote its plan, or one went away
            self._seen, plans = files, [self.own]
            for name in sorted(files):
                writer = name.split("-")[2]
                if name.endswith(f"-{self.me}.npz"):
                    continue
                if not _alive(int(writer)):
                    (self.jobs / name).unlink(missing_ok=True)  # a killed rank's
                    continue
                try:
                    with np.load(self.jobs / name) as held:
                        plans.append(Plan(held["ptr"], held["shards"]))
                except (OSError, ValueError, KeyError):
                    continue  # being replaced: it counts next time
            self.node = merge_plans(plans)
        return next_uses(self.node, self.step, len(self.sizes))

    def __enter__(self) -> Any:
        result = super().__enter__()
        self._stop = stop = threading.Event()  # this epoch's: an old thread stays stopped
        self._ahead = threading.Thread(
            target=self._fetch_ahead, args=(stop,), daemon=True, name="ffcv-ahead"
        )
        self._ahead.start()
        return result

    def start_batch(self, batch: int) -> None:
        """Map the shards batch ``batch`` reads (fetching them first), unmap the rest."""
        want = set(self.own.at(batch).tolist()) if batch < self.own.steps else set()
        with self._moved:
            self.step = batch
            self._moved.notify_all()
        for k in sorted(set(self.mapped) - want):
            self._unmap(k)
        for k in sorted(want - set(self.mapped)):
            fd = os.open(self.cache.lock(k, "use"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits out an eviction in progress
                self.cache.fetch(k, self._uses())
                self.reserved.map_file(self.cache.local(k), self.bases[k], int(self.sizes[k]))
            except BaseException:
                os.close(fd)
                raise
            self.mapped[k] = fd

    def _unmap(self, k: int) -> None:
        self.reserved.release(self.bases[k], int(self.sizes[k]))
        os.close(self.mapped.pop(k))

    def __exit__(self, *exc: Any) -> Any:
        self._stop.set()
        with self._moved:
            self._moved.notify_all()
        if self._ahead is not None and self._ahead is not threading.current_thread():
            self._ahead.join(1.0)  # one in a long download ends after it, on its own
        for k in list(self.mapped):
            self._unmap(k)
        # The epoch is over (or abandoned) here: its plan no longer weighs on evictions.
        (self.jobs / f"plan-{self.epochs}-{self.me}.npz").unlink(missing_ok=True)
        return super().__exit__(*exc)

    # -- ahead ----------------------------------------------------------------------------
    def _upcoming(self, step: int) -> list[int]:
        """The shards of the next steps that are not present, in the order of first use."""
        end = min(step + 1 + AHEAD_STEPS, self.own.steps)
        seen: dict[int, None] = {}
        for s in range(step + 1, end):
            seen.update((k, None) for k in self.own.at(s).tolist() if not self.cache.present(k))
        return list(seen)

    def _fetch_ahead(self, stop: threading.Event) -> None:
        """Fetch the next steps' shards while there is room for them (see the module)."""
        try:
            while not stop.is_set():
                step = self.step
                for k in self._upcoming(step):
                    if stop.is_set() or not self.cache.fetch(k, self._uses(), ahead=True):
                        break  # no room without pushing out something needed sooner
                with self._moved:
                    if self.step == step and not stop.is_set():
                        self._moved.wait(0.5)
        except Exception as e:  # the batch thread fetches for itself, and raises there
            log.warning("%s: fetching ahead stopped: %s", self.reader.url, e)


def check_cache(loader: Any) -> Any:
    """``loader`` (a :class:`~.loader.PairLoader`), after checking, for a remote dataset,
    that its ``cache_limit`` holds what two consecutive batches of its next epoch read on
    all the ranks of its node (their orders are pure functions, computed here): at
    start-up, the same on every rank.

    Raises:
        ValueError: naming the limit and the bytes needed (see
            :meth:`ResidentContext.check_limit`).
    """
    context = getattr(loader._engine.memory_manager, "context", None)
    if not isinstance(context, ResidentContext):
        return loader
    epoch, size, samples = loader._next_epoch, loader.batch_size, loader.samples
    local = local_ranks(loader.world_size)
    first = loader.rank - loader.rank % local
    plans = []
    for rank in range(first, min(first + local, loader.world_size)):
        spec = replace(loader.spec, rank=rank)
        order = samples.ids(epoch, resumed_order(samples.index(epoch), spec, epoch))
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        plans.append(plan_of(batches, loader.reader.offsets))
    context.check_limit(merge_plans(plans))
    return loader
