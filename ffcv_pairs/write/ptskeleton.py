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

import functools
import struct
from dataclasses import dataclass

import numpy as np

__all__ = ["Skeleton", "learn_skeleton", "skeleton_key"]

_CDIR_SIZE = 46  # central directory file header
_LOCAL_SIZE = 30  # local file header
_FIELDS = struct.Struct("<HHH")  # name, extra and comment lengths (central directory, +28)
_U32 = struct.Struct("<I")
_U16X2 = struct.Struct("<HH")
_U16 = struct.Struct("<H")
_DESCRIPTOR = 0x08  # general purpose flag bit 3: CRC and sizes follow the data
_DD = b"PK\x07\x08"  # the data descriptor's optional signature
_SLASH = ord("/")


def skeleton_key(buf: bytes) -> tuple[int, bytes]:
    """What two files of one skeleton share: the length and the first name's length."""
    return len(buf), buf[26:28]


@dataclass(frozen=True)
class Skeleton:
    """The bytes a file must repeat, the offsets of the top folder name in every header
    (``name_pos``, ``name_len`` bytes each), and where the storage starts.

    ``want`` is the learned file with every variable byte zeroed and ``mask`` is all ones
    on the fixed bytes, 0 elsewhere, both as uint64 words (the file padded with zeros to
    a whole word): a file repeats every fixed byte when ``(file ^ want) & mask`` is all
    zero. ``spans``: the word ranges that hold fixed bytes (the storage's inside is none).
    One file is checked the same way with Python integers (``ints``: per span, its byte
    range and ``want`` and ``mask`` as integers): numpy's per-call cost would be most of it.
    """

    want: np.ndarray
    mask: np.ndarray
    spans: tuple[tuple[int, int], ...]
    name_pos: np.ndarray
    name_len: int
    storage_start: int

    @functools.cached_property
    def ints(self) -> tuple[tuple[int, int, int, int], ...]:
        def big(words: np.ndarray) -> int:
            return int.from_bytes(words.tobytes(), "little")

        return tuple(
            (8 * lo, 8 * hi, big(self.want[lo:hi]), big(self.mask[lo:hi])) for lo, hi in self.spans
        )

    def matches(self, buf: bytes) -> bool:
        """True when ``buf`` (of this skeleton's key) repeats every fixed byte."""
        for lo, hi, want, mask in self.ints:
            if int.from_bytes(buf[lo:hi], "little") & mask != want:
                return False
        first, n = int(self.name_pos[0]), self.name_len
        name = buf[first : first + n]
        return b"/" not in name and all(buf[at : at + n] == name for at in self._names)

    @functools.cached_property
    def _names(self) -> list[int]:
        return self.name_pos[1:].tolist()

    def rows_match(self, rows: np.ndarray) -> np.ndarray:
        """Per row of ``rows`` (uint8 ``(k, >= 8 * want.size)``, C-contiguous rows of a
        multiple of 8 bytes, each a file of this skeleton's key from its first byte): True
        when it repeats every fixed byte and its top folder name, free of ``/``, is the
        same in every header."""
        words = rows.view(np.uint64)
        ok = np.ones(len(rows), dtype=bool)
        for lo, hi in self.spans:
            ok &= ~np.any((words[:, lo:hi] ^ self.want[lo:hi]) & self.mask[lo:hi], axis=1)
        first = int(self.name_pos[0])
        name = rows[:, first : first + self.name_len]
        ok &= ~np.any(name == _SLASH, axis=1)
        for at in self.name_pos[1:].tolist():
            ok &= np.all(rows[:, at : at + self.name_len] == name, axis=1)
        return ok


def _spans(keep: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Word ranges covering every kept byte, split at gaps of over a kilobyte (the
    storage); ``keep`` is padded to whole words."""
    words = np.flatnonzero(keep.reshape(-1, 8).any(axis=1))
    breaks = np.flatnonzero(np.diff(words) > 128)
    starts = np.concatenate([[words[0]], words[breaks + 1]])
    stops = np.concatenate([words[breaks] + 1, [words[-1] + 1]])
    return tuple((int(a), int(b)) for a, b in zip(starts, stops))


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
    padded = np.zeros(-(-len(buf) // 8) * 8, dtype=bool)
    padded[: len(buf)] = keep
    mask = np.where(padded, 0xFF, 0).astype(np.uint8)
    want = np.zeros(padded.size, dtype=np.uint8)
    want[: len(buf)] = np.frombuffer(buf, np.uint8)
    want &= mask
    names_at = np.array(names, np.int64)
    return Skeleton(
        want.view(np.uint64), mask.view(np.uint64), _spans(padded), names_at, top_len, storage
    )
