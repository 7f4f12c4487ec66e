"""What a remote dataset costs in bytes: opening reads each shard's header, field table and
metadata (not the rest of the header's page, not the allocation table of raw fields), and a
shard's download reads its samples and its allocation table, not its padding; a shard that
does not put together from those bytes is downloaded whole. The local folder is the remote
(``file://``); every read goes through fsspec's ``cat_file``, which is counted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fsspec.implementations.local import LocalFileSystem
from test_remote import SHARDS, batches, write_dataset

from ffcv_pairs import make_loader
from ffcv_pairs.format.joined import JoinedReader
from ffcv_pairs.format.schema import PairSchema
from ffcv_pairs.load import shard_cache
from ffcv_pairs.load.remote_dataset import open_remote


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote-fetch"))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every ``cat_file`` of the local file system: ``(path, bytes)``."""
    reads: list[tuple[str, int]] = []
    real = LocalFileSystem.cat_file

    def cat_file(fs: LocalFileSystem, path: str, *args: object, **kw: object) -> bytes:
        data = real(fs, path, *args, **kw)
        reads.append((str(path), len(data)))
        return data

    monkeypatch.setattr(LocalFileSystem, "cat_file", cat_file)
    return reads


def _needed(dataset: Path) -> tuple[int, int]:
    """``(opening, shards)``: the bytes of each shard's header, field table and metadata,
    and of its samples (first byte to last) and allocation table."""
    reader = JoinedReader(dataset)
    opening = shards = 0
    for shard in reader.shards:
        ptrs = [shard.image_pointers(name) for name in PairSchema.IMAGE_FIELDS]
        last = max(int(np.max(p)) + shard.schema.spec(n).nbytes
                   for p, n in zip(ptrs, PairSchema.IMAGE_FIELDS))  # fmt: skip
        first = min(int(np.min(p)) for p in ptrs)
        alloc = int(shard.header["alloc_table_ptr"])
        opening += shard.metadata_end
        shards += last - first + shard.file_size - alloc
    return opening, shards


def test_a_node_reads_the_tables_and_samples_and_no_padding(
    dataset: Path, tmp_path: Path, counted: list[tuple[str, int]]
) -> None:
    opening, shards = _needed(dataset)
    files = sum(p.stat().st_size for p in dataset.parent.rglob("*") if p.is_file())
    beside = sum(n for path, n in counted if not path.endswith(".beton"))
    reader = open_remote(f"file://{dataset}", tmp_path, None)
    at_open = sum(n for path, n in counted if path.endswith(".beton"))
    assert at_open == opening
    assert len(reader.shards) == SHARDS
    del counted[:]
    got = batches(f"file://{dataset}", 2, cache_dir=tmp_path)
    assert got == batches(dataset, 2)
    fetched = sum(n for path, n in counted if path.endswith(".beton"))
    assert fetched == shards  # each shard once: its samples and its allocation table
    stored = sum(p.stat().st_size for p in dataset.parent.glob("parts/*.beton"))
    assert opening + shards < stored  # the header's page and the last page's padding
    assert beside < files


def test_a_shard_that_does_not_assemble_is_downloaded_whole(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the writer had left bytes where the assembly puts zeros: its digest fails.
    wholes = []
    real = shard_cache.ShardCache._download

    def noted(cache: shard_cache.ShardCache, k: int, partial: Path, assemble: bool) -> str | None:
        assert cache.assembly is not None
        if assemble:
            how = cache.assembly[k]
            cache.assembly[k] = replace(how, kept=how.kept[1:])  # no header from the skeleton
        wholes.append(not assemble)
        return real(cache, k, partial, assemble)

    monkeypatch.setattr(shard_cache.ShardCache, "_download", noted)
    got = batches(f"file://{dataset}", 1, order="sequential", cache_dir=tmp_path)
    assert got == batches(dataset, 1, order="sequential")
    assert wholes == [False, True] * SHARDS


def test_the_simulators_byte_model_is_the_loaders(dataset: Path, tmp_path: Path) -> None:
    from bench.tables.node_order_sim import SimConfig
    from bench.tables.remote_sim import shard_bytes

    reader = open_remote(f"file://{dataset}", tmp_path, None)
    shard = reader.shards[0]
    slot = shard.schema.slot_bytes
    sim = SimConfig(page_samples=int(shard.page_size) // slot, sample_bytes=slot)
    model = shard_bytes(sim, np.diff(reader.offsets))
    opening, fetched = _needed(dataset)
    assert int(model["opening"].sum()) == opening
    assert int(model["fetched"].sum()) == fetched
    assert model["held"].tolist() == reader.cache.held


def test_a_node_window_fits_a_cache_the_rank_windows_overflow(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 ranks of one node, windows of 2 pages (4 samples a page, 10 pages a shard): a
    window each reads more than 3 of the 6 shards over two batches, so a limit of 3 shards
    is refused; one window for the node (node_window=True) reads fewer, and its batches are
    the local dataset's under the same order."""
    from test_remote import shard_bytes

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    limit = 3 * shard_bytes(dataset)
    kw = {"batch_size": 4, "seed": 5, "window_bytes": 8192, "partition": "node", "world_size": 2}
    with pytest.raises(ValueError, match=f"cache_limit {limit} bytes is below the"):
        make_loader(f"file://{dataset}", **kw, rank=0, cache_dir=tmp_path, cache_limit=limit)
    kw["node_window"] = True
    for rank in range(2):
        remote = make_loader(
            f"file://{dataset}", **kw, rank=rank, cache_dir=tmp_path, cache_limit=limit
        )
        assert remote.spec.shard_pages == tuple(int(b) // 4096 for b in JoinedReader(dataset).bases)
        local = make_loader(dataset, **kw, rank=rank)
        got = [tuple(t.numpy().tobytes() for t in b) for b in remote]
        assert got == [tuple(t.numpy().tobytes() for t in b) for b in local]
    with pytest.raises(ValueError, match="node_window=True shares a node's window"):
        make_loader(dataset, batch_size=4, node_window=True)
