"""Simulated distributed ranks: ``world_size`` spawned processes reading one file.

Each rank is a fresh interpreter (``multiprocessing`` spawn, as torchrun would
start it) and builds its own loader with ``rank=r, world_size=w``:

* ``"ours"``: ``make_loader(..., rank=r, world_size=w)`` (threads: cores / ranks).
* ``"pt"``: the per-sample ``.pt`` Dataset under a ``DataLoader`` with a
  ``DistributedSampler`` and ``workers`` worker processes per rank.

No process group is needed: the ranks only read.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
from typing import Any

from bench.core.main_data import DataPaths
from bench.core.settings import BenchConfig
from bench.core.timing import LoaderSource, run_epochs, run_gaps

__all__ = ["RankGroup"]

_START_TIMEOUT = 600.0
_GRACE = 2.0
_STEADY_TIMEOUT = 180.0


def _build(kind: str, rank: int, cfg: BenchConfig, paths: DataPaths, workers: int) -> Any:
    if kind == "ours":
        from ffcv_pairs import make_loader

        loader = make_loader(
            paths.beton,
            batch_size=cfg.batch_size,
            order="quasi_random",
            seed=cfg.seed,
            rank=rank,
            world_size=cfg.world_size,
        )
        return LoaderSource(loader, set_epoch=loader.set_epoch, close=loader.close)
    from torch.utils.data.distributed import DistributedSampler

    from bench.contest.torch_sets import PerSamplePt, close_dataloader, make_dataloader

    ds = PerSamplePt(paths.pt_dir, cfg.n)
    sampler = DistributedSampler(
        ds, num_replicas=cfg.world_size, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True
    )
    dl = make_dataloader(ds, cfg.batch_size, seed=cfg.seed, sampler=sampler, workers=workers)
    return LoaderSource(dl, set_epoch=sampler.set_epoch, close=lambda: close_dataloader(dl))


def _rank_main(
    kind: str,
    rank: int,
    cfg: BenchConfig,
    paths: DataPaths,
    workers: int,
    commands: Any,
    results: Any,
) -> None:
    import time

    import torch.utils.data  # noqa: F401 - imports are not part of the build time

    if kind == "ours":
        import ffcv_pairs.load.loader  # noqa: F401

    t = time.perf_counter()
    try:
        source = _build(kind, rank, cfg, paths, workers)
    except Exception as e:
        results.put({"rank": rank, "error": f"{type(e).__name__}: {e}"})
        return
    results.put({"rank": rank, "build_s": time.perf_counter() - t})
    while True:
        msg = commands.get()
        if msg["cmd"] == "stop":
            source.close()
            results.put({"rank": rank, "stopped": True})
            return
        kw = {k: v for k, v in msg.items() if k != "cmd"}
        results.put({"rank": rank, **run_epochs(source, **kw)})


def _merge(per_rank: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One timeline: epoch k spans from the earliest rank's start to the latest's end."""
    merged = []
    for k in range(min(len(r["epochs"]) for r in per_rank)):
        marks = [r["epochs"][k] for r in per_rank]
        firsts = [m["first"] for m in marks if m["first"] is not None]
        lasts = [m["last"] for m in marks if m["last"] is not None]
        merged.append(
            {
                "epoch": marks[0]["epoch"],
                "start": min(m["start"] for m in marks),
                "first": min(firsts) if firsts else None,
                "last": max(lasts) if lasts else None,
                "first_n": sum(m["first_n"] for m in marks),
                "samples": sum(m["samples"] for m in marks),
                "batches": sum(m["batches"] for m in marks),
                "complete": all(m["complete"] for m in marks),
            }
        )
    return merged


class RankGroup:
    """``cfg.world_size`` ranks of ``kind``; :meth:`run` runs them together.

    Attributes:
        build_s: The slowest rank's loader construction (imports not included).
    """

    def __init__(self, kind: str, cfg: BenchConfig, paths: DataPaths, workers: int = 0):
        ctx = mp.get_context("spawn")
        self.cfg, self.kind = cfg, kind
        self.commands = [ctx.Queue() for _ in range(cfg.world_size)]
        self.results = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_rank_main,
                args=(kind, r, cfg, paths, workers, self.commands[r], self.results),
                name=f"bench-rank{r}",
            )
            for r in range(cfg.world_size)
        ]
        for p in self.procs:
            p.start()
        ready, complete = self._gather(_START_TIMEOUT)
        if not complete:
            self._kill()
            raise RuntimeError("simulated ranks did not start in time")
        errors = [r["error"] for r in ready if "error" in r]
        if errors:
            self.close()
            raise RuntimeError(f"a simulated rank failed to start: {errors[0]}")
        self.build_s = max(r["build_s"] for r in ready)

    def _gather(self, timeout: float) -> tuple[list[dict[str, Any]], bool]:
        """Answers of the ranks that answered within ``timeout``; and whether all did."""
        import time

        out: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while len(out) < len(self.procs):
            try:
                msg = self.results.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return [out[r] for r in sorted(out)], False
            out[msg["rank"]] = msg
        return [out[r] for r in sorted(out)], True

    def run(
        self,
        *,
        first_epoch: int,
        min_epochs: int,
        min_seconds: float,
        time_box: float,
        abandon: bool,
        min_batches: int = 1,
    ) -> dict[str, Any]:
        """Every rank runs the same epochs: ``cfg.rank_epochs`` (or until the time box).

        With ``abandon``, ranks still busy ``time_box`` + 2 s after the start (or,
        when ``min_batches`` > 0, 180 s) are killed (their memory was sampled
        meanwhile) and the result has no epochs.
        """
        del min_epochs, min_seconds  # equal work per rank: a fixed number of epochs
        kw = {
            "first_epoch": first_epoch,
            "min_epochs": self.cfg.rank_epochs,
            "min_seconds": 0.0,
            "time_box": time_box,
            "abandon": abandon,
            "min_batches": min_batches,
        }
        for q in self.commands:
            q.put({"cmd": "run", **kw})
        wait = _START_TIMEOUT
        if abandon:
            wait = time_box + (_STEADY_TIMEOUT if min_batches > 0 else _GRACE)
        per_rank, complete = self._gather(wait)
        if not complete:
            if not abandon:
                raise RuntimeError("simulated ranks did not finish their epochs")
            self._kill()
            return {"epochs": [], "next_epoch": first_epoch, "gaps": [], "killed": True}
        errors = [r["error"] for r in per_rank if "error" in r]
        if errors:
            raise RuntimeError(f"a simulated rank failed: {errors[0]}")
        gaps = [g for r in per_rank for g in run_gaps(r["epochs"])]
        return {"epochs": _merge(per_rank), "next_epoch": per_rank[0]["next_epoch"], "gaps": gaps}

    def _kill(self) -> None:
        """Kill every rank and its DataLoader workers (a graceful stop waits for batches)."""
        import psutil

        for p in self.procs:
            try:
                root = psutil.Process(p.pid)
                tree = [*root.children(recursive=True), root]
            except psutil.Error:
                continue
            for proc in tree:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        for p in self.procs:
            p.join(timeout=10)

    def close(self) -> None:
        if self.kind == "pt":
            self._kill()
            return
        for q, p in zip(self.commands, self.procs):
            if p.is_alive():
                q.put({"cmd": "stop"})
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
