"""Real multi-process gloo runs on CPU: 2 and 3 ranks over one file."""

from __future__ import annotations

import pickle
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import make_arrays

from ffcv_pairs import ArraySource, PairReader, make_loader, write_pairs
from ffcv_pairs.load.index import PageIndex

BATCH = 16


def _rank_main(rank: int, world: int, path: str, out_dir: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"file://{out_dir}/pg",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),  # a rank left waiting fails the test, not hangs it
    )
    try:
        loader = make_loader(path, batch_size=BATCH, seed=7, num_threads=1, window_bytes=2 * 4096)
        a = np.load(f"{out_dir}/a.npy")
        result = {"len": len(loader), "rank": loader.rank, "world": loader.world_size, "epochs": []}
        for epoch in (0, 1, 0):
            loader.set_epoch(epoch)
            ids = []
            for xa, _, label in loader:
                ids.append(label.numpy().copy())
                assert xa.numpy().tobytes() == a[label.numpy()].tobytes()
            result["epochs"].append(np.concatenate(ids))
        # Without drop_last the shares differ by one sample (997 over 2 or 3 ranks), which
        # at batch 2 would be one batch more on some ranks: DDP's all-reduce at the last
        # step would wait forever. Padding by wrapping gives every rank the same length.
        loader = make_loader(path, batch_size=2, drop_last=False, num_threads=1)
        ids, steps = [], torch.zeros(1)
        for _, _, label in loader:
            dist.all_reduce(steps)  # what DDP does at every backward
            ids.append(label.numpy().copy())
        result["padded"] = np.concatenate(ids)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(f"{out_dir}/rank{rank}.pkl", "wb") as f:
        pickle.dump(result, f)


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_ranks(tmp_path: Path, world: int) -> None:
    n = 997
    a, b, labels = make_arrays(n, (3, 8, 8))
    np.save(tmp_path / "a.npy", a)
    path = tmp_path / "d.beton"
    write_pairs(ArraySource(a, b, labels), path, page_size=4096, progress=False)
    mp.spawn(_rank_main, args=(world, str(path), str(tmp_path)), nprocs=world, join=True)
    results = [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(world)]

    assert [r["rank"] for r in results] == list(range(world))
    assert {r["world"] for r in results} == {world}
    assert len({r["len"] for r in results}) == 1, "every rank must have the same len()"
    for epoch in (0, 1):
        per_rank = [r["epochs"][epoch] for r in results]
        assert all(len(x) == results[0]["len"] * BATCH for x in per_rank)
        union = np.concatenate(per_rank)
        assert len(np.unique(union)) == len(union), "ranks must be disjoint"
        assert 0 <= n - len(union) < world * BATCH
    padded = [r["padded"] for r in results]
    assert len({len(p) for p in padded}) == 1, "equal lengths without drop_last"
    union = np.concatenate(padded)
    assert set(union.tolist()) == set(range(n)) and len(union) - n < world
    for r in results:
        np.testing.assert_array_equal(r["epochs"][0], r["epochs"][2])  # same seed+epoch
        assert not np.array_equal(r["epochs"][0], r["epochs"][1])  # epochs differ
    # Page-local: a batch touches a bounded number of pages (window 2 + spill).
    reader = PairReader(path)
    idx = PageIndex.build(reader)
    for r in results:
        pages = idx.page_lookup(reader, r["epochs"][0])
        worst = max(len(np.unique(pages[i : i + BATCH])) for i in range(0, len(pages), BATCH))
        assert worst <= 2 + -(-BATCH // 10) + 1
