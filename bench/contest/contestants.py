"""Who competes, and how each one is built inside its own process.

Every contestant reads the same pairs (see :mod:`bench.core.main_data`) in batches of
``cfg.batch_size`` (the time-boxed ``.pt`` pack rows use ``cfg.slow_batch_size``
so that some batches arrive inside the time box; their per-sample cost does not
depend on it). Builders run in the contestant's process, never in the
orchestrator. A table with rows of its own passes its own builder
(:func:`bench.tables.augops.build_aug_source`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.core.main_data import DataPaths
from bench.core.settings import BenchConfig
from bench.core.timing import LoaderSource

__all__ = [
    "CONTESTANTS",
    "Contestant",
    "MemcpySource",
    "build_source",
    "is_rank_group",
]


@dataclass(frozen=True)
class Contestant:
    """One row of the throughput table.

    Attributes:
        key: Short id used in the JSON and on the command line.
        title: Row title in the report.
        venv: ``None`` (the project's venv) or an extra's name (``litdata``, ``streaming``).
        slow: Time-boxed: stopped mid-epoch at the time box, rebuilt every round.
        ours: A configuration of this project's loader.
    """

    key: str
    title: str
    venv: str | None = None
    slow: bool = False
    ours: bool = False


CONTESTANTS: dict[str, Contestant] = {
    c.key: c
    for c in (
        Contestant("pt_per_sample", "per-sample .pt files, DataLoader"),
        Contestant("pt_pack", ".pt packs of 1000, torch.load per item", slow=True),
        Contestant("pt_pack_mmap", ".pt packs of 1000, torch.load(mmap=True) per item", slow=True),
        Contestant("pt_pack_lru", ".pt packs of 1000, LRU of open packs per worker", slow=True),
        Contestant("npy_memmap", "numpy memmap, __getitems__ batches, DataLoader"),
        Contestant("ffcv_random", "upstream ffcv Loader, RANDOM"),
        Contestant("ffcv_quasi", "upstream ffcv Loader, QUASI_RANDOM"),
        Contestant("litdata", "LitData StreamingDataset/StreamingDataLoader", venv="litdata"),
        Contestant("streaming", "MosaicML Streaming StreamingDataset", venv="streaming"),
        Contestant("ours", "ffcv-pairs make_loader, quasi_random", ours=True),
        Contestant("ours_aug", "ffcv-pairs make_loader, quasi_random + paired aug", ours=True),
        Contestant("ours_4ranks", "ffcv-pairs make_loader, 4 simulated ranks", ours=True),
        Contestant("memcpy", "limit: memcpy of the .beton data region"),
    )
}


def data_region(path: os.PathLike[str]) -> tuple[int, int]:
    """``[start, end)`` bytes of the data pages of a pair `.beton`."""
    from ffcv_pairs import PairReader

    reader = PairReader(path)
    ptrs = np.asarray(reader.image_pointers("A"))
    page = int(reader.page_size)
    return int(ptrs.min()) // page * page, int(reader.header["alloc_table_ptr"])


class MemcpySource:
    """The limit: ``np.copyto`` of the whole data region into a pre-touched array.

    One "epoch" is one copy and counts as all ``n`` samples.
    """

    def __init__(self, path: os.PathLike[str], n: int):
        start, end = data_region(path)
        self.region = np.memmap(path, dtype=np.uint8, mode="r")[start:end]
        self.dst = np.empty(end - start, dtype=np.uint8)
        self.dst.fill(1)
        self.n = n

    def epoch(self, index: int) -> Iterator[int]:
        np.copyto(self.dst, self.region)
        yield self.n

    def count(self, batch: int) -> int:
        return batch

    def close(self) -> None:
        pass


def _torch_source(key: str, cfg: BenchConfig, paths: DataPaths) -> LoaderSource:
    from bench.contest.torch_sets import (
        MemmapPairs,
        PackPt,
        PerSamplePt,
        close_dataloader,
        make_dataloader,
        passthrough,
    )

    bs, seed = cfg.batch_size, cfg.seed
    if key == "pt_per_sample":
        dl = make_dataloader(PerSamplePt(paths.pt_dir, cfg.n), bs, seed=seed)
    elif key == "npy_memmap":
        dl = make_dataloader(MemmapPairs(paths.npy_dir), bs, seed=seed, collate=passthrough)
    else:
        mmap, lru = key == "pt_pack_mmap", cfg.lru_packs if key == "pt_pack_lru" else 0
        ds = PackPt(paths.pack_dir, cfg.n, cfg.pack_size, mmap=mmap, lru=lru)
        dl = make_dataloader(ds, cfg.slow_batch_size, seed=seed)
    return LoaderSource(dl, close=lambda: close_dataloader(dl))


def _ffcv_source(key: str, cfg: BenchConfig, paths: DataPaths) -> LoaderSource:
    from ffcv.loader import Loader, OrderOption

    order = OrderOption.RANDOM if key == "ffcv_random" else OrderOption.QUASI_RANDOM
    loader = Loader(
        str(paths.beton),
        batch_size=cfg.batch_size,
        num_workers=len(os.sched_getaffinity(0)),
        order=order,
        os_cache=True,
        drop_last=True,
        seed=cfg.seed,
    )
    return LoaderSource(loader)


def _ours_source(key: str, cfg: BenchConfig, paths: DataPaths) -> LoaderSource:
    from ffcv_pairs import PairAugment, make_loader

    augment = PairAugment(hflip=0.5, crop=cfg.shape[1:], crop_padding=4)
    loader = make_loader(
        paths.beton,
        batch_size=cfg.batch_size,
        order="quasi_random",
        seed=cfg.seed,
        augment=augment if key == "ours_aug" else None,
    )
    return LoaderSource(loader, set_epoch=loader.set_epoch, close=loader.close)


def is_rank_group(key: str) -> bool:
    """Contestant ``key`` is a group of simulated ranks
    (:class:`bench.contest.rank_group.RankGroup`)."""
    return key == "ours_4ranks" or key.startswith("pt_ranks_w")


def build_source(key: str, cfg: BenchConfig, paths: DataPaths) -> Any:
    """The :class:`bench.core.timing.EpochSource` of contestant ``key`` (project venv only)."""
    if key in ("pt_per_sample", "pt_pack", "pt_pack_mmap", "pt_pack_lru", "npy_memmap"):
        return _torch_source(key, cfg, paths)
    if key in ("ffcv_random", "ffcv_quasi"):
        return _ffcv_source(key, cfg, paths)
    if key in ("ours", "ours_aug"):
        return _ours_source(key, cfg, paths)
    if is_rank_group(key):
        from bench.contest.rank_group import RankGroup

        if key == "ours_4ranks":
            return RankGroup("ours", cfg, paths)
        return RankGroup("pt", cfg, paths, workers=int(key.removeprefix("pt_ranks_w")))
    if key == "memcpy":
        return MemcpySource(paths.beton, cfg.n)
    raise ValueError(f"unknown contestant {key!r}; must be one of {sorted(CONTESTANTS)}")
