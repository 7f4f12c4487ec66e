"""Fast reads of ``.pt`` files that each hold one tensor, bit-identical to ``torch.load``.

``torch.save`` writes a zip archive whose entries all sit under one top folder (the file
stem, e.g. ``train_A_images_42/``): ``data.pkl`` (a pickle naming the rebuild function,
storage class, storage key, shape, strides and offset), ``data/<key>`` (the raw storage
bytes, stored uncompressed and 64-byte aligned), ``byteorder``, ``version``,
``.format_version``, ``.storage_alignment`` and ``.data/serialization_id``. The archive
ends with an end-of-central-directory record (torch always adds the zip64 variant),
which points at the central directory, whose entries point at each local header
(30 bytes + name + extra), after which the entry's bytes start.

Why the fast path is safe: :func:`learn_template` decodes a field's first file with
``torch.load(weights_only=True)`` and keeps the fast path only for a contiguous tensor
that covers its single storage exactly, stored little-endian, and only if decoding that
same file the fast way gives the same bytes. Unpickling is a pure function of the
``data.pkl`` bytes, so a later file whose ``data.pkl`` and other small records
(``byteorder``, ``version``, ...) are byte-identical to the template's and whose entry
names match describes the same dtype, shape and strides, and its storage bytes are the
tensor. torch does not check the entries' CRCs either, so both read the same bytes.
Anything else (other strides, a view with a larger storage, compressed or zip64
entries, the legacy non-zip format, a damaged archive) goes to ``torch.load``.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._fileio import read_regular
from .ptskeleton import Skeleton, learn_skeleton, skeleton_key

__all__ = [
    "PtTemplate",
    "learn_template",
    "read_label",
    "read_tensor",
    "read_zip_entries",
    "zip_entry_count",
]

_EOCD = struct.Struct("<4sHHHHIIH")  # end of central directory, 22 bytes
_LOC64 = struct.Struct("<4sIQI")  # zip64 end-of-central-directory locator, 20 bytes
_EOCD64 = struct.Struct("<4sQHHIIQQQQ")  # zip64 end of central directory, 56 bytes
_CDIR = struct.Struct("<4sHHHHHHIIIHHHHHII")  # central directory file header, 46 bytes
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # local file header, 30 bytes
_ZIP_MAGIC = b"PK\x03\x04"
_UNSET = 0xFFFFFFFF  # a 32-bit field whose value lives in a zip64 record
_IGNORED = ".data/serialization_id"  # differs between files; torch.load never reads it
_MAX_SKELETONS = 32  # one per name length (unpadded indices: 7 at 3M files) and then some


def read_zip_entries(buf: bytes | memoryview, where: str) -> dict[str, tuple[int, int]] | None:
    """The ``(data offset, size)`` of every entry of an uncompressed zip archive.

    Args:
        buf: the whole file.
        where: the file name, for error messages.

    Returns:
        ``{entry name: (offset of its bytes in buf, byte length)}``, or None when the
        archive is valid but uses what this reader leaves to ``torch.load``: compressed
        or encrypted entries, zip64 entry fields, duplicate names.

    Raises:
        ValueError: the bytes are not a complete zip archive (truncated or corrupt).
    """
    try:
        return _read_zip_entries(buf, where)
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not a zip archive (truncated or corrupt: {e})") from None


def zip_entry_count(buf: bytes | memoryview, where: str) -> int:
    """How many entries a zip archive holds, from its end records alone.

    Only the last few hundred bytes are touched, so ``buf`` can be an ``mmap`` of a
    large file.

    Raises:
        ValueError: the end records are missing or inconsistent (not a zip, truncated).
    """
    try:
        return _directory(buf, where)[0]
    except struct.error as e:
        raise ValueError(f"{where}: not a zip archive (truncated or corrupt: {e})") from None


def _directory(buf: bytes | memoryview, where: str) -> tuple[int, int, int]:
    """``(entry count, size, offset)`` of the central directory, from the records at the end."""
    eocd = len(buf) - _EOCD.size
    if eocd < 0 or buf[eocd : eocd + 4] != b"PK\x05\x06":  # not at the end: a comment follows
        tail_start = max(0, len(buf) - _EOCD.size - 0xFFFF)
        found = bytes(buf[tail_start:]).rfind(b"PK\x05\x06")
        if found < 0:
            raise ValueError(f"{where}: no zip end-of-central-directory record (truncated?)")
        eocd = tail_start + found
    _, disk, cd_disk, _, count, cd_size, cd_offset, comment = _EOCD.unpack_from(buf, eocd)
    if eocd + _EOCD.size + comment != len(buf) or disk != 0 or cd_disk != 0:
        raise ValueError(f"{where}: inconsistent zip end-of-central-directory record")
    if eocd >= _LOC64.size and buf[eocd - _LOC64.size : eocd - _LOC64.size + 4] == b"PK\x06\x07":
        at64 = _LOC64.unpack_from(buf, eocd - _LOC64.size)[2]
        sig, *_, count64, size64, offset64 = _EOCD64.unpack_from(buf, at64)
        short = ((count, count64, 0xFFFF), (cd_size, size64, _UNSET), (cd_offset, offset64, _UNSET))
        if sig != b"PK\x06\x06" or any(v not in (v64, unset) for v, v64, unset in short):
            raise ValueError(f"{where}: zip64 end-of-central-directory record disagrees")
        return count64, size64, offset64
    return count, cd_size, cd_offset


def _read_zip_entries(buf: bytes | memoryview, where: str) -> dict[str, tuple[int, int]] | None:
    count, cd_size, cd_offset = _directory(buf, where)
    entries: dict[str, tuple[int, int]] = {}
    pos = cd_offset
    for _ in range(count):
        sig, _, _, flags, method, *_, csize, usize, nlen, elen, clen, _, _, _, local = (
            _CDIR.unpack_from(buf, pos)
        )
        if sig != b"PK\x01\x02":
            raise ValueError(f"{where}: bad zip central directory entry at byte {pos}")
        raw_name = bytes(buf[pos + _CDIR.size : pos + _CDIR.size + nlen])
        pos += _CDIR.size + nlen + elen + clen
        if flags & 1 or method != 0 or _UNSET in (csize, usize, local):
            return None  # encrypted, compressed or zip64 entry
        lsig, *_, lnlen, lelen = _LOCAL.unpack_from(buf, local)
        start = local + _LOCAL.size + lnlen + lelen
        local_name = bytes(buf[local + _LOCAL.size : local + _LOCAL.size + lnlen])
        if lsig != _ZIP_MAGIC or local_name != raw_name or csize != usize:
            raise ValueError(f"{where}: zip local header disagrees with the central directory")
        if start + csize > cd_offset:
            raise ValueError(f"{where}: zip entry {raw_name!r} runs past the data (truncated?)")
        name = raw_name.decode("utf-8")
        if name in entries:
            return None
        entries[name] = (start, csize)
    if pos != cd_offset + cd_size:
        raise ValueError(f"{where}: zip central directory size disagrees with its entries")
    return entries


@dataclass
class PtTemplate:
    """What a field's first file taught: the records every fast-read file must repeat.

    Attributes:
        dtype: numpy dtype of the tensor (little-endian).
        shape: shape of the tensor.
        reason: why there is no fast path, or "" when there is one.
        records: entry suffix (the name after the top folder) -> exact bytes, for every
            entry but the storage and the serialization id.
        suffixes: all entry suffixes of the template file.
        storage: suffix of the storage entry, e.g. ``data/0``.
        nbytes: byte length of the tensor (and of its storage).
        fast_reads: files read by the fast path so far.
        fallback_reads: files read by ``torch.load`` so far.
        skeletons: per :func:`~ffcv_pairs.write.ptskeleton.skeleton_key`, what files
            that passed the full check repeat (later files of that key skip the parse).
    """

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    reason: str
    records: dict[str, bytes]
    suffixes: frozenset[str]
    storage: str = ""
    nbytes: int = 0
    fast_reads: int = 0
    fallback_reads: int = 0
    skeletons: dict[tuple[int, bytes], Skeleton] = field(default_factory=dict)


def _by_suffix(entries: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]] | None:
    """Entries keyed by the name after the top folder; None unless there is one top folder."""
    out: dict[str, tuple[int, int]] = {}
    top = next(iter(entries), "").partition("/")[0]
    for name, span in entries.items():
        head, sep, tail = name.partition("/")
        if not sep or head != top:
            return None
        out[tail] = span
    return out


def _torch_load(buf: bytes, where: str) -> torch.Tensor:
    try:
        value = torch.load(io.BytesIO(buf), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises EOFError, RuntimeError, KeyError, UnpicklingError...
        first = (str(e).strip().splitlines() or [""])[0]
        raise ValueError(
            f"{where}: not a readable torch.save file (truncated or corrupt?): "
            f"{type(e).__name__}: {first}"
        ) from None
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{where}: expected one tensor, got {type(value).__name__}")
    if value.layout != torch.strided:  # sparse: to_array (after torch.load) names it
        raise ValueError(f"{where}: expected a dense tensor, got {value.layout}")
    if value.dtype == torch.bfloat16:
        raise ValueError(f"{where}: bfloat16 tensors are not supported; convert to float32")
    return value


def _numpy(t: torch.Tensor) -> np.ndarray:
    arr = t.detach().resolve_conj().resolve_neg().numpy()
    # np.ascontiguousarray would turn a 0-d label into shape (1,)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _fast(buf: bytes, template: PtTemplate, where: str) -> np.ndarray | None:
    """The tensor as a read-only view of ``buf``, or None when ``torch.load`` must decide.

    A file that repeats a learned skeleton is taken at once; any other is parsed and
    checked in full, and (when it passes) teaches the skeleton of its key.
    """
    key = skeleton_key(buf)
    skeleton = template.skeletons.get(key)
    if skeleton is not None and skeleton.matches(buf):
        start = skeleton.storage_start
    else:
        found = _parsed(buf, template, where)
        if found is None:
            return None
        start = found[template.storage][0]
        if skeleton is None and len(template.skeletons) < _MAX_SKELETONS:
            count, _, cd_offset = _directory(buf, where)
            top_len = len(_top(buf))
            variable = frozenset((template.storage, _IGNORED))
            template.skeletons[key] = learn_skeleton(
                buf, (count, cd_offset), top_len, variable, start
            )
    count = template.nbytes // template.dtype.itemsize
    return np.frombuffer(buf, template.dtype, count, start).reshape(template.shape)


def _top(buf: bytes) -> bytes:
    """The top folder name of an archive whose entries all share one (checked before)."""
    (nlen,) = struct.unpack_from("<H", buf, 26)
    return buf[_LOCAL.size : _LOCAL.size + nlen].partition(b"/")[0]


def _parsed(buf: bytes, template: PtTemplate, where: str) -> dict[str, tuple[int, int]] | None:
    """Entries by suffix when the zip directory walk finds ``template``'s records, else None."""
    if buf[:4] != _ZIP_MAGIC:
        return None
    try:
        entries = read_zip_entries(buf, where)
    except ValueError:
        return None  # torch.load gives the error (or reads what this parser refuses)
    found = None if entries is None else _by_suffix(entries)
    if found is None or found.keys() != template.suffixes:
        return None
    for suffix, want in template.records.items():
        start, size = found[suffix]
        if size != len(want) or buf[start : start + size] != want:
            return None
    if found[template.storage][1] != template.nbytes:
        return None
    return found


