"""Several files mapped read-only into one contiguous address range.

A dataset of shards is read as one file (:class:`~ffcv_pairs.format.joined.JoinedReader`):
shard ``k`` at byte ``bases[k]`` of one mapping. Python's ``mmap`` cannot place a mapping,
so this reserves the whole range with an anonymous ``PROT_NONE`` mapping and maps each
file over its part with ``MAP_FIXED`` (libc's ``mmap`` through ctypes). The gaps between
files (up to a page) stay inaccessible. The page cache is shared as for one file: every
rank of a node maps the same pages.

The range is unmapped when the last array viewing it is gone.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["Reserved", "map_joined"]

_PROT_NONE = 0
_MAP_FIXED = 0x10
_MAP_NORESERVE = 0x4000
_FAILED = ctypes.c_void_p(-1).value


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _check(result: int | None, what: str) -> int:
    if result is None or result == _FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def map_joined(paths: Sequence[Path], bases: Sequence[int], total: int) -> np.ndarray:
    """A read-only uint8 array of ``total`` bytes: file ``paths[k]`` at ``bases[k]``.

    Raises:
        OSError: naming the file that could not be mapped.
    """
    libc = _libc()
    span = -(-max(total, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
    start = _check(libc.mmap(None, span, _PROT_NONE, flags, -1, 0), "reserving the range")
    try:
        for path, base in zip(paths, bases):
            size = os.path.getsize(path)
            if size == 0:
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                at = libc.mmap(
                    start + int(base), size, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, fd, 0
                )
                _check(at, f"{path}: mapping it")
            finally:
                os.close(fd)
    except BaseException:
        libc.munmap(start, span)
        raise
    holder = (ctypes.c_uint8 * total).from_address(start)
    weakref.finalize(holder, libc.munmap, start, span)
    array = np.frombuffer(memoryview(holder), dtype=np.uint8)
    array.setflags(write=False)
    return array


class Reserved:
    """A range of ``total`` bytes reserved ``PROT_NONE``, into which files are mapped
    one at a time (:meth:`map_file`) and later made inaccessible again (:meth:`release`):
    a remote dataset's shards, mapped while they are in the node's cache.

    ``array`` is the read-only uint8 view of the whole range; reading a part that holds
    no file faults (SIGSEGV), so a reader waits for a shard to be mapped first. The range
    is unmapped when the last array viewing it is gone.
    """

    def __init__(self, total: int):
        self._libc = _libc()
        self.span = -(-max(total, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
        self.start = _check(
            self._libc.mmap(None, self.span, _PROT_NONE, flags, -1, 0), "reserving the range"
        )
        holder = (ctypes.c_uint8 * total).from_address(self.start)
        weakref.finalize(holder, self._libc.munmap, self.start, self.span)
        self.array = np.frombuffer(memoryview(holder), dtype=np.uint8)
        self.array.setflags(write=False)

    def map_file(self, path: Path, base: int, size: int) -> None:
        """Map ``size`` bytes of ``path`` read-only at byte ``base`` of the range.

        Raises:
            OSError: naming the file.
        """
        fd = os.open(path, os.O_RDONLY)
        try:
            flags = mmap.MAP_SHARED | _MAP_FIXED
            at = self._libc.mmap(self.start + base, size, mmap.PROT_READ, flags, fd, 0)
            _check(at, f"{path}: mapping it")
        finally:
            os.close(fd)

    def release(self, base: int, size: int) -> None:
        """Make ``[base, base + size)`` inaccessible again (the file's pages are no longer
        mapped here, so its file may be deleted)."""
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED
        length = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        _check(self._libc.mmap(self.start + base, length, _PROT_NONE, flags, -1, 0), "releasing")
