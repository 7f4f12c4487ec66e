"""A dataset manifest read by URL through the node cache (load/remote_dataset.py,
load/shard_cache.py, load/residency.py), with a local folder as the remote (``file://``):
the batches of the local dataset, byte for byte, under a cache smaller than the dataset;
ranks sharing one cache; a corrupt, truncated or vanished shard refused by name; a mapped
shard, or one without a remote copy, never evicted; eviction by next use; a limit too small
for the order refused with its numbers; a download killed by SIGKILL redone on a rerun."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import make_arrays

from ffcv_pairs import (
    ArraySource,
    BetonError,
    PairAugment,
    PairDataModule,
    make_loader,
    write_pairs,
)
from ffcv_pairs.format.joined import JoinedReader
from ffcv_pairs.format.merging import merge_parts
from ffcv_pairs.format.schema import PairSchema
from ffcv_pairs.load import shard_cache
from ffcv_pairs.load.cache_plan import NEVER
from ffcv_pairs.load.pipeline import LoaderError
from ffcv_pairs.load.remote_dataset import open_remote

SHARDS = 6
PER = 40
KW = {"batch_size": 16, "seed": 5, "drop_last": False}
REPO = Path(__file__).resolve().parents[1]


def write_dataset(root: Path) -> Path:
    """SHARDS shards of PER seeded pairs under ``root``, and their manifest."""
    a, b, labels = make_arrays(SHARDS * PER, shape=(3, 12, 12), seed=7)
    shards = []
    for k in range(SHARDS):
        part = slice(k * PER, (k + 1) * PER)
        path = root / "parts" / f"s{k}.beton"
        source = ArraySource(a[part], b[part], labels[part])
        write_pairs(source, path, workers=1, progress=False, page_size=4096)
        shards.append(path)
    manifest = root / "train.json"
    merge_parts(shards, manifest).save(manifest)
    return manifest


@pytest.fixture(autouse=True)
def _bounded_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache that never frees room fails in seconds here, not after five minutes."""
    monkeypatch.setattr(shard_cache, "ROOM_WAIT_S", 20.0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote"))


@pytest.fixture
def remote(dataset: Path, tmp_path: Path) -> Path:
    """A copy of the dataset this test may damage."""
    shutil.copytree(dataset.parent, tmp_path / "bucket")
    return tmp_path / "bucket" / dataset.name


def shard_bytes(manifest: Path) -> int:
    """What a shard of ``manifest`` takes in a node cache (they are alike): its header,
    field table and metadata, its samples (first byte to last) and its allocation table;
    the rest of its file is a hole."""
    shard = JoinedReader(manifest).shards[0]
    ptrs = [shard.image_pointers(name) for name in PairSchema.IMAGE_FIELDS]
    first = min(int(np.min(p)) for p in ptrs)
    last = max(int(np.max(p)) + shard.schema.spec(name).nbytes
               for p, name in zip(ptrs, PairSchema.IMAGE_FIELDS))  # fmt: skip
    alloc = shard.file_size - int(shard.header["alloc_table_ptr"])
    return shard.metadata_end + last - first + alloc


def held_bytes(data: Path) -> int:
    """Bytes a cache's ``data/`` holds by its count (:attr:`ShardCache.held`): its shards
    and reserved downloads (one may go while they are listed), all alike here."""
    names = [p.name for p in data.iterdir() if p.suffix in (".beton", ".partial")]
    return len(names) * shard_bytes(data.parent / "meta" / "train.json")


def batches(path: str | Path, epochs: int = 2, **kw: object) -> list[tuple[bytes, ...]]:
    loader = make_loader(path, **{**KW, **kw})
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        out += [tuple(t.numpy().tobytes() for t in batch) for batch in loader]
    loader.close()
    return out


@pytest.mark.parametrize(
    ("order", "shards_held"), [("sequential", 2), ("quasi_random", SHARDS), ("random", SHARDS)]
)
def test_a_url_gives_the_local_batches(
    dataset: Path, tmp_path: Path, order: str, shards_held: int
) -> None:
    limit = shards_held * shard_bytes(dataset)
    got = batches(f"file://{dataset}", order=order, cache_dir=tmp_path, cache_limit=limit)
    assert got == batches(dataset, order=order)
    data = next(tmp_path.glob("train-*")) / "data"
    held = held_bytes(data)
    assert 0 < held <= limit
    assert not list(data.glob("*.partial"))
    assert not list(data.parent.glob("jobs/*/plan-*"))  # each epoch's plan goes with it


def test_ranks_share_one_cache(dataset: Path, tmp_path: Path) -> None:
    """Two ranks of one node, one cache_dir with room for two consecutive batches of both:
    each rank's batches are its local ones, and the cache never holds more than its limit.
    Room for one shard less is refused at start-up: the node's ranks read four shards over
    two batches, though each alone reads two."""
    one = shard_bytes(dataset)
    kw = {"order": "sequential", "world_size": 2, "cache_dir": tmp_path}
    with pytest.raises(ValueError, match=f"cache_limit {3 * one} bytes is below the {4 * one}"):
        make_loader(f"file://{dataset}", rank=1, **{**KW, **kw}, cache_limit=3 * one)
    limit = kw["cache_limit"] = 4 * one
    loaders = [make_loader(f"file://{dataset}", rank=r, **{**KW, **kw}) for r in range(2)]
    local = [make_loader(dataset, rank=r, world_size=2, order="sequential", **KW) for r in range(2)]
    data = next(tmp_path.glob("train-*")) / "data"
    for epoch in range(2):
        for loader in loaders + local:
            loader.set_epoch(epoch)
        for got, want in zip(zip(*loaders), zip(*local), strict=True):
            for g, w in zip(got, want):
                assert [t.numpy().tobytes() for t in g] == [t.numpy().tobytes() for t in w]
            assert held_bytes(data) <= limit


def test_a_limit_below_two_batches_of_shards_is_refused_at_start_up_with_the_numbers(
    dataset: Path, tmp_path: Path
) -> None:
    one = shard_bytes(dataset)
    with pytest.raises(ValueError, match=rf"cache_limit {2 * one} bytes is below the \d+ bytes"):
        make_loader(f"file://{dataset}", **KW, cache_dir=tmp_path, cache_limit=2 * one)
    with pytest.raises(ValueError, match=f"below its largest shard, {one} bytes"):
        make_loader(f"file://{dataset}", **KW, cache_dir=tmp_path, cache_limit=one - 1)


def test_a_url_needs_cache_dir_and_its_protocol_package(dataset: Path) -> None:
    with pytest.raises(ValueError, match="give cache_dir"):
        make_loader(f"file://{dataset}", **KW)
    try:
        import gcsfs  # noqa: F401

        pytest.skip("gcsfs is installed")
    except ImportError:
        pass
    with pytest.raises(ValueError, match=r"gs://bucket/train.json: gs:// needs .*ffcv-pairs\["):
        make_loader("gs://bucket/train.json", **KW, cache_dir="unused")


def test_a_corrupt_shard_is_refused_by_name_and_never_cached(remote: Path, tmp_path: Path) -> None:
    loader = make_loader(f"file://{remote}", **KW, cache_dir=tmp_path / "c", order="sequential")
    shard = remote.parent / "parts" / "s0.beton"
    with open(shard, "r+b") as f:  # a data byte: the skeleton's tables still match
        f.seek(shard.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(LoaderError, match=rf"{shard}: 3 downloads failed or did not match.*digest"):
        next(iter(loader))
    assert not list((tmp_path / "c").glob("*/data/*"))


def test_a_truncated_shard_is_refused_by_name(remote: Path, tmp_path: Path) -> None:
    loader = make_loader(f"file://{remote}", **KW, cache_dir=tmp_path / "c", order="sequential")
    shard = remote.parent / "parts" / "s0.beton"
    os.truncate(shard, shard.stat().st_size - 100)
    with pytest.raises(LoaderError, match=rf"{shard}: .*bytes arrived, the manifest lists"):
        next(iter(loader))


def test_a_download_corrupted_once_is_fetched_again(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = shard_cache.read_range, []

    def flaky(fs: object, path: str, start: int, end: int) -> bytes:
        block = real(fs, path, start, end)
        calls.append(len(block))
        return block[:-1] + b"\1" if len(calls) == 1 and block else block  # the first only

    monkeypatch.setattr(shard_cache, "read_range", flaky)
    got = batches(f"file://{remote}", 1, order="sequential", cache_dir=tmp_path / "c")
    assert got == batches(remote, 1, order="sequential")
    assert len(calls) > 1


def _cache(remote: Path, tmp_path: Path, shards: int) -> shard_cache.ShardCache:
    reader = open_remote(f"file://{remote}", tmp_path / "c", shards * shard_bytes(remote))
    return reader.cache


def test_eviction_takes_the_shard_used_furthest_ahead(remote: Path, tmp_path: Path) -> None:
    cache = _cache(remote, tmp_path, 2)
    uses = np.array([5, 1, 3, NEVER, 9, 9], dtype=np.int64)
    cache.fetch(0, uses)
    cache.fetch(1, uses)
    cache.fetch(2, uses)  # evicts shard 0 (next used at 5), keeps 1 (at 1)
    assert sorted(cache.cached()) == [1, 2]
    assert not cache.fetch(4, uses, ahead=True)  # used after both: not fetched ahead
    uses[0] = 2  # now used before shard 2 (at 3), after shard 1 (at 1)
    assert cache.fetch(0, uses, ahead=True)  # pushes 2 out
    assert sorted(cache.cached()) == [0, 1]


def test_a_mapped_shard_and_one_without_a_remote_copy_are_never_evicted(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shard_cache, "ROOM_WAIT_S", 0.3)
    cache = _cache(remote, tmp_path, 2)
    uses = np.array([9, 9, 1, 1, 1, 1], dtype=np.int64)
    cache.fetch(0, uses)
    cache.fetch(1, uses)
    (remote.parent / "parts" / "s1.beton").unlink()  # shard 1 has no remote copy now
    fd = os.open(cache.lock(0, "use"), os.O_RDWR | os.O_CREAT)  # a rank has shard 0 mapped
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        with pytest.raises(shard_cache.CacheFullError, match="every cached shard was mapped"):
            cache.fetch(2, uses)
    finally:
        os.close(fd)
    assert sorted(cache.cached()) == [0, 1]
    cache.fetch(2, uses)  # shard 0 released: now it goes
    assert sorted(cache.cached()) == [1, 2]


_KILLED = """
import sys, time
from pathlib import Path
from ffcv_pairs.load import shard_cache
real = shard_cache.read_range  # the ranged reads of a shard's first download
def slow(*args):
    Path(sys.argv[2]).touch()  # the download has begun
    time.sleep(0.2)
    return real(*args)
shard_cache.read_range = slow
from ffcv_pairs import make_loader
loader = make_loader(sys.argv[1], batch_size=16, order="sequential", cache_dir=sys.argv[3])
next(iter(loader))
"""


def test_a_rerun_after_sigkill_mid_download_reads_the_right_bytes(
    remote: Path, tmp_path: Path
) -> None:
    started, cache_dir = tmp_path / "started", tmp_path / "c"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", _KILLED, f"file://{remote}", str(started), str(cache_dir)]
    child = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        for _ in range(600):  # up to a minute for the child to start its download
            if started.exists() or child.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), child.stderr.read().decode() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL
    data = next(cache_dir.glob("train-*")) / "data"
    assert list(data.glob("*.partial")) and not list(data.glob("*.beton"))  # killed mid-way
    got = batches(f"file://{remote}", 1, order="sequential", cache_dir=cache_dir)
    assert got == batches(remote, 1, order="sequential")
    assert not list(data.glob("*.partial"))


def test_a_sidecar_that_disagrees_with_the_manifest_is_refused_at_open(
    remote: Path, tmp_path: Path
) -> None:
    side = remote.parent / "parts" / "s3.beton.json"
    side.write_text(side.read_text().replace('"root_sha256": "', '"root_sha256": "0'))
    with pytest.raises(BetonError, match=rf"{side}: sidecar of .* but the manifest lists"):
        make_loader(f"file://{remote}", **KW, cache_dir=tmp_path)


def test_a_remote_loader_pickles_as_its_url(dataset: Path, tmp_path: Path) -> None:
    """A pickled copy (a spawned worker's) reads the URL through the cache again: never
    the skeletons in the cache as if they were the dataset."""
    loader = make_loader(f"file://{dataset}", **KW, cache_dir=tmp_path, order="sequential")
    copy = pickle.loads(pickle.dumps(loader))
    assert copy.reader.url == f"file://{dataset}"
    got = [tuple(t.numpy().tobytes() for t in batch) for batch in copy]
    assert got == batches(dataset, 1, order="sequential")


def test_the_data_module_reads_a_url(dataset: Path, tmp_path: Path) -> None:
    limit = f"{2 * shard_bytes(dataset)}B"
    module = PairDataModule(
        train_path=f"file://{dataset}",
        batch_size=16,
        seed=5,
        order="sequential",
        cache_dir=str(tmp_path),
        cache_limit=limit,
    )
    assert module.schema() == make_loader(dataset, batch_size=16).schema
    loader = module.train_dataloader()
    assert loader.reader.cache.limit == 2 * shard_bytes(dataset)
    got = [tuple(t.numpy().tobytes() for t in batch) for batch in loader]
    assert got == batches(dataset, 1, order="sequential", drop_last=True)


def test_two_jobs_on_one_cache_download_each_shard_once(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, fetched = shard_cache.ShardCache._download, []

    def counted(cache: shard_cache.ShardCache, k: int, partial: Path, assemble: bool) -> str | None:
        fetched.append(k)
        return real(cache, k, partial, assemble)

    monkeypatch.setattr(shard_cache.ShardCache, "_download", counted)
    loaders = []
    for job in ("job-a", "job-b"):
        monkeypatch.setenv("FFCV_PAIRS_JOB", job)
        loaders.append(make_loader(f"file://{dataset}", **KW, cache_dir=tmp_path))
    want = batches(dataset, 1)
    for got_a, got_b, w in zip(*loaders, want, strict=True):
        assert tuple(t.numpy().tobytes() for t in got_a) == w
        assert tuple(t.numpy().tobytes() for t in got_b) == w
    assert sorted(fetched) == list(range(SHARDS))  # each once, for both jobs
    jobs = next(tmp_path.glob("train-*")) / "jobs"
    assert sorted(p.name for p in jobs.iterdir()) == ["job-a", "job-b"]


def test_a_full_cache_disk_is_one_error_naming_the_file(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shard_cache.os, "posix_fallocate", full)
    loader = make_loader(f"file://{dataset}", **KW, cache_dir=tmp_path, order="sequential")
    with pytest.raises(LoaderError, match=r"000000\.partial: no room on the cache disk"):
        next(iter(loader))


def test_node_partition_downloads_only_each_nodes_buckets(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nodes of one rank, each with its own cache_dir: each node's batches are the
    local dataset's, and it downloads the shards of its own buckets, not the dataset."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    kw = {**KW, "world_size": 2, "partition": "node", "drop_last": True}
    held = []
    for rank in range(2):
        cache = tmp_path / f"node{rank}"
        got = batches(f"file://{dataset}", rank=rank, cache_dir=cache, **kw)
        assert got == batches(dataset, rank=rank, **kw)
        held.append({int(p.stem) for p in next(cache.glob("train-*")).glob("data/*.beton")})
    assert held[0] | held[1] == set(range(SHARDS))
    assert len(held[0]) < SHARDS and len(held[1]) < SHARDS


_RANK = """
import hashlib, sys
from ffcv_pairs import make_loader
url, rank, cache, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
loader = make_loader(url, batch_size=16, seed=5, drop_last=False, order="sequential",
                     rank=rank, world_size=2, cache_dir=cache, cache_limit=limit)
h = hashlib.sha256()
for epoch in range(2):
    loader.set_epoch(epoch)
    for batch in loader:
        for t in batch:
            h.update(t.numpy().tobytes())
print(h.hexdigest())
"""


def test_two_rank_processes_share_one_cache(dataset: Path, tmp_path: Path) -> None:
    """Two processes, the ranks of one node: one cache_dir, room for four shards (two
    batches of both); each reads its local batches, each shard downloaded under one lock."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOCAL_WORLD_SIZE": "2"}
    limit = str(4 * shard_bytes(dataset))
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, f"file://{dataset}", str(r), str(tmp_path), limit],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in ranks]
    for p, (_, err) in zip(ranks, outs):
        assert p.returncode == 0, err
    for r, (out, _) in enumerate(outs):
        loader = make_loader(dataset, **KW, order="sequential", rank=r, world_size=2)
        h = hashlib.sha256()
        for epoch in range(2):
            loader.set_epoch(epoch)
            for batch in loader:
                for t in batch:
                    h.update(t.numpy().tobytes())
        assert out.strip() == h.hexdigest()


def test_augmentation_reads_the_remote_image_statistics(dataset: Path, tmp_path: Path) -> None:
    """Contrast takes each image's mean from the shard's statistics file, fetched beside
    its sidecar: the augmented batches are the local dataset's."""
    augment = PairAugment(hflip=0.5, contrast=0.3, contrast_paired=False, brightness=0.2)
    url = f"file://{dataset}"
    got = batches(url, augment=augment, cache_dir=tmp_path)
    assert got == batches(dataset, augment=augment)
    meta = next(tmp_path.glob("train-*")) / "meta" / "parts"
    assert len(list(meta.glob("*.beton.stats"))) == SHARDS


def test_any_fsspec_url_serves(dataset: Path, tmp_path: Path) -> None:
    """fsspec's in-memory store, as a third protocol besides file:// and s3://."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for path in dataset.parent.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/pairs/{path.relative_to(dataset.parent)}", path.read_bytes())
    try:
        got = batches("memory://pairs/train.json", 1, order="random", cache_dir=tmp_path)
        assert got == batches(dataset, 1, order="random")
    finally:
        fs.rm("/pairs", recursive=True)
