"""A dataset at a URL through the command lines and configs: ``ffcv-pairs inspect URL``
(the manifest and each shard's header, nothing more), ``ffcv-pairs verify URL`` (every
shard streamed a page at a time, checked), the training CLI with ``configs/multinode.yaml``
reading a URL through the node cache, and a mixture naming a URL (refused by name). The
local folder is the remote (``file://``); ``test_remote_s3`` runs the same commands on
moto's S3."""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path

import pytest
from ffcv.types import HeaderType
from fsspec.implementations.local import LocalFileSystem
from test_remote import SHARDS, batches, write_dataset

from ffcv_pairs import make_loader
from ffcv_pairs.cli import main
from ffcv_pairs.load.remote_dataset import RemoteReader

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("remote-cli"))


@pytest.fixture
def remote(dataset: Path, tmp_path: Path) -> Path:
    """A copy of the dataset this test may damage."""
    shutil.copytree(dataset.parent, tmp_path / "bucket")
    return tmp_path / "bucket" / dataset.name


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every ``cat_file`` and every ``read`` of an opened file of the local file system:
    ``(path or "open", bytes)``."""
    got: list[tuple[str, int]] = []
    cat, opened = LocalFileSystem.cat_file, LocalFileSystem.open
    inside = threading.local()  # cat_file opens the file: its reads count once, as its own

    def cat_file(fs: LocalFileSystem, path: str, *args: object, **kw: object) -> bytes:
        inside.on = True
        try:
            data = cat(fs, path, *args, **kw)
        finally:
            inside.on = False
        got.append((str(path), len(data)))
        return data

    def open_(fs: LocalFileSystem, path: str, *args: object, **kw: object) -> object:
        f = opened(fs, path, *args, **kw)
        read = f.read

        def counted(n: int = -1) -> bytes:
            data = read(n)
            if not getattr(inside, "on", False):
                got.append(("open", len(data)))
            return data

        f.read = counted
        return f

    monkeypatch.setattr(LocalFileSystem, "cat_file", cat_file)
    monkeypatch.setattr(LocalFileSystem, "open", open_)
    return got


def test_inspect_of_a_url_reads_the_manifest_and_each_header(
    dataset: Path, reads: list[tuple[str, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", f"file://{dataset}"]) == 0
    out = capsys.readouterr().out
    assert f"dataset:      file://{dataset}" in out and f"shards:       {SHARDS}" in out
    assert f"headers: OK ({SHARDS} shards" in out
    shards = [n for path, n in reads if path.endswith(".beton")]
    assert shards == [HeaderType.itemsize] * SHARDS
    assert [p for p, _ in reads if not p.endswith(".beton")] == [str(dataset)]


def test_verify_of_a_url_streams_and_checks_every_shard(
    remote: Path, reads: list[tuple[str, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{remote}"
    assert main(["verify", url]) == 0
    assert f"OK: {url} ({SHARDS} shards" in capsys.readouterr().out
    page = 4096  # the dataset's pages: memory is one page at a time, whatever the shard
    streamed = [n for path, n in reads if path == "open"]
    sizes = sum(p.stat().st_size for p in remote.parent.glob("parts/*.beton"))
    assert max(streamed) <= page and sum(streamed) >= sizes
    shard = remote.parent / "parts" / "s3.beton"
    with open(shard, "r+b") as f:  # one byte of a data page
        f.seek(2 * page + 5)
        byte = f.read(1)
        f.seek(2 * page + 5)
        f.write(bytes([byte[0] ^ 1]))
    assert main(["verify", url]) == 1
    out = capsys.readouterr().out
    assert f"FAIL: shard 3: file://{shard}: checksum mismatch in block 2" in out
    assert main(["verify", url, "--against", str(remote.parent)]) == 2  # misuse, named


def test_the_multinode_config_trains_from_a_url_through_the_node_cache(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ffcv_pairs.train import cli_main

    monkeypatch.setattr(sys, "argv", ["train.py"])
    cpu = ["--trainer.accelerator=cpu", "--trainer.devices=1", "--trainer.num_nodes=1"]
    cpu += ["--trainer.strategy=auto", "--trainer.precision=32", "--trainer.callbacks=[]"]
    data = [f"--data.train_path=file://{dataset}", f"--data.cache_dir={tmp_path / 'cache'}"]
    data += ["--data.cache_limit=10MB", "--data.global_batch_size=16", "--data.augment=null"]
    data += ["--data.node_window=true", "--data.window_bytes=8192"]
    config = ["--config", str(CONFIGS / "multinode.yaml")]
    cli = cli_main([*config, *cpu, *data, f"--trainer.default_root_dir={tmp_path}"], run=False)
    loader = cli.datamodule.train_dataloader()
    assert isinstance(loader.reader, RemoteReader) and loader.spec.partition == "node"
    assert loader.spec.node_window and loader.spec.window_pages == 2
    assert loader.reader.cache.limit == 10_000_000
    got = [tuple(t.numpy().tobytes() for t in batch) for batch in loader]
    kw = {"partition": "node", "canonical_nodes": 8, "seed": 0, "drop_last": True}
    kw |= {"node_window": True, "window_bytes": 8192}
    want = make_loader(dataset, batch_size=16, **kw)
    assert got == [tuple(t.numpy().tobytes() for t in batch) for batch in want]
    assert got == batches(dataset, 1, **kw)[: len(got)]


def test_a_mixture_that_names_a_url_is_refused_by_name(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a mixture reads local datasets; a URL is read alone"):
        make_loader([(f"file://{dataset}", 0.5), (dataset, 0.5)], batch_size=16)
    with pytest.raises(ValueError, match="a mixture reads local datasets"):
        make_loader([f"file://{dataset}"], batch_size=16, cache_dir=tmp_path)
