"""Remote datasets against a real S3 API: moto's server on 127.0.0.1 (ranged GETs, the
endpoint from ``AWS_ENDPOINT_URL`` as a user sets it): a manifest read from ``s3://``
gives the local dataset's batches byte for byte, under a cache smaller than the dataset;
a server that stops mid-epoch is one error naming the shard, after correct batches."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from test_remote import KW, batches, held_bytes, shard_bytes, write_dataset  # noqa: E402

from ffcv_pairs import make_loader  # noqa: E402
from ffcv_pairs.load import shard_cache  # noqa: E402
from ffcv_pairs.load.pipeline import LoaderError  # noqa: E402

BUCKET = "pairs-test"


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
