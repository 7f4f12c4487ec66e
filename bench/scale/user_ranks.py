"""One node of simulated ranks, as a user trains: ``torch.distributed`` (gloo on CPU), one
loader per rank, no model.

Each rank is a spawned interpreter (as torchrun starts it) with ``RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set; it
joins a gloo process group, builds its loader (timed: construction, then the first
batch) and reads batches. Kinds:

* ``ours``: ``make_loader(beton, batch_size, order="quasi_random", augment=...)``,
  sharded by the process group.
* ``lists``: :class:`bench.scale.user_sets.PathLists` under a ``DataLoader`` with a
  ``DistributedSampler`` and ``workers`` worker processes: the user's setup.
* ``packs``: :class:`bench.scale.user_sets.PackFiles`, one ``torch.load`` per pack of 1000,
  collated into a batch, under the same ``DataLoader`` setup.

A rank reads epochs until ``time_box`` seconds passed since its first batch and,
for ``ours`` (unless ``epoch_gap`` is off), until it crossed an epoch boundary (to measure
the gap), but never beyond ``cap`` seconds after it started. It sends its counters to the
harness twice a second, so a rank that is killed still leaves what it did.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any

__all__ = ["RowSpec", "rank_main"]


@dataclass(frozen=True)
class RowSpec:
    """One row of the user-scale table.

    Attributes:
        kind: ``ours``, ``lists`` or ``packs``.
        title: Row title in the report.
        world_size: Ranks.
        batch_size: Samples per batch on each rank (``packs``: one pack per batch).
        workers: DataLoader workers per rank (not used by ``ours``).
        n: Pairs.
        pack_size: Samples per pack.
        beton: The `.beton` (``ours``).
        src: Folder of the per-sample files (``lists``).
        packs: Folder of the packs (``packs``).
        crop: ``(H, W)`` of the paired crop (``ours``).
        crop_padding: Padding of the paired crop (``ours``).
        seed: Order seed.
        time_box: Seconds of reading after a rank's first batch.
        cap: Seconds after the rank's start (and the harness's launch of the row, plus a
            margin: :func:`bench.scale.user_node.run_row`) after which it stops however far it
            got.
        epoch_gap: ``ours`` reads past an epoch boundary, to measure the gap (off: the start-up
            of 1 rank alone needs none).
    """

    kind: str
    title: str
    world_size: int
    batch_size: int
    workers: int
    n: int
    pack_size: int
    beton: str
    src: str
    packs: str
    crop: tuple[int, int]
    crop_padding: int
    seed: int
    time_box: float
    cap: float
    epoch_gap: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("ours", "lists", "packs"):
            raise ValueError(f"kind must be one of ours, lists, packs, got {self.kind!r}")


def _build(spec: RowSpec, rank: int) -> tuple[Any, Any]:
    """``(loader, set_epoch)`` of this rank."""
    if spec.kind == "ours":
        from ffcv_pairs import PairAugment, make_loader

        augment = PairAugment(hflip=0.5, crop=spec.crop, crop_padding=spec.crop_padding)
        loader = make_loader(
            spec.beton,
            batch_size=spec.batch_size,
            order="quasi_random",
            seed=spec.seed,
            augment=augment,
        )
        return loader, loader.set_epoch
    from torch.utils.data.distributed import DistributedSampler

    from bench.contest.torch_sets import make_dataloader
    from bench.scale.user_sets import PackFiles, PathLists, one_pack

    if spec.kind == "lists":
        ds: Any = PathLists(spec.src, spec.n)
        bs, collate = spec.batch_size, None
    else:
        ds, bs, collate = PackFiles(spec.packs, spec.n, spec.pack_size), 1, one_pack
    sampler: Any = DistributedSampler(ds, shuffle=True, seed=spec.seed, drop_last=True)
    dl = make_dataloader(
        ds, bs, seed=spec.seed, sampler=sampler, workers=spec.workers, collate=collate
    )
    return dl, sampler.set_epoch


def _env(rank: int, world: int, port: int) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )


def _pss_mb() -> float:
    import psutil

    return float(getattr(psutil.Process().memory_full_info(), "pss", 0)) / (1 << 20)


def rank_main(spec: RowSpec, rank: int, port: int, results: Any) -> None:
    """The body of one rank (a spawned process); puts its counters on ``results``."""
    t0 = time.perf_counter()
    st: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "samples": 0, "done": False}
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # 12 > 2 cores
    try:
        _env(rank, spec.world_size, port)
        import datetime

        import torch.distributed as dist

        if spec.kind == "ours":  # as a training script does, at its top
            from ffcv_pairs import PairAugment, make_loader  # noqa: F401
        t1 = time.perf_counter()
        st["import_s"] = t1 - t0
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=spec.cap))
        st["init_s"] = time.perf_counter() - t1
        st["pss_imports_mb"] = _pss_mb()
        t2, c2 = time.perf_counter(), time.process_time()
        loader, set_epoch = _build(spec, rank)
        st["build_s"] = time.perf_counter() - t2
        st["build_cpu_s"] = time.process_time() - c2
        _read(spec, loader, set_epoch, st, results, t0)
        st["done"] = True
    except Exception as e:
        st["error"] = f"{type(e).__name__}: {e}"
    results.put(dict(st))


def _gaps(gaps: list[float]) -> dict[str, Any]:
    if not gaps:
        return {"gap_n": 0}
    return {
        "gap_n": len(gaps),
        "gap_first": gaps[0],
        "gap_median": statistics.median(gaps),
        "gap_max": max(gaps),
    }


def _read(
    spec: RowSpec, loader: Any, set_epoch: Any, st: dict[str, Any], results: Any, began: float
) -> None:
    """Read until the time box (and, for ``ours``, an epoch boundary) or ``spec.cap`` seconds
    after ``began`` (the rank's start)."""
    start = sent = time.perf_counter()
    cpu = time.process_time()
    gaps: list[float] = []
    epoch, last_of_prev = 0, None
    while True:
        set_epoch(epoch)
        st["epoch"] = epoch
        for batch in loader:
            now = time.perf_counter()
            k = int(batch[2].shape[0])
            if "t_first" not in st:
                st.update(t_first=now, first_n=k, first_batch_s=now - start)
                st["first_batch_cpu_s"] = time.process_time() - cpu
            if last_of_prev is not None:
                gaps.append(now - last_of_prev)
                last_of_prev = None
            st["samples"] += k
            st["t_last"] = now
            boxed = now - st["t_first"] >= spec.time_box
            gapped = spec.kind != "ours" or gaps or not spec.epoch_gap
            if now - began >= spec.cap or (boxed and gapped):
                st["stopped"] = "cap" if now - began >= spec.cap else "time box"
                st.update(_gaps(gaps))
                return
            if now - sent >= 0.5:
                results.put({**st, **_gaps(gaps)})
                sent = now
        if "t_first" not in st:
            raise RuntimeError(f"epoch {epoch} of rank {st['rank']} had no batch")
        st["epochs_done"] = epoch + 1
        last_of_prev = st.get("t_last")
        epoch += 1
