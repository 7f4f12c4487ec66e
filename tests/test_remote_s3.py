"""Remote datasets against a real S3 API: moto's server on 127.0.0.1 (ranged GETs and
conditional PUTs; the endpoint from ``AWS_ENDPOINT_URL`` as a user sets it): a manifest
read from ``s3://`` gives the local dataset's batches byte for byte, under a cache smaller
than the dataset; a server that stops mid-epoch is one error naming the shard, after
correct batches. ``write --to s3://`` uploads the manifest last: a failed upload leaves
none; an upload appends to a manifest it extends, refuses one it does not, and never
replaces one that changed meanwhile."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

import shutil  # noqa: E402

from conftest import make_arrays, write_per_sample  # noqa: E402
from test_remote import KW, batches, held_bytes, shard_bytes, write_dataset  # noqa: E402

from ffcv_pairs import make_loader  # noqa: E402
from ffcv_pairs.cli import main  # noqa: E402
from ffcv_pairs.format.merging import merge_parts  # noqa: E402
from ffcv_pairs.format.objectstore import StoreError  # noqa: E402
from ffcv_pairs.format.shards import DatasetManifest  # noqa: E402
from ffcv_pairs.load import shard_cache  # noqa: E402
from ffcv_pairs.load.pipeline import LoaderError  # noqa: E402
from ffcv_pairs.write import upload  # noqa: E402

BUCKET = "pairs-test"
WRITTEN = f"s3://{BUCKET}/written"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def s3_server() -> Iterator[object]:
    """A moto S3 server on 127.0.0.1, set as the endpoint for this process's clients."""
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port())
    server.start()
    saved = dict(os.environ)
    os.environ.update(
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_MAX_ATTEMPTS="1",  # a stopped server fails at once, not after botocore's retries
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{server._server.port}",  # type: ignore[attr-defined]
    )
    s3fs.S3FileSystem.clear_instance_cache()  # an instance keeps the endpoint it was made with
    try:
        yield server
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved)
        s3fs.S3FileSystem.clear_instance_cache()


def _upload(manifest: Path, prefix: str) -> str:
    import fsspec

    fs = fsspec.filesystem("s3")
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    for path in manifest.parent.rglob("*"):
        if path.is_file():
            fs.put_file(str(path), f"{BUCKET}/{prefix}/{path.relative_to(manifest.parent)}")
    return f"s3://{BUCKET}/{prefix}/{manifest.name}"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("s3data"))


@pytest.fixture(scope="module")
def s3_dataset(dataset: Path) -> Iterator[str]:
    with s3_server():
        yield _upload(dataset, "train")


@pytest.mark.parametrize(("order", "shards_held"), [("sequential", 2), ("quasi_random", 6)])
def test_an_s3_manifest_gives_the_local_batches(
    s3_dataset: str, dataset: Path, tmp_path: Path, order: str, shards_held: int
) -> None:
    limit = shards_held * shard_bytes(dataset)
    got = batches(s3_dataset, order=order, cache_dir=tmp_path, cache_limit=limit)
    assert got == batches(dataset, order=order)
    data = next(tmp_path.glob("train-*")) / "data"
    assert 0 < held_bytes(data) <= limit


def test_a_server_that_stops_mid_epoch_is_one_error_naming_the_shard(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shard_cache, "ATTEMPTS", 1)
    want = batches(dataset, 1, order="sequential")
    with s3_server() as server:
        url = _upload(dataset, "stops")
        kw = {"order": "sequential", "cache_dir": tmp_path, "cache_limit": 2 * shard_bytes(dataset)}
        loader = make_loader(url, **{**KW, **kw})
        it = iter(loader)
        first = tuple(t.numpy().tobytes() for t in next(it))
        assert first == want[0]
        server.stop()  # type: ignore[attr-defined]
        with pytest.raises(LoaderError, match=rf"s3://{BUCKET}/stops/parts/s\d\.beton: .*failed"):
            for k, batch in enumerate(it, start=1):
                assert tuple(t.numpy().tobytes() for t in batch) == want[k]
        loader.close()


# -- writing to S3 ------------------------------------------------------------------------


