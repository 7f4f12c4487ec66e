"""Command-line faces of a dataset of many shards: where ``write --part`` and ``write
--append-to`` put their shard, ``merge``, and ``inspect``/``verify`` of a dataset manifest.

Commands::

    ffcv-pairs write data/pt out --split train --part $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
    ffcv-pairs merge out/train.part-*.beton -o out/train.json
    ffcv-pairs write data/new out --split train --append-to out/train.json
    ffcv-pairs inspect out/train.json
    ffcv-pairs verify out/train.json
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: `ffcv-pairs warmup` needs none of them
    from .format.shards import ShardEntry
    from .format.sidecar import Manifest

__all__ = [
    "add_merge_args",
    "after_write",
    "append_shard",
    "inspect_dataset",
    "is_dataset_manifest",
    "merge",
    "part_record",
    "remote_or",
    "shard_path",
    "verify_dataset",
]

#: What ``verify`` compares between a manifest's entry and the shard on disk.
_CHECKED = ("samples", "bytes", "digest", "page_size", "schema")


def is_dataset_manifest(path: Path) -> bool:
    """Whether ``path`` is a dataset manifest (not a `.beton`)."""
    from .format.shards import is_dataset_manifest as sniff

    return sniff(path)


def part_record(sidecar: Manifest | None) -> dict[str, Any] | None:
    """The part record in a shard's sidecar (``write --part``), or None."""
    from .format.shards import PART_KEY

    return None if sidecar is None else (sidecar.fingerprint or {}).get(PART_KEY)


def _manifest_out(name: str, path: Path) -> Path:
    """``path`` as a manifest to write: ``<name>.json``, and not a file of another kind."""
    from .format.shards import DatasetManifest

    if path.suffix != ".json" or path.name.endswith(".beton.json"):
        raise ValueError(f"{name} {path}: a dataset manifest is named <name>.json")
    if path.exists():
        DatasetManifest.load(path)  # never overwrite a sidecar or another JSON file
    return path


def _listed(manifest: Path) -> set[str]:
    from .format.shards import DatasetManifest

    if not manifest.exists():
        return set()
    return {os.path.realpath(p) for p in DatasetManifest.load(manifest).paths(manifest)}


def _unlocked(journal: Path) -> bool:
    """Whether no writer holds ``journal`` (an interrupted write, free to resume)."""
    try:
        fd = os.open(journal, os.O_RDWR)  # NFS grants an exclusive lock to writers only
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _started(journal: Path) -> bool:
    """Whether ``journal`` holds a conversion's fingerprint (not just a reservation)."""
    try:
        return journal.stat().st_size > 0
    except FileNotFoundError:
        return False