def _storage_problem(t: torch.Tensor, found: dict[str, tuple[int, int]]) -> tuple[str, str]:
    """``(storage suffix, "")`` when ``t`` can be read raw, else ``("", reason)``."""
    nbytes = t.numel() * t.element_size()
    if t.numel() == 0:
        return "", "empty tensor"
    if not t.is_contiguous() or t.storage_offset() != 0:
        return "", "not a contiguous tensor at the start of its storage"
    storages = [s for s in found if s.startswith("data/")]
    if len(storages) != 1 or found[storages[0]][1] != nbytes:
        return "", "not exactly one storage record of the tensor's size (a saved view?)"
    return storages[0], ""


def learn_template(path: str | Path) -> PtTemplate:
    """Decode ``path`` with ``torch.load`` and learn which later files can skip it.

    Raises:
        ValueError: the file is unreadable, holds no single tensor, or holds bfloat16.
    """
    where = str(path)
    buf = read_regular(path)
    t = _torch_load(buf, where)
    arr = _numpy(t)
    dtype = arr.dtype.newbyteorder("<")
    template = PtTemplate(dtype, arr.shape, "", {}, frozenset())
    try:
        entries = read_zip_entries(buf, where) if buf[:4] == _ZIP_MAGIC else None
    except ValueError:  # torch.load read it, so leave such files to torch.load
        entries = None
    found = None if entries is None else _by_suffix(entries)
    if found is None:
        template.reason = "not a plain zip-format torch.save file"
        return template
    template.storage, template.reason = _storage_problem(t, found)
    if template.reason:
        return template
    records = {
        s: buf[a : a + n] for s, (a, n) in found.items() if s not in (template.storage, _IGNORED)
    }
    if records.get("byteorder") != b"little":
        template.reason = "byteorder record is not 'little'"
        return template
    template.records, template.suffixes = records, frozenset(found)
    template.nbytes = arr.nbytes
    check = _fast(buf, template, where)
    if check is None or check.dtype != arr.dtype or check.tobytes() != arr.tobytes():
        template.reason = "the raw storage bytes differ from torch.load's tensor"
    return template


