"""Whole reads and writes, and reads of regular files only.

Linux moves at most 2,147,479,552 bytes (``0x7ffff000``) per ``read``, ``pread``,
``write`` or ``pwrite``, whatever was asked, and any call may move fewer bytes than
asked (a network file system, a signal). The loops here go on from where a call
stopped, so a 2 GiB page is read or written whole. A read that meets the end of the
file before the bytes that must be there raises :class:`ShortReadError`, naming the file.

A source file's name may point at anything: a FIFO (``open`` waits for a writer that
may never come), a device (``/dev/zero`` never ends). :func:`regular_size` refuses
whatever is not a regular file once symlinks are followed, before it is opened, and
:func:`read_regular` reads no more than the size it saw.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from typing import Any

from .errors import FfcvPairsError

__all__ = [
    "NotRegularFileError",
    "ShortReadError",
    "pread_exact",
    "pread_into",
    "pwrite_all",
    "read_blocks",
    "read_regular",
    "regular_size",
]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class ShortReadError(FfcvPairsError, OSError):
    """A file ended before bytes that must be there (truncated, or shrunk while read)."""


class NotRegularFileError(FfcvPairsError, ValueError):
    """A path that must name a regular file names a FIFO, a device, a directory, ..."""


def pread_into(fd: int, buf: Any, offset: int) -> int:
    """Fill the writable buffer ``buf`` from ``offset`` of ``fd``; returns the bytes
    read, fewer than ``len(buf)`` only at the end of the file."""
    view = memoryview(buf).cast("c")  # bytes, whatever the buffer's item type
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            break
        done += got
    return done


def read_blocks(path: str | os.PathLike[str], block_size: int) -> Iterator[memoryview]:
    """The ``block_size`` blocks of the file at ``path``, in order, each whole but the last:
    views of one buffer, which the next block overwrites."""
    buf = bytearray(block_size)
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = 0
        while n := pread_into(fd, buf, offset):
            yield memoryview(buf)[:n]
            offset += n
            if n < block_size:  # the end of the file
                break
    finally:
        os.close(fd)


def pread_exact(fd: int, size: int, offset: int, where: str) -> bytes:
    """``size`` bytes from ``offset`` of ``fd`` (the file ``where``).

    Raises:
        ShortReadError: the file ends first, naming ``where`` and the byte range.
    """
    data = os.pread(fd, size, offset)
    if len(data) == size:  # one call: every read below Linux's limit, mostly
        return data
    parts, done = [data], len(data)
    while data and done < size:
        data = os.pread(fd, size - done, offset + done)
        parts.append(data)
        done += len(data)
    if done < size:
        raise ShortReadError(
            f"{where}: ends at byte {offset + done}, before the {size} bytes from byte {offset} "
            f"were read (truncated, or shrunk while being read?)"
        )
    return b"".join(parts)


def pwrite_all(fd: int, data: Any, offset: int) -> None:
    """``os.pwrite`` of every byte: a short write goes on from where it stopped, so that a
    full disk raises its ``OSError`` (``ENOSPC``) instead of a count."""
    view = memoryview(data).cast("c")  # bytes, whatever the buffer's item type
    while len(view):
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(errno.EIO, f"wrote nothing of {len(view)} bytes at offset {offset}")
        view, offset = view[written:], offset + written


def regular_size(path: str | os.PathLike[str]) -> int:
    """The size of ``path``, checked (symlinks followed) to be a regular file, without
    opening it.

    Raises:
        FileNotFoundError: nothing at ``path``. NotRegularFileError: a FIFO, a device, a
            directory or a socket, named with what it is.
    """
    mode = os.stat(path)
    if stat.S_ISREG(mode.st_mode):
        return mode.st_size
    kind = next((name for test, name in _KINDS if test(mode.st_mode)), "a special file")
    raise NotRegularFileError(
        f"{os.fspath(path)}: is {kind}, not a regular file; refusing to read it"
    )


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file ``path``, at most its size when checked.

    Raises:
        FileNotFoundError, NotRegularFileError: see :func:`regular_size`.
        ShortReadError: the file shrank before it was read.
    """
    size = regular_size(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # replaced by a FIFO since: no wait
    try:
        return pread_exact(fd, size, 0, os.fspath(path))
    finally:
        os.close(fd)
