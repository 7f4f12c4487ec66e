"""Mid-epoch resume: what a loader's state records, and what must match to continue it.

A state records the epoch, the segments of it run so far (see
:mod:`~ffcv_pairs.load.elastic`) and a fingerprint. Across a mid-epoch resume
the world size and the per-device batch size (and ``drop_last``) may change;
the file, the ``indices``, the order kind, the window and the seed may not:
they define the epoch's order, so a change is refused, naming the file and the field.

The file is known by ``content`` (:func:`content_identity`, a digest of its
tables and of data spread over it, which needs no sidecar) and, when both the
checkpoint's file and this one have a sidecar, also by the sidecar's whole-file
digest (``file``). A mid-epoch state from before ``content`` existed is
accepted on its sidecar digest, and refused when its file had no sidecar (it
then named the file by size and header only, which two conversions of the same
shape and count share): resume such a run from an end-of-epoch checkpoint.
"""

from __future__ import annotations

import hashlib
from typing import Any, BinaryIO

import numpy as np

from .._checks import integer
from ..format.integrity import load_manifest
from ..format.joined import DatasetReader, JoinedReader, content_digest
from .elastic import MAX_BATCH, Segment
from .index import PageIndex
from .order import OrderSpec

__all__ = ["FIXED", "check_resume", "content_identity", "file_identity", "resume_fingerprint"]

#: Largest epoch a state may name (epochs key 64-bit hashes).
MAX_EPOCH = 2**62

#: Fingerprint fields a mid-epoch resume must keep, with the words that name them.
FIXED = {
    "content": "file",
    "file": "file",
    "indices": "indices",
    "order": "order",
    "window_pages": "window",
    "seed": "seed",
}


def file_identity(reader: DatasetReader) -> str:
    """The file's digest from its sidecar (the root over page digests, or a format-1
    sidecar's SHA-256 of the file), or its size and a digest of its header; for a dataset
    of shards, its manifest's digest (a changed manifest is another dataset)."""
    if isinstance(reader, JoinedReader):
        return reader.identity()
    manifest = load_manifest(reader)
    if manifest is not None and (manifest.root_sha256 or manifest.sha256):
        return f"sha256:{manifest.root_sha256 or manifest.sha256}"
    header = hashlib.sha256(np.asarray(reader.header).tobytes()).hexdigest()[:16]
    return f"size:{reader.file_size},header:{header}"


#: What :func:`content_identity` reads of the data pages: this many evenly spaced pieces
#: of this many bytes.
_PIECES, _PIECE_BYTES = 128, 4096
_READ = 8 << 20


def _hash_range(f: BinaryIO, h: hashlib.blake2b, start: int, end: int) -> None:
    f.seek(start)
    while start < end:
        data = f.read(min(_READ, end - start))
        if not data:
            return
        h.update(data)
        start += len(data)


def content_identity(reader: DatasetReader) -> str:
    """A digest of the file's own bytes, whatever its sidecar: the header, field table
    and metadata, the allocation table, and the first 4 KiB of 128 samples' images spread
    evenly over the allocation table (two files of the same shape and count share every
    table; their images differ). Pieces are taken at the images, not at even byte offsets:
    a small file's images fill a sliver of its first page, which even offsets would miss.
    It tells one file from another, not an intact file from a corrupt one (that is
    ``verify``'s job), and reads the tables plus at most 512 KiB."""
    if isinstance(reader, JoinedReader):  # each shard's, in order
        return content_digest(reader, content_identity)
    h = hashlib.blake2b(digest_size=16)
    start, end = reader.metadata_end, int(reader.header["alloc_table_ptr"])
    allocs = reader.alloc_table
    picks = np.unique(np.linspace(0, len(allocs) - 1, min(len(allocs), _PIECES)).astype(np.int64))
    with open(reader.path, "rb") as f:
        _hash_range(f, h, 0, start)
        _hash_range(f, h, end, int(reader.file_size))
        for k in picks.tolist():
            at, size = int(allocs["ptr"][k]), int(allocs["size"][k])
            _hash_range(f, h, at, at + min(size, _PIECE_BYTES))
    return f"blake2b:{h.hexdigest()}"


def _indices_identity(index: PageIndex, num_samples: int) -> str:
    if index.num_samples == num_samples:  # ids are unique and in range: all of them
        return "all"
    digest = hashlib.sha256(np.sort(index.samples).astype("<i8").tobytes()).hexdigest()
    return f"{index.num_samples}:{digest[:16]}"