def read_tensor(path: str | Path, template: PtTemplate) -> np.ndarray:
    """The tensor in ``path``, bit-identical to ``torch.load(path, weights_only=True)``.

    One ``pread`` of the file (a regular file only, and no more than its size: see
    :func:`~ffcv_pairs._fileio.read_regular`); if its records match ``template`` the
    result is a read-only view of the file's bytes, otherwise the file goes through
    ``torch.load`` (and the result is writable). Counts the read in ``template``.

    Raises:
        ValueError: naming the file, when ``torch.load`` cannot read it, it holds
            something else than one tensor, or it is not a regular file.
    """
    where = str(path)
    buf = read_regular(path)
    arr = _fast(buf, template, where) if not template.reason else None
    if arr is not None:
        template.fast_reads += 1
        return arr
    template.fallback_reads += 1
    return _numpy(_torch_load(buf, where))


def read_label(path: str | Path, template: PtTemplate) -> int:
    """The integer in a file holding one integer scalar tensor (0-d or one element).

    Raises:
        ValueError: naming the file, when it holds no integer scalar.
    """
    arr = read_tensor(path, template)
    if arr.dtype.kind not in "iu" or arr.size != 1 or arr.ndim > 1:
        raise ValueError(
            f"{path}: label must be an integer scalar, got {arr.dtype} of shape {arr.shape}"
        )
    return int(arr.reshape(()))