def test_write_to_s3_then_load_it(s3_dataset: str, tmp_path: Path) -> None:
    src = write_per_sample(tmp_path / "pt", "train", *make_arrays(12, seed=3))
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--workers", "1"]
    assert main(["write", *argv, "--page-size", "4096", "--no-progress", "--to", WRITTEN]) == 0
    got = batches(f"{WRITTEN}/train.json", 1, cache_dir=tmp_path / "c")
    assert got == batches(tmp_path / "out" / "train.beton", 1)
    assert main(["inspect", f"{WRITTEN}/train.json"]) == 0  # the manifest and headers
    assert main(["verify", f"{WRITTEN}/train.json"]) == 0  # every shard, streamed


def _fs() -> object:
    import fsspec

    return fsspec.filesystem("s3")


def test_a_failed_upload_leaves_no_manifest(
    s3_dataset: str, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, done = upload._upload_shard, []

    def third_fails(*args: object) -> None:
        if len(done) == 2:
            raise StoreError("the network went away")
        done.append(real(*args))

    monkeypatch.setattr(upload, "_upload_shard", third_fails)
    url = f"s3://{BUCKET}/failed/train.json"
    with pytest.raises(StoreError, match="went away"):
        upload.upload_dataset(dataset, url)
    assert len(done) == 2 and not _fs().exists(url)  # shards up, never the manifest


def test_uploads_append_and_never_overwrite_another_dataset(
    s3_dataset: str, dataset: Path, tmp_path: Path
) -> None:
    one = tmp_path / "one.json"
    shutil.copytree(dataset.parent / "parts", tmp_path / "parts")
    merge_parts([tmp_path / "parts" / f"s{k}.beton" for k in range(2)], one).save(one)
    url = f"s3://{BUCKET}/grown/train.json"
    assert "uploaded 2 shards" in upload.upload_dataset(one, url)
    assert "uploaded 4 shards" in upload.upload_dataset(dataset, url)  # the rest, appended
    got = batches(url, 1, order="sequential", cache_dir=tmp_path / "c")
    assert got == batches(dataset, 1, order="sequential")
    with pytest.raises(ValueError, match=r"already lists 6 shards that .*one.json does not begin"):
        upload.upload_dataset(one, url)
    assert _fs().cat_file(url) == DatasetManifest.load(dataset).to_bytes()


def test_a_manifest_changed_during_the_upload_is_not_replaced(
    s3_dataset: str, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = tmp_path / "one.json"
    shutil.copytree(dataset.parent / "parts", tmp_path / "parts")
    merge_parts([tmp_path / "parts" / "s0.beton"], one).save(one)
    url = f"s3://{BUCKET}/raced/train.json"
    upload.upload_dataset(one, url)
    real = upload._upload_shard
    other = DatasetManifest.load(one).to_bytes().replace(b'"samples"', b' "samples"', 1)

    def racing(*args: object) -> None:
        real(*args)
        _fs().pipe_file(url, other)  # another writer replaces the manifest meanwhile

    monkeypatch.setattr(upload, "_upload_shard", racing)
    with pytest.raises(ValueError, match="was not replaced: it changed"):
        upload.upload_dataset(dataset, url)
    assert _fs().cat_file(url) == other


@pytest.mark.slow
def test_two_nodes_under_torchrun_train_from_s3_with_their_own_caches(
    s3_dataset: str, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torchrun --nnodes 2`` (one rank each, on this machine) fits with Lightning and
    PairDataModule from the moto server, partition="node", a cache_dir per node: each rank
    trains on the batches the local dataset plans for it, and each node's cache holds only
    its own shards."""
    script = Path(__file__).parent / "scripts" / "remote_fit.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    port = str(_free_port())
    run = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node"]
    args = [str(script), str(tmp_path), s3_dataset, str(tmp_path / "cache"), "16"]
    rendezvous = ["--master-addr", "127.0.0.1", "--master-port", port]
    nodes = [
        subprocess.Popen(
            [*run, "1", "--node-rank", str(node), *rendezvous, *args],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in range(2)
    ]
    errors = [p.communicate(timeout=600)[1] for p in nodes]
    for p, err in zip(nodes, errors):
        assert p.returncode == 0, err[-4000:]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    held = []
    for rank in range(2):
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        kw = {"seed": 5, "window_bytes": 8192, "partition": "node", "world_size": 2}
        loader = make_loader(dataset, batch_size=16, rank=rank, **kw)
        assert record["ids"] == [batch[2].tolist() for batch in loader]
        held.append(set(record["held"]))
    assert held[0] and held[1] and held[0] != held[1]
    assert len(held[0]) < 6 and len(held[1]) < 6
