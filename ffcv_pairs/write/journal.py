"""The journal ``OUT.journal`` beside ``OUT.partial``: lock, fingerprint, finished pages.

* **Lock.** A writer holds an exclusive ``flock`` on the journal from start to end,
  so a second writer on the same output is refused before it touches anything.
  The journal is removed only by its holder, at the very end; a writer that opened
  the old file checks, after locking, that the name still points at it.
* **Fingerprint.** The first line after the magic is JSON: the source's count and
  description, sizes and modification times of sampled files, the schema, page
  size, store dtype and shuffle seed. ``--resume`` refuses a run whose fingerprint
  differs and names what changed.
* **Records.** Then fixed-size records, appended in batches: data page number,
  CRC32 and SHA-256 of the page, and a CRC32 of the record itself, so that a torn
  last record is recognised and dropped. The page bytes are made durable
  (``fdatasync`` of ``OUT.partial``) before their records are written and fsynced.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

from .._fileio import pread_exact, pwrite_all
from .sources import SourceError

__all__ = ["JOURNAL_FORMAT", "Journal", "journal_path", "what_changed"]

JOURNAL_FORMAT = "ffcv-pairs-journal/1"
_MAGIC = (JOURNAL_FORMAT + "\n").encode()
_RECORD = struct.Struct("<QI32s")  # page, crc32, sha256
_CHECK = struct.Struct("<I")
_RECORD_SIZE = _RECORD.size + _CHECK.size
PageDigests = dict[int, tuple[int, bytes]]


def journal_path(out: Path) -> Path:
    """``train.beton`` -> ``train.beton.journal``."""
    return out.with_name(out.name + ".journal")


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def what_changed(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first difference between two fingerprints, in words; None when equal."""
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "files" and isinstance(a, dict) and isinstance(b, dict):
            for name in sorted(set(a) | set(b)):
                if a.get(name) != b.get(name):
                    was = (
                        "missing" if name not in a else f"size {a[name][0]}, mtime_ns {a[name][1]}"
                    )
                    now = (
                        "missing" if name not in b else f"size {b[name][0]}, mtime_ns {b[name][1]}"
                    )
                    return f"source file {name} changed ({was} -> {now})"
        return f"{key} changed ({_short(a)} -> {_short(b)})"
    return None


class Journal:
    """An open, locked journal. Use :meth:`acquire`."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd
        self._end = 0

    @classmethod
    def acquire(cls, path: Path, output: Path) -> Journal:
        """Open and lock ``path``.

        Raises:
            SourceError: another writer holds it (nothing is touched).
        """
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise SourceError(
                    f"{output}: another writer is converting to this file (it holds the lock "
                    f"on {path.name}); nothing was touched"
                ) from None
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return cls(path, fd)
            os.close(fd)  # its holder finished and removed it: lock the new one

    def read(self) -> tuple[dict[str, Any] | None, PageDigests]:
        """The fingerprint (None for an empty or unreadable journal) and the pages it lists.

        A torn or corrupt tail is dropped (and cut off, so new records follow good ones).
        """
        size = os.fstat(self.fd).st_size
        data = pread_exact(self.fd, size, 0, str(self.path))
        if not data.startswith(_MAGIC) or b"\n" not in data[len(_MAGIC) :]:
            return None, {}
        line_end = data.index(b"\n", len(_MAGIC)) + 1
        try:
            fingerprint = json.loads(data[len(_MAGIC) : line_end])
        except ValueError:
            return None, {}
        pages: PageDigests = {}
        pos = line_end
        while pos + _RECORD_SIZE <= len(data):
            body = data[pos : pos + _RECORD.size]
            (check,) = _CHECK.unpack_from(data, pos + _RECORD.size)
            if zlib.crc32(body) != check:
                break
            page, crc, sha = _RECORD.unpack(body)
            pages[page] = (crc, sha)
            pos += _RECORD_SIZE
        if pos != len(data):
            os.ftruncate(self.fd, pos)
        self._end = pos
        return fingerprint, pages

    def start(self, fingerprint: dict[str, Any]) -> None:
        """Empty the journal and write ``fingerprint``, durably."""
        head = _MAGIC + json.dumps(fingerprint, sort_keys=True).encode() + b"\n"
        os.ftruncate(self.fd, 0)
        pwrite_all(self.fd, head, 0)
        os.fsync(self.fd)
        self._end = len(head)

    def commit(self, data_fd: int, records: list[tuple[int, int, bytes]]) -> None:
        """Make the pages durable (``fdatasync`` of the data file), then record them."""
        if not records:
            return
        os.fdatasync(data_fd)
        chunk = bytearray()
        for page, crc, sha in records:
            body = _RECORD.pack(page, crc, sha)
            chunk += body + _CHECK.pack(zlib.crc32(body))
        pwrite_all(self.fd, chunk, self._end)
        os.fsync(self.fd)
        self._end += len(chunk)

    def remove(self) -> None:
        """Delete the journal (still locked, so no other writer can be using it)."""
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        os.close(self.fd)
