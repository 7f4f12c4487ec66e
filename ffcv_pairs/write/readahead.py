"""Many small reads in flight: the kernel is asked for a chunk's files before they are read.

A per-sample source is millions of files of a few kilobytes. Read one after another from
a cold page cache, each read waits for the storage's latency (about 70 µs on the 2-core
VM's disk, so about 14k files/s per worker), while the storage itself serves several times
more reads at once. So before a worker reads a chunk of files it opens each one, calls
``posix_fadvise(POSIX_FADV_WILLNEED)`` on the bytes it will read (which queues their reads
and returns at once) and closes it: the chunk's reads are then in the storage's queue
together, and the reads that follow find the bytes in the page cache, or wait only for
the first of them. No threads are needed: the kernel keeps the reads in flight. (Eight
reading threads per worker, tried before, reached half the rate on the 2-core VM.)

On a warm cache that costs an ``open``, an ``fadvise`` and a ``close`` per file (about a
third of a cached read), so a chunk is first probed: a one-byte ``preadv`` with
``RWF_NOWAIT`` of a few of its files, spread over it, which fails at once when the byte is
not in the page cache. Only a chunk with a probe that missed is asked for.

The read-ahead only moves bytes into the page cache; what a file holds is read by the same
``readv`` as without it, and a file that cannot be opened or advised is left to that read,
which names it. ``FFCV_PAIRS_READAHEAD=0`` turns it off (to measure without it)::

    FFCV_PAIRS_READAHEAD=0 ffcv-pairs write data/pt out --split train
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["ENV_VAR", "PROBES", "ReadAhead", "all_cached", "readahead_setting", "will_need"]

ENV_VAR = "FFCV_PAIRS_READAHEAD"
PROBES = 8  # files of a chunk probed for being cached (spread over it)
_SETTINGS = {"": True, "1": True, "0": False}
_FLAGS = os.O_RDONLY | os.O_NONBLOCK  # a FIFO opens at once; the read that follows refuses it


def readahead_setting(value: str | None) -> bool:
    """Whether ``value`` (of :data:`ENV_VAR`; ``None``: unset) leaves the read-ahead on.

    Raises:
        ValueError: anything but unset, ``""``, ``"1"`` or ``"0"``.
    """
    if value is None:
        return True
    if value.strip() not in _SETTINGS:
        raise ValueError(f"Invalid {ENV_VAR}: {value!r}. Must be one of '1', '0' or unset.")
    return _SETTINGS[value.strip()]


def _cached(path: str, byte: memoryview) -> bool:
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return True  # nothing to ask for: the read names the file
    try:
        os.preadv(fd, [byte], 0, os.RWF_NOWAIT)
    except OSError:  # EAGAIN: not cached; EOPNOTSUPP (no RWF_NOWAIT here): ask anyway
        return False
    finally:
        os.close(fd)
    return True


def all_cached(paths: Sequence[str], probes: int = PROBES) -> bool:
    """Whether the first byte of each of ``probes`` files spread over ``paths`` is in the
    page cache (an empty file counts as cached)."""
    byte = memoryview(bytearray(1))
    k = len(paths)
    picked = sorted({k * p // probes for p in range(probes)}) if k > probes else range(k)
    return all(_cached(paths[j], byte) for j in picked)


def will_need(paths: Sequence[str], length: int = 0) -> int:
    """Ask the kernel to read the first ``length`` bytes (0: all) of each file of ``paths``
    into the page cache, without waiting; returns how many files it was asked for (a file
    that cannot be opened or advised is skipped)."""
    asked = 0
    for path in paths:
        try:
            fd = os.open(path, _FLAGS)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, length, os.POSIX_FADV_WILLNEED)
            asked += 1
        except OSError:  # a FIFO or a device: ESPIPE, EINVAL
            pass
        finally:
            os.close(fd)
    return asked


class ReadAhead:
    """A worker's read-ahead: :meth:`before` a chunk is read, its files are asked for
    unless the probe finds them cached.

    Args:
        enabled: Off: :meth:`before` does nothing. Default: on unless :data:`ENV_VAR`
            is ``"0"``.

    Attributes:
        chunks: Chunks seen (in this process). asked: Chunks whose files were asked for.
        files: Files asked for.

    Raises:
        ValueError: :data:`ENV_VAR` holds anything but ``"1"``, ``"0"`` or nothing.
    """

    def __init__(self, enabled: bool | None = None):
        self.enabled = readahead_setting(os.environ.get(ENV_VAR)) if enabled is None else enabled
        self.chunks = self.asked = self.files = 0

    def before(self, paths: Sequence[str], length: int) -> None:
        """Ask for the first ``length`` bytes of ``paths``, a chunk's files in the order
        they will be read (a longer file's rest is read when it is needed)."""
        self.chunks += 1
        if not self.enabled or not paths or all_cached(paths):
            return
        self.asked += 1
        self.files += will_need(paths, length)