def resume_fingerprint(
    reader: DatasetReader, index: PageIndex, spec: OrderSpec, mixture: str | None = None
) -> dict[str, Any]:
    """What the epoch's order depends on: the fixed fields and this world's settings
    (``mixture``: a mixture's identity, which stands for the indices). Reads the file's
    tables (:func:`content_identity`): call it when a state is needed."""
    return {
        "content": content_identity(reader),
        "file": file_identity(reader),
        "indices": mixture or _indices_identity(index, reader.num_samples),
        "order": spec.kind
        if spec.partition == "global"
        else f"{spec.kind}, partition node over {spec.canonical_nodes} buckets"
        + (", one window a node" if spec.node_window else ""),
        "window_pages": spec.window_pages,
        "seed": spec.seed,
        "world_size": spec.world_size,
        "batch_size": spec.batch_size,
        "drop_last": spec.drop_last,
        "num_samples": index.num_samples,
    }


def _compared(state: dict[str, Any], fingerprint: dict[str, Any], where: str) -> list[str]:
    """The FIXED keys to compare (see the module docstring for the file's two)."""
    sidecars = [str(x).startswith("sha256:") for x in (state.get("file"), fingerprint["file"])]
    if "content" in state:
        return [k for k in FIXED if k != "file" or all(sidecars)]
    if sidecars[0]:
        return [k for k in FIXED if k != "content"]
    raise ValueError(
        f"{where}: cannot resume epoch {state['epoch']} mid-way (batch "
        f"{state['batches_consumed']}): the state comes from an older ffcv-pairs and its "
        f"file had no sidecar, so it names the file only by size and header "
        f"({state.get('file')!r}), which another file of the same shape and count shares; "
        f"resume from an end-of-epoch checkpoint"
    )


def check_resume(state: dict[str, Any], fingerprint: dict[str, Any], where: str) -> list[Segment]:
    """The segments of ``state['epoch']`` run so far, once ``state`` is checked.

    Empty at an epoch boundary, where nothing but the epoch number carries over
    (the next epoch is simply dealt to the new world). ``where`` (the file) starts
    the message of a refused resume.

    Raises:
        ValueError: a field that may not change did (named), or a malformed state.
    """
    if not isinstance(state, dict):
        raise TypeError(f"a loader state must be a dict, got {type(state).__name__}")
    for key in ("epoch", "batches_consumed"):
        if key not in state:
            raise ValueError(f"not a loader state: no {key!r} (keys {sorted(map(str, state))})")
    epoch = integer("state epoch", state["epoch"], 0, MAX_EPOCH)
    consumed = integer("state batches_consumed", state["batches_consumed"], 0, MAX_BATCH)
    if "segments" in state:
        raw = state["segments"]
        if not isinstance(raw, list | tuple):
            raise TypeError(f"state segments must be a list, got {type(raw).__name__}")
        segments = [Segment.from_dict(s, f"state segments[{i}]") for i, s in enumerate(raw)]
    elif consumed:
        raise ValueError(
            f"a mid-epoch state without 'segments' (epoch {epoch}, batch "
            f"{consumed}) comes from an older ffcv-pairs; resume from an "
            f"end-of-epoch checkpoint"
        )
    else:
        segments = []
    if consumed and not any(s.batches for s in segments):
        # (The other way round is a real state: a few samples consumed on another world
        # may round to no whole batch of this one.)
        raise ValueError(
            f"malformed state: batches_consumed is {consumed} but its segments record no "
            f"batch consumed ({len(segments)} segment(s)); a mid-epoch state lists the "
            f"segments run so far"
        )
    if not any(s.batches for s in segments):
        return []
    for key in _compared(state, fingerprint, where):
        old, new, words = state.get(key), fingerprint[key], FIXED[key]
        named = words if words == key else f"{words} ({key})"
        if old != new:
            raise ValueError(
                f"{where}: cannot resume epoch {state['epoch']} mid-way (batch "
                f"{state['batches_consumed']}): the {named} differs (checkpoint {old!r}, "
                f"this loader {new!r}). A mid-epoch resume may change the world size and the "
                f"per-device batch size, not the file, indices, order, window or seed; use the "
                f"original {words}, or resume from an end-of-epoch checkpoint"
            )
    return segments
