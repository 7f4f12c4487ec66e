"""A `.beton` truncated or overwritten in place under a running loader: one line, not a crash.

The loader reads the file through memory mappings. Truncate it (``cp new.beton
train.beton`` truncates first, then writes) and the next read of a page past the
new end is a bus error: the process used to die with ``Fatal Python error: Bus
error`` and nothing else. Two guards:

* **At every batch** (:class:`FileWatch`): the epoch thread compares the file's
  size and modification time (``fstat`` of a descriptor held open since the
  loader opened it) with what they were. A change means the file is being
  rewritten in place: the batch is not read, and the consumer gets a
  :class:`BetonChangedError` naming the file and what changed. (Replacing the file
  by renaming a new one over it, as the writer does, is safe: the loader keeps
  reading the old file, whole, until it is made again.)
* **Within a batch** (:func:`watch_mappings`): a truncation between two checks
  still faults. A ``SIGBUS`` handler looks up the faulting address among the
  loaders' mappings; for one of them it writes one line naming the file to stderr
  and ends the process with status 135 (128 + SIGBUS), as the fault would have,
  without the crash report. A fault anywhere else goes to the handler that was
  there before (Python's ``faulthandler``, or the default), unchanged.

The handler is a ctypes callback: it runs Python code in the faulting thread
(taking the GIL), which is safe here because it only formats a message and
exits. Linux only; elsewhere :func:`watch_mappings` does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..format.reader import BetonError

__all__ = ["BUS_ERROR_EXIT", "BetonChangedError", "FileWatch", "forget_mappings", "watch_mappings"]

#: The exit status after a bus error in a watched mapping: 128 + SIGBUS, as the crash gave.
BUS_ERROR_EXIT = 128 + int(getattr(signal, "SIGBUS", 7))
_SA_SIGINFO = 4
_SI_ADDR_OFFSET = 16  # siginfo_t.si_addr on 64-bit Linux


class BetonChangedError(BetonError):
    """The `.beton` changed on disk while a loader was reading it."""


class FileWatch:
    """Size and modification time of each file read (a `.beton`, or a dataset's shards),
    held from when the loader opened them."""

    def __init__(self, paths: Sequence[Path], offsets: np.ndarray | None = None):
        """``offsets``: each file's first sample id and the total (a dataset's shards), so
        that :meth:`check` looks only at the files a batch reads."""
        self.paths = list(paths)
        self._fds = [os.open(p, os.O_RDONLY) for p in self.paths]
        self._first = [os.fstat(fd) for fd in self._fds]
        self._offsets = offsets

    def check(self, ids: np.ndarray | None = None) -> None:
        """Raise if a file (of those holding samples ``ids``; None: every file) was
        truncated or written to since it was opened.

        Raises:
            BetonChangedError: naming the file and what changed.
        """
        files: Any = range(len(self.paths))
        if ids is not None and self._offsets is not None and len(self.paths) > 1:
            files = np.unique(np.searchsorted(self._offsets, ids, side="right") - 1).tolist()
        for k in files:
            now, then = os.fstat(self._fds[k]), self._first[k]
            if (now.st_size, now.st_mtime_ns) != (then.st_size, then.st_mtime_ns):
                raise _changed(self.paths[k], then.st_size, now.st_size)

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


def _changed(path: Path, then: int, now: int) -> BetonChangedError:
    if now < then:
        what = f"truncated from {then:,} to {now:,} bytes"
    else:
        what = f"overwritten in place (size {then:,} -> {now:,} bytes)"
    return BetonChangedError(
        f"{path}: {what} while the loader was reading it; nothing of it was used. "
        f"Replace a .beton by writing a new file and renaming it over the old one (the "
        f"writer does), then make a new loader"
    )


# -- the SIGBUS handler ------------------------------------------------------------------


class _Sigaction(ctypes.Structure):
    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_lock = threading.Lock()
_first_fault = threading.Lock()
_regions: dict[int, tuple[int, int, str]] = {}  # key -> (start, end, path)
_state: dict[str, Any] = {}  # "handler" (kept alive), "previous" (_Sigaction), "libc"


def _on_bus_error(signum: int, info: int | None, _context: int | None) -> None:
    address = ctypes.c_void_p.from_address(info + _SI_ADDR_OFFSET).value if info else None
    for start, end, path in list(_regions.values()):
        if address is not None and start <= address < end:
            if not _first_fault.acquire(blocking=False):  # another thread is saying so
                time.sleep(5)
                os._exit(BUS_ERROR_EXIT)
            os.write(
                2,
                f"ffcv-pairs: {path} was truncated or overwritten while the loader read it "
                f"(bus error at byte {address - start:,} of a mapping); replace a .beton by "
                f"renaming a new file over it, never in place\n".encode(),
            )
            os._exit(BUS_ERROR_EXIT)
    # Not ours: the previous handler takes over; the faulting access runs again and meets it.
    _state["libc"].sigaction(signum, ctypes.byref(_state["previous"]), None)


def _install() -> bool:
    if "handler" in _state:
        return True
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    handler = _HANDLER_TYPE(_on_bus_error)
    new, previous = _Sigaction(), _Sigaction()
    new.handler = ctypes.cast(handler, ctypes.c_void_p).value
    new.flags = _SA_SIGINFO
    if libc.sigaction(int(signal.SIGBUS), ctypes.byref(new), ctypes.byref(previous)) != 0:
        return False
    _state.update(handler=handler, previous=previous, libc=libc)
    return True


def watch_mappings(key: int, path: Path, arrays: list[Any]) -> None:
    """Name ``path`` in a bus error inside any of ``arrays`` (mapped from it), under ``key``
    (a later call with the same key replaces the earlier one)."""
    with _lock:
        if not _install():
            return
        for i, array in enumerate(arrays):
            start = int(array.ctypes.data)
            _regions[hash((key, i))] = (start, start + int(array.nbytes), str(path))


def forget_mappings(key: int, count: int = 8) -> None:
    """Stop naming the mappings registered under ``key``."""
    with _lock:
        for i in range(count):
            _regions.pop(hash((key, i)), None)
