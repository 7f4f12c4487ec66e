"""The user's source at full scale: millions of per-sample ``.pt`` files, made fast.

``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt`` and ``{split}_labels_{i}.pt``
are real ``torch.save`` archives (zip, one stored record per part). ``torch.save``
itself writes a few thousand files per second; here each kind of file is saved
once per index width (a *template*), and every other file is the template with
its bytes patched in place:

* the archive's top-level folder, which ``torch.save`` names after the file stem
  (``torch.load`` does not check it; patched anyway, so that every file is what
  ``torch.save`` would have written);
* the tensor's storage bytes (``<stem>/data/0``);
* that record's CRC-32, in its data descriptor and in the central directory
  (``torch.load`` does not check CRCs either; ``zipfile`` does).

The same pairs also go into ``.pt`` packs of ``pack_size`` samples (lists of
``(A, B, label)`` tensors, the source :class:`bench.contest.torch_sets.PackPt` reads).
Chunk ``c`` of ``CHUNK`` pairs is drawn from ``default_rng([seed, c])``, so any
sample can be re-made to check a file (:func:`verify_sample`).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import struct
import tempfile
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CHUNK",
    "KINDS",
    "SourceSpec",
    "check_space",
    "make_chunk",
    "make_source",
    "remove_source",
    "verify_sample",
]

SPLIT = "train"
KINDS = ("A_images", "B_images", "labels")
CHUNK = 10_000
IO_THREADS = 8
GIB = 1 << 30


@dataclass(frozen=True)
class SourceSpec:
    """What to make and where.

    Attributes:
        n: Pairs.
        shape: Shape of each image (A and B alike, uint8).
        num_classes: Labels are uniform in ``[0, num_classes)`` (int64 scalars).
        seed: Seed of every chunk.
        pack_size: Samples per ``.pt`` pack.
        src: Folder of the per-sample files.
        packs: Folder of the packs.
    """

    n: int
    shape: tuple[int, ...]
    num_classes: int
    seed: int
    pack_size: int
    src: Path
    packs: Path

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if CHUNK % self.pack_size:
            raise ValueError(f"pack_size must divide {CHUNK}, got {self.pack_size}")


@dataclass(frozen=True)
class _Template:
    """One ``torch.save`` archive and where to patch it (byte offsets)."""

    blob: bytes
    stem_at: tuple[int, ...]
    stem_len: int
    data_at: int
    data_len: int
    crc_at: tuple[int, int]


def make_chunk(source: SourceSpec, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, labels)`` of chunk ``c``: pairs ``c * CHUNK`` up to ``(c + 1) * CHUNK``."""
    k = min(source.n, (c + 1) * CHUNK) - c * CHUNK
    rng = np.random.default_rng([source.seed, c])
    a = rng.integers(0, 256, (k, *source.shape), dtype=np.uint8)
    b = rng.integers(0, 256, (k, *source.shape), dtype=np.uint8)
    labels = rng.integers(0, source.num_classes, k, dtype=np.int64)
    return a, b, labels


def _stem(kind: str, i: int) -> str:
    return f"{SPLIT}_{kind}_{i}"


def _locate_data(blob: bytes, info: zipfile.ZipInfo, start_dir: int) -> tuple[int, int, int]:
    """Offsets of the record's data, of the CRC in its data descriptor and in the central
    directory."""
    h = info.header_offset
    name_len, extra_len = struct.unpack_from("<HH", blob, h + 26)
    data_at = h + 30 + name_len + extra_len
    desc = data_at + info.file_size
    if blob[desc : desc + 4] != b"PK\x07\x08":
        raise RuntimeError(f"{info.filename}: no data descriptor after the data")
    pos = start_dir
    while blob[pos : pos + 4] == b"PK\x01\x02":
        n, e, c = struct.unpack_from("<HHH", blob, pos + 28)
        if blob[pos + 46 : pos + 46 + n].decode() == info.filename:
            return data_at, desc + 4, pos + 16
        pos += 46 + n + e + c
    raise RuntimeError(f"{info.filename}: not in the central directory")


