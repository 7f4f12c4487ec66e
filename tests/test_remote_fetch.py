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
