"""The skeleton of a ``.pt`` file: what every file of a field repeats, byte for byte.

``torch.save`` of tensors of one dtype and shape writes the same archive every time but
for the storage bytes, the serialization id, their two CRC-32s and the top folder name
(the file's stem). :func:`learn_skeleton` takes a file that :mod:`~ffcv_pairs.write.ptfile`
has already parsed and checked in full, and records every other byte; a later file of
the same length and first-name length that repeats all of them, with one folder name
throughout, has the same entries at the same offsets, so its storage sits where the
learned file's does. One pass over about a kilobyte replaces the zip directory walk.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..kernels.zipcheck import skeleton_matches

__all__ = ["Skeleton", "learn_skeleton", "skeleton_key"]

_CDIR_SIZE = 46  # central directory file header
_LOCAL_SIZE = 30  # local file header
_FIELDS = struct.Struct("<HHH")  # name, extra and comment lengths (central directory, +28)
_U32 = struct.Struct("<I")
_U16X2 = struct.Struct("<HH")
_U16 = struct.Struct("<H")
_DESCRIPTOR = 0x08  # general purpose flag bit 3: CRC and sizes follow the data
_DD = b"PK\x07\x08"  # the data descriptor's optional signature


def skeleton_key(buf: bytes) -> tuple[int, bytes]:
    """What two files of one skeleton share: the length and the first name's length."""
    return len(buf), buf[26:28]


@dataclass(frozen=True)
class Skeleton:
    """The bytes a file must repeat (``fixed_pos``/``fixed_val``), the offsets of the
    top folder name in every header (``name_pos``, ``name_len`` bytes each), and where
    the storage starts."""

    fixed_pos: np.ndarray
    fixed_val: np.ndarray
    name_pos: np.ndarray
    name_len: int
    storage_start: int

    def matches(self, buf: bytes) -> bool:
        """True when ``buf`` (of this skeleton's key) repeats every fixed byte."""
        arr = np.frombuffer(buf, np.uint8)
        return bool(
            skeleton_matches(arr, self.fixed_pos, self.fixed_val, self.name_pos, self.name_len)
        )


def learn_skeleton(
    buf: bytes, entries: tuple[int, int], top_len: int, variable: frozenset[str], storage: int
) -> Skeleton:
    """The skeleton of ``buf``, a zip archive already parsed and checked in full.

    Args:
        buf: the whole file.
        entries: ``(count, offset)`` of its central directory.
        top_len: byte length of the top folder name (every entry is ``top/suffix``).
        variable: suffixes whose bytes and CRC-32 may differ between files.
        storage: where the tensor's storage bytes start in ``buf``.
    """
    count, pos = entries
    keep = np.ones(len(buf), dtype=bool)
    names = []
    for _ in range(count):
        nlen, elen, clen = _FIELDS.unpack_from(buf, pos + 28)
        (local,) = _U32.unpack_from(buf, pos + 42)
        lnlen, lelen = _U16X2.unpack_from(buf, local + 26)
        suffix = buf[pos + _CDIR_SIZE + top_len + 1 : pos + _CDIR_SIZE + nlen].decode("utf-8")
        for at in (pos + _CDIR_SIZE, local + _LOCAL_SIZE):
            names.append(at)
            keep[at : at + top_len] = False
        if suffix in variable:
            (size,) = _U32.unpack_from(buf, pos + 20)
            start = local + _LOCAL_SIZE + lnlen + lelen
            keep[pos + 16 : pos + 20] = False  # CRC-32, central directory
            keep[local + 14 : local + 18] = False  # CRC-32, local header
            keep[start : start + size] = False
            (flags,) = _U16.unpack_from(buf, pos + 8)
            if flags & _DESCRIPTOR:  # a data descriptor follows: [signature,] CRC-32, sizes
                crc = start + size + (4 if buf[start + size : start + size + 4] == _DD else 0)
                keep[crc : crc + 4] = False
        pos += _CDIR_SIZE + nlen + elen + clen
    fixed = np.flatnonzero(keep)
    values = np.frombuffer(buf, np.uint8)[fixed].copy()
    return Skeleton(fixed.astype(np.int64), values, np.array(names, np.int64), top_len, storage)