def _template(folder: Path, kind: str, digits: int, value: Any) -> _Template:
    """``torch.save(value)`` to a file whose stem has ``digits`` index digits."""
    import torch

    stem = _stem(kind, 10 ** (digits - 1))
    path = folder / f"{stem}.pt"
    torch.save(value, path)
    blob = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        start_dir = z.start_dir
    data = [i for i in infos if i.filename.endswith("/data/0")]
    if len(data) != 1 or data[0].compress_type != zipfile.ZIP_STORED:
        raise RuntimeError(f"{path}: expected one stored data/0 record, got {infos}")
    data_at, crc_desc, crc_dir = _locate_data(blob, data[0], start_dir)
    key = f"{stem}/".encode()
    stem_at = []
    pos = blob.find(key)
    while pos >= 0:
        stem_at.append(pos)
        pos = blob.find(key, pos + 1)
    if len(stem_at) != 2 * len(infos):  # every local header and every central entry
        raise RuntimeError(f"{path}: folder name found {len(stem_at)} times, not {2 * len(infos)}")
    return _Template(
        blob, tuple(stem_at), len(stem), data_at, data[0].file_size, (crc_desc, crc_dir)
    )


def _templates(source: SourceSpec, folder: Path) -> dict[tuple[str, int], _Template]:
    import torch

    image = torch.zeros(source.shape, dtype=torch.uint8)
    out = {}
    for digits in range(1, len(str(source.n - 1)) + 1):
        out["A_images", digits] = _template(folder, "A_images", digits, image)
        out["B_images", digits] = _template(folder, "B_images", digits, image.clone())
        out["labels", digits] = _template(folder, "labels", digits, torch.tensor(0))
    return out


def _patched(t: _Template, stem: bytes, payload: bytes) -> bytearray:
    buf = bytearray(t.blob)
    for p in t.stem_at:
        buf[p : p + t.stem_len] = stem
    buf[t.data_at : t.data_at + t.data_len] = payload
    crc = struct.pack("<I", zlib.crc32(payload))
    for p in t.crc_at:
        buf[p : p + 4] = crc
    return buf


_STATE: dict[str, Any] = {}


def _write_file(path: str, data: bytes | bytearray) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _write_packs(source: SourceSpec, c: int, arrays: tuple[np.ndarray, ...]) -> None:
    import torch

    a, b, labels = arrays
    first = c * CHUNK
    for s in range(0, len(a), source.pack_size):
        pack = [
            (torch.from_numpy(a[i].copy()), torch.from_numpy(b[i].copy()), torch.tensor(labels[i]))
            for i in range(s, min(len(a), s + source.pack_size))
        ]
        torch.save(pack, source.packs / f"{SPLIT}_batch_{(first + s) // source.pack_size}.pt")


def _write_range(arrays: tuple[np.ndarray, ...], first: int, start: int, stop: int) -> None:
    """Files of pairs ``first + start .. first + stop`` (rows ``start .. stop`` of ``arrays``)."""
    templates: dict[tuple[str, int], _Template] = _STATE["templates"]
    root = str(_STATE["source"].src)
    for j in range(start, stop):
        i = first + j
        digits = len(str(i))
        payloads = (arrays[0][j].tobytes(), arrays[1][j].tobytes(), arrays[2][j : j + 1].tobytes())
        for kind, payload in zip(KINDS, payloads):
            stem = _stem(kind, i)
            buf = _patched(templates[kind, digits], stem.encode(), payload)
            _write_file(f"{root}/{stem}.pt", buf)


def _write_chunk(c: int) -> int:
    source: SourceSpec = _STATE["source"]
    arrays = make_chunk(source, c)
    first, k = c * CHUNK, len(arrays[0])
    # Creating a file waits on the disk far more than on the CPU: many threads per process.
    with ThreadPoolExecutor(IO_THREADS) as ex:
        jobs = [
            ex.submit(_write_range, arrays, first, s, min(k, s + 250)) for s in range(0, k, 250)
        ]
        _write_packs(source, c, arrays)
        for job in jobs:
            job.result()
    return k