def _reserve(out: Path, manifest: Path, resume: bool) -> tuple[Path, Path | None]:
    """The next shard ``out-<k>.beton`` not on disk and not listed in ``manifest``, and the
    empty journal created to reserve it (so that a concurrent append takes the next ``k``).
    With ``resume``: the first unlisted shard whose write was interrupted, if any."""
    listed, k = _listed(manifest), 0
    while True:
        path = out.with_name(f"{out.name}-{k:05d}.beton")
        journal = path.with_name(path.name + ".journal")
        k += 1
        if os.path.realpath(path) in listed:
            continue
        if resume and _started(journal) and _unlocked(journal):
            return path, None
        if any(p.exists() for p in (path, journal, path.with_name(path.name + ".partial"))):
            continue
        try:
            os.close(os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            continue  # another append took it between the check and here
        if path.exists():  # its writer finished between the check and here
            journal.unlink()
            continue
        return path, journal


@contextlib.contextmanager
def shard_path(args: argparse.Namespace, split: str) -> Iterator[Path]:
    """Where ``write`` puts ``split``: ``OUT/<split>.beton``, ``OUT/<split>.part-0000K-of-
    0000N.beton`` with ``--part K/N``, or with ``--append-to`` the next free
    ``OUT/<split>-<k:05d>.beton`` (reserved until the write ends)."""
    from .write.parts import part_file_name

    out: Path = args.out_dir
    if args.part is not None:
        yield out / part_file_name(split, args.part)
        return
    if args.append_to is None:
        yield out / f"{split}.beton"
        return
    manifest = _manifest_out("--append-to", args.append_to)
    out.mkdir(parents=True, exist_ok=True)
    path, journal = _reserve(out / split, manifest, args.resume)
    try:
        yield path
    finally:  # a write that failed before it started leaves no reservation behind
        if journal is not None and _unlocked(journal) and not _started(journal):
            journal.unlink(missing_ok=True)


def append_shard(manifest: Path, beton: Path) -> str:
    """Add ``beton`` to ``manifest`` (created when missing); the line to print."""
    from .format.merging import add_shards

    manifest.parent.mkdir(parents=True, exist_ok=True)
    dataset = add_shards(manifest, [beton])
    return (
        f"appended {beton} to {manifest}: {_shards(len(dataset.shards))}, "
        f"{dataset.num_samples} samples"
    )


def after_write(args: argparse.Namespace, out: Path) -> list[str]:
    """What follows writing a split's file ``out``: appending it to ``--append-to``, then
    uploading to ``--to`` (the whole dataset when appending, else the file as a dataset
    of one shard; see :mod:`~ffcv_pairs.write.upload`). One line of each, said."""
    said = []
    if args.append_to is not None:
        said.append(append_shard(args.append_to, out))
    if getattr(args, "to", None) is not None:
        from .write.upload import remote_manifest_url, upload_dataset

        done = args.append_to or out
        said.append(upload_dataset(done, remote_manifest_url(args.to, done)))
    return said


def add_merge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("shards", nargs="+", type=Path, help="the finished .beton files, in order")
    p.add_argument(
        "-o", "--out", type=Path, required=True, help="the dataset manifest to write (.json)"
    )


def merge(args: argparse.Namespace) -> int:
    """``merge A.beton B.beton ... -o train.json``: list the shards (parts of one source
    in part order) in a dataset manifest, without copying data."""
    from .format.merging import merge_parts

    out = _manifest_out("-o", args.out)
    dataset = merge_parts(args.shards, out)
    kept = {os.path.realpath(p) for p in dataset.paths(out)}
    dropped = sorted(_listed(out) - kept)
    if dropped:  # rewriting a manifest never drops a dataset's shards
        more = f" and {len(dropped) - 1} more" if len(dropped) > 1 else ""
        raise ValueError(
            f"-o {out} already lists {dropped[0]}{more}, which this merge does not: remove "
            f"{out} first or give another -o"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    dataset.save(out)
    print(f"merged {_shards(len(dataset.shards))}, {dataset.num_samples} samples into {out}")
    return 0


def inspect_dataset(path: Path, preview: int | None) -> int:
    """``inspect M.json``: print shards, samples, schema, and each shard's path, samples,
    first global id and size."""
    from .format.shards import DatasetManifest

    dataset = DatasetManifest.load(path)
    if preview is not None:
        first = dataset.paths(path)[0]
        raise ValueError(
            f"--preview draws pairs from one .beton, and {path} is a dataset of "
            f"{len(dataset.shards)} shards: preview a shard (inspect {first} --preview {preview})"
        )
    print(dataset.listing(str(path)))
    return 0


def _entry_mismatch(entry: ShardEntry, path: Path, root: Path) -> str | None:
    """How the shard at ``path`` differs from its manifest entry; None when it does not."""
    from .format.merging import shard_entry
    from .format.reader import BetonError

    if not path.is_file():
        what = "not a regular file" if path.exists() else "missing"
        return f"{path}: {what} (the manifest lists it)"
    try:
        found = shard_entry(path, root)
    except BetonError as e:
        return str(e)
    for name in _CHECKED:
        want, got = getattr(entry, name), getattr(found, name)
        if want != got:
            return f"{path}: {name} is {got}, the manifest says {want}"
    return None


def verify_dataset(args: argparse.Namespace) -> int:
    """``verify M.json``: each shard against its entry, then each shard's checksums.
    0 when all match, 1 at the first mismatch (named)."""
    from .format.integrity import load_manifest, verify_checksums
    from .format.reader import BetonError, PairReader
    from .format.shards import DatasetManifest

    path = args.file
    if args.against is not None:
        raise ValueError(
            f"--against compares one .beton with its source; {path} is a dataset: verify "
            f"each shard with --against (a part with its slice of the source)"
        )
    try:
        dataset = DatasetManifest.load(path)
    except BetonError as e:
        print(f"FAIL: {e}")
        return 1
    paths = dataset.paths(path)
    for entry, shard in zip(dataset.shards, paths):
        bad = _entry_mismatch(entry, shard, path.parent)
        if bad is not None:
            print(f"FAIL: {bad}")
            return 1
    print(f"manifest: OK ({_shards(len(paths))} on disk match their entries)")
    for i, shard in enumerate(paths):
        reader = PairReader(shard)
        sidecar = load_manifest(reader)
        mismatch = None if sidecar is None else verify_checksums(reader, sidecar)
        if sidecar is None or mismatch is not None:
            why = "its sidecar is gone" if mismatch is None else mismatch.message
            print(f"FAIL: shard {i} {shard}: {why}")
            return 1
        print(f"shard {i}: OK {shard} ({reader.num_samples} samples, {reader.file_size} bytes)")
    print(f"OK: {path} ({_shards(len(paths))}, {dataset.num_samples} samples)")
    return 0


def remote_or(
    local: Callable[[argparse.Namespace], int],
    dataset: Callable[[argparse.Namespace], int] | None = None,
) -> Callable[[argparse.Namespace], int]:
    """``inspect`` or ``verify``: :func:`~.remote_commands.inspect_remote` /
    :func:`~.remote_commands.verify_remote` for a URL, ``dataset`` (when given) for a
    local dataset manifest, else ``local``."""
    from .format.objectstore import is_url
    from .remote_commands import inspect_remote, verify_remote

    def command(args: argparse.Namespace) -> int:
        if not is_url(args.file):
            manifest = dataset is not None and is_dataset_manifest(args.file)
            return (dataset if manifest and dataset is not None else local)(args)
        if args.command == "inspect":
            return inspect_remote(args.file, args.preview)
        return verify_remote(args.file, args.against)

    return command


def _shards(count: int) -> str:
    return f"{count} shard{'' if count == 1 else 's'}"
