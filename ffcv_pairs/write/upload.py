"""Upload a finished dataset to an object store, its manifest last: ``write ... --to URL``.

Readers find a dataset through its manifest, so the manifest goes up last, after every
shard, sidecar and image-statistics file it lists is in place and has the size it should:
a reader sees no dataset, or the whole one. The manifest is written with a conditional put:

* a new one with ``If-None-Match: *`` (exclusive creation on a local file system), so two
  writers racing for one name cannot both win, and nothing is written over another
  dataset;
* an append (the URL already holds a manifest whose shards the local dataset's list
  begins with) with ``If-Match`` on the ETag read, so a manifest changed by someone else
  meanwhile is refused, not overwritten. Only the new shards are uploaded.

Stores without conditional writes (other than S3 and local files) get a check just before
the write, which narrows the race but does not close it.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from pathlib import Path
from typing import Any

from ..format.merging import merge_parts
from ..format.objectstore import StoreError, open_url, put_new, sibling
from ..format.reader import BetonError
from ..format.shards import DatasetManifest, ShardEntry, is_dataset_manifest
from ..format.stats import STATS_SUFFIX

__all__ = ["remote_manifest_url", "upload_dataset"]


def remote_manifest_url(folder: str, local: str | Path) -> str:
    """Where ``--to folder`` puts the dataset ``local`` (a manifest or a `.beton`):
    ``folder/<name>.json``."""
    return f"{folder.rstrip('/')}/{Path(local).stem}.json"


def upload_dataset(local: str | Path, url: str) -> str:
    """Upload the dataset at ``local`` (a manifest, or one `.beton` as a dataset of one
    shard) so that its manifest is at ``url``; the manifest last (see the module).

    Returns:
        One line saying what was uploaded.

    Raises:
        FileExistsError, ValueError: ``url`` holds a manifest that is not the start of
            this dataset, or changed during the upload (named).
        StoreError: the store failed (naming the object).
    """
    local = Path(local)
    if is_dataset_manifest(local):
        dataset = DatasetManifest.load(local)
        files = dataset.paths(local)
    else:
        dataset = merge_parts([local], local.with_suffix(".json"))
        files = [local]
    fs, path = open_url(url)
    fs.invalidate_cache(path)
    before, etag = _existing(fs, path, url)
    kept = len(before.shards) if before is not None else 0
    if before is not None and (before.schema, before.shards) != (
        dataset.schema,
        dataset.shards[:kept],
    ):
        raise ValueError(
            f"{url} already lists {kept} shards that {local} does not begin with: a dataset "
            f"is only appended to; upload elsewhere"
        )
    for file, entry in list(zip(files, dataset.shards))[kept:]:
        _upload_shard(fs, file, sibling(path, entry.path), entry)
    data = dataset.to_bytes()
    if before is None:
        put_new(fs, path, data)
    else:
        _replace(fs, path, data, etag, url)
    added = len(dataset.shards) - kept
    return f"uploaded {added} shards ({dataset.num_samples} samples in all) and then {url}"


def _existing(fs: Any, path: str, url: str) -> tuple[DatasetManifest | None, str | None]:
    """The manifest at ``path`` and its ETag, or (None, None)."""
    try:
        if not fs.exists(path):
            return None, None
        info = fs.info(path)
        raw = bytes(fs.cat_file(path))
    except Exception as e:  # each store's client raises its own kinds
        raise StoreError(f"{url}: reading it: {e}") from e
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / posixpath.basename(path)
        copy.write_bytes(raw)
        try:
            return DatasetManifest.load(copy), info.get("ETag")
        except BetonError as e:
            raise ValueError(f"{url}: exists and is not a dataset manifest ({e})") from None


def _upload_shard(fs: Any, file: Path, remote: str, entry: ShardEntry) -> None:
    """The shard, its sidecar and its statistics (when there are), each checked for size."""
    for suffix in (".json", STATS_SUFFIX, ""):  # the shard itself last
        source = Path(f"{file}{suffix}")
        if suffix and not source.exists():
            continue
        where = f"{fs.unstrip_protocol(remote)}{suffix}"
        try:
            fs.put_file(str(source), f"{remote}{suffix}")
            fs.invalidate_cache(f"{remote}{suffix}")
            size = int(fs.size(f"{remote}{suffix}"))
        except Exception as e:  # each store's client raises its own kinds
            raise StoreError(f"{where}: uploading {source}: {e}") from e
        if size != source.stat().st_size:
            raise StoreError(f"{where}: {size} bytes arrived of {source.stat().st_size}")
    if file.stat().st_size != entry.bytes:
        raise BetonError(f"{file}: {file.stat().st_size} bytes, its manifest lists {entry.bytes}")


def _replace(fs: Any, path: str, data: bytes, etag: str | None, url: str) -> None:
    """Write ``data`` over the manifest at ``path`` only if it is still the one read."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    try:
        if protocol in ("s3", "s3a") and etag is not None:
            fs.pipe_file(path, data, IfMatch=etag)
            return
        fs.invalidate_cache(path)
        if fs.info(path).get("ETag") != etag:
            raise FileExistsError(path)
        if protocol in ("file", "local"):  # a temp file and a rename: never half-written
            tmp = f"{path}.{os.getpid()}.tmp"
            fs.pipe_file(tmp, data)
            os.replace(tmp, path)
        else:
            fs.pipe_file(path, data)
    except (FileExistsError, OSError) as e:
        raise ValueError(
            f"{url} was not replaced: it changed while the new shards were uploaded (another "
            f"writer?), or the store refused ({e}); the shards are up: run the upload again"
        ) from None