def _blocks(size: int, block: int) -> int:
    return -(-size // block) * block


def check_space(source: SourceSpec, beton_bytes: int) -> dict[str, float]:
    """Disk and inodes the source, the packs and the `.beton` need, against what is free.

    Returns:
        ``{"need_gib", "free_gib", "need_inodes", "free_inodes"}``.

    Raises:
        ValueError: too little room; one line saying how much is needed and free.
    """
    probe = source.src.parent
    while not probe.exists():  # nothing is created before the check passes
        probe = probe.parent
    st = os.statvfs(probe)
    block = st.f_frsize or st.f_bsize
    image = int(np.prod(source.shape))
    # A torch.save archive of a small tensor is ~1.3 KiB + payload; each takes whole blocks.
    per_pair = 2 * _blocks(1600 + image, block) + _blocks(1600, block) + 3 * 48  # + dir entries
    packs = -(-source.n // source.pack_size) * (source.pack_size * (2 * image + 1200))
    need = int(1.1 * (source.n * per_pair + packs + beton_bytes)) + GIB
    inodes = 3 * source.n + source.n // source.pack_size + 1000
    out = {
        "need_gib": need / GIB,
        "free_gib": st.f_bavail * st.f_frsize / GIB,
        "need_inodes": float(inodes),
        "free_inodes": float(st.f_favail),
    }
    if out["need_gib"] > out["free_gib"] or inodes > st.f_favail:
        raise ValueError(
            f"not enough room under {probe} for {source.n:,} pairs: need "
            f"{out['need_gib']:.1f} GiB and {inodes:,} inodes, free {out['free_gib']:.1f} GiB "
            f"and {st.f_favail:,} inodes"
        )
    return out


def make_source(source: SourceSpec, workers: int = 2) -> None:
    """Write every per-sample file and every pack, in ``workers`` forked processes."""
    source.src.mkdir(parents=True, exist_ok=True)
    source.packs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=source.src.parent) as tmp:
        templates = _templates(source, Path(tmp))
    _STATE.update(source=source, templates=templates)
    chunks = range(-(-source.n // CHUNK))
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            for _ in pool.imap_unordered(_write_chunk, chunks):
                pass
    finally:
        _STATE.clear()


def verify_sample(source: SourceSpec, count: int = 64) -> int:
    """``torch.load`` (and a zip CRC check of) the three files of ``count`` pairs, spread
    over every index width, plus one pack, against the re-made chunk.

    Returns:
        Files checked.

    Raises:
        RuntimeError: a file that does not load, or holds other values; names it.
    """
    import torch

    rng = np.random.default_rng(source.seed)
    idx = {0, source.n - 1, *rng.integers(0, source.n, count).tolist()}
    idx |= {10**d for d in range(1, 7) if 10**d < source.n}
    checked = 0
    for i in sorted(idx):
        c, j = divmod(i, CHUNK)
        arrays = make_chunk(source, c)
        want = (arrays[0][j], arrays[1][j], arrays[2][j])
        for kind, value in zip(KINDS, want):
            path = source.src / f"{_stem(kind, i)}.pt"
            got = torch.load(path, weights_only=True).numpy()
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if got.shape != np.shape(value) or not np.array_equal(got, value) or bad:
                raise RuntimeError(f"{path}: does not hold pair {i} ({kind}); bad record {bad}")
            checked += 1
    k = int(rng.integers(0, -(-source.n // source.pack_size)))
    path = source.packs / f"{SPLIT}_batch_{k}.pt"
    pack = torch.load(path, weights_only=True)
    i = k * source.pack_size
    arrays = make_chunk(source, i // CHUNK)
    if not np.array_equal(pack[0][0].numpy(), arrays[0][i % CHUNK]):
        raise RuntimeError(f"{path}: first A is not pair {i}")
    return checked + 1


def _unlink_range(root: str, start: int, stop: int) -> None:
    for i in range(start, stop):
        for kind in KINDS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{root}/{_stem(kind, i)}.pt")


def remove_source(source: SourceSpec) -> list[str]:
    """Delete the per-sample files (by name, from many threads: on a disk mounted with
    ``discard`` every unlink waits for the device) and the packs.

    Returns:
        Paths that are still there afterwards (empty when all went).
    """
    if source.src.is_dir():
        root, n = str(source.src), source.n
        with ThreadPoolExecutor(4 * IO_THREADS) as ex:
            jobs = [ex.submit(_unlink_range, root, s, min(n, s + 500)) for s in range(0, n, 500)]
            for job in jobs:
                job.result()
    left = []
    for folder in (source.src, source.packs):
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            left.append(str(folder))
    return left
