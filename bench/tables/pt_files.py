"""Many per-sample ``.pt`` files, fast: ``torch.save`` once per field, then patch bytes.

``torch.save`` of tensors of one shape and dtype writes the same archive every time
except for the top folder's name (the file's stem, in every entry name), the storage
bytes and their CRC-32. So for each field and each number of index digits one file is
saved (the template), and every other file is the template with the digits, the
storage bytes and the CRCs replaced: a valid zip that ``torch.load`` reads as the
intended tensor, written at about the speed of ``open`` + ``write``.
:func:`check_sample` loads a spread of files with ``torch.load`` (and ``zipfile``'s CRC
test) and compares them with what :func:`chunk_values` says they hold.

Sample ``i`` holds chunk ``i // CHUNK``'s values, each chunk drawn from its own seeded
generator, so a folder can be grown in steps and holds the same values either way.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import shutil
import struct
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CHUNK",
    "PtSpec",
    "check_sample",
    "chunk_values",
    "generate_pt",
    "pt_name",
    "remove_tree",
]

CHUNK = 1024
FIELDS = ("A_images", "B_images", "labels")


@dataclass(frozen=True)
class PtSpec:
    """What the generated folder holds: ``split`` files of images ``dtype[shape]``."""

    shape: tuple[int, ...]
    dtype: str
    num_classes: int
    seed: int
    split: str = "train"


@dataclass(frozen=True)
class _Template:
    data: bytes  # the whole file as torch.save wrote it
    digit_at: tuple[int, ...]  # where the index's digits sit (once per entry name)
    digits: int
    storage_at: int  # where the storage bytes start
    storage_len: int
    crc_at: tuple[int, ...]  # where the storage entry's CRC-32 is recorded


def pt_name(split: str, field: str, i: int) -> str:
    """The user's file name of sample ``i``'s ``field``."""
    return f"{split}_{field}_{i}.pt"


def chunk_values(spec: PtSpec, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, labels)`` of the ``CHUNK`` samples from ``k * CHUNK`` on."""
    rng = np.random.default_rng([spec.seed, k])
    size = (CHUNK, *spec.shape)
    if np.dtype(spec.dtype) == np.uint8:
        a = rng.integers(0, 256, size, dtype=np.uint8)
        b = rng.integers(0, 256, size, dtype=np.uint8)
    else:
        a = rng.random(size, dtype=np.float32).astype(spec.dtype)
        b = rng.random(size, dtype=np.float32).astype(spec.dtype)
    return a, b, rng.integers(0, spec.num_classes, CHUNK, dtype=np.int64)


def _find_all(data: bytes, needle: bytes) -> list[int]:
    out, at = [], data.find(needle)
    while at >= 0:
        out.append(at)
        at = data.find(needle, at + 1)
    return out


def _template(root: str, spec: PtSpec, field: str, digits: int) -> _Template:
    """``torch.save`` one file of ``field`` whose index has ``digits`` digits; locate its parts."""
    import io
    import zipfile

    import torch

    i = 10 ** (digits - 1) if digits > 1 else 0
    if field == "labels":
        value = torch.tensor(0, dtype=torch.int64)
    else:
        value = torch.zeros(spec.shape, dtype=getattr(torch, spec.dtype))
    # The archive's top folder is the file's stem: save under the user's name.
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        path = os.path.join(tmp, pt_name(spec.split, field, i))
        torch.save(value, path)
        with open(path, "rb") as f:
            data = f.read()
    stem = f"{spec.split}_{field}_{i}"
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(f"{stem}/data/0")
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    stop = start + info.file_size
    crc = struct.pack("<I", info.CRC)
    crc_at = tuple(p for p in _find_all(data, crc) if not start - 4 < p < stop)
    digit_at = tuple(p + len(stem) - digits for p in _find_all(data, (stem + "/").encode()))
    if not crc_at or not digit_at or info.compress_size != info.file_size:
        raise RuntimeError(f"torch.save wrote an archive this generator does not know ({stem})")
    return _Template(data, digit_at, digits, start, info.file_size, crc_at)


_JOB: tuple[str, PtSpec, dict[tuple[str, int], _Template]] | None = None


def _patched(t: _Template, i: int, payload: bytes) -> bytearray:
    buf = bytearray(t.data)
    digits = str(i).encode()
    for at in t.digit_at:
        buf[at : at + t.digits] = digits
    buf[t.storage_at : t.storage_at + t.storage_len] = payload
    crc = struct.pack("<I", zlib.crc32(payload))
    for at in t.crc_at:
        buf[at : at + 4] = crc
    return buf


def _write_range(bounds: tuple[int, int]) -> int:
    assert _JOB is not None, "worker forked without a job"
    root, spec, templates = _JOB
    start, stop = bounds
    k = start // CHUNK
    values = chunk_values(spec, k)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for i in range(start, stop):
        j = i - k * CHUNK
        for field, arr in zip(FIELDS, values):
            t = templates[(field, len(str(i)))]
            fd = os.open(os.path.join(root, pt_name(spec.split, field, i)), flags, 0o644)
            try:
                os.write(fd, _patched(t, i, arr[j].tobytes()))
            finally:
                os.close(fd)
    return stop - start


def generate_pt(root: str, spec: PtSpec, start: int, stop: int, workers: int = 2) -> None:
    """Write samples ``[start, stop)`` into ``root`` (three files each), in ``workers``
    forked processes."""
    global _JOB
    if not 0 <= start < stop:
        raise ValueError(f"need 0 <= start < stop, got start={start}, stop={stop}")
    os.makedirs(root, exist_ok=True)
    templates = {
        (field, d): _template(root, spec, field, d)
        for field in FIELDS
        for d in range(len(str(start)), len(str(stop - 1)) + 1)
    }
    cuts = sorted({start, stop, *range((start // CHUNK + 1) * CHUNK, stop, CHUNK)})
    _JOB = (root, spec, templates)
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            done = sum(pool.imap_unordered(_write_range, itertools.pairwise(cuts)))
    finally:
        _JOB = None
    if done != stop - start:
        raise RuntimeError(f"wrote {done} samples, expected {stop - start}")


def check_sample(root: str, spec: PtSpec, n: int, count: int = 24) -> int:
    """``torch.load`` ``count`` files spread over ``[0, n)`` (first, last, a seeded draw) and
    compare with :func:`chunk_values`; also test their zip CRCs. Returns files checked.

    Raises:
        RuntimeError: a file does not hold what it should (names the file).
    """
    import zipfile

    import torch

    rng = np.random.default_rng(spec.seed)
    picks = {0, n - 1, *rng.integers(0, n, count).tolist()}
    for i in sorted(picks):
        values = chunk_values(spec, i // CHUNK)
        for field, arr in zip(FIELDS, values):
            path = os.path.join(root, pt_name(spec.split, field, i))
            got = torch.load(path, weights_only=True).numpy()
            want = arr[i % CHUNK]
            if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                raise RuntimeError(f"{path}: torch.load gives other values than generated")
            with zipfile.ZipFile(path) as z:
                if z.testzip() is not None:
                    raise RuntimeError(f"{path}: a CRC-32 does not match its entry")
    return 3 * len(picks)


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def remove_tree(root: str, threads: int = 64) -> None:
    """``shutil.rmtree(root)``, its files unlinked from ``threads`` threads at once.

    On a file system mounted with ``discard`` (this VM's), every unlink waits for its
    discard, a few ms; one thread takes minutes for 300k files, 64 take seconds.
    """
    paths = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(_unlink_all, [paths[k::threads] for k in range(threads)]))
    shutil.rmtree(root, ignore_errors=True)
