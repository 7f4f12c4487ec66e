"""Many ``.pt`` files of one field at once: one ``readv`` each, checks for all of them.

The writer reads a page's samples together. Each file of a field is read with one
``os.readv`` into its own row of a staging buffer (rows of ``slot`` bytes, a little
more than the largest file seen, so a short read means the whole file is there).
Rows of one :func:`~ffcv_pairs.write.ptskeleton.skeleton_key` are checked against
their learned skeleton by a few numpy operations over all of them
(:meth:`~ffcv_pairs.write.ptskeleton.Skeleton.rows_match`), and their storage bytes
are copied out with one more. Nothing is parsed per file and no ``bytes`` object is
made per file.

A row that cannot be decided here (a file that could not be opened, a length or a key
with no skeleton yet, a byte that differs) is left to the caller, which reads that
file alone through :func:`~ffcv_pairs.write.ptfile.read_tensor` and ``torch.load``,
with their checks and errors. So a file is taken here only when the one-file path
would have taken it as a view of its bytes, and the result is the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .ptfile import PtTemplate

__all__ = ["ROWS", "read_rows", "stage_bytes", "storage_rows"]

ROWS = 256  # files per staging buffer (its size: ROWS * slot bytes)
_NAME_LEN = slice(26, 28)  # first local header: the name's length (half of the key)


def _slot(template: PtTemplate) -> int:
    """Row size: more than the longest skeleton's file, rounded to a cache line (a longer
    file has no skeleton: its short read is enough to send it to the one-file path)."""
    longest = max((length for length, _ in template.skeletons), default=0)
    return (longest + 64) // 64 * 64  # a whole number of words: Skeleton.rows_match


def stage_bytes(template: PtTemplate, k: int) -> int:
    """The staging buffer :func:`storage_rows` needs for ``k`` files."""
    return k * _slot(template)


def read_rows(paths: Sequence[str], stage: np.ndarray, slot: int) -> np.ndarray:
    """Each file of ``paths`` into row ``j`` of ``stage`` (uint8, ``len(paths) * slot``
    at least); returns the byte counts read (-1: could not be opened or read)."""
    lengths = np.empty(len(paths), dtype=np.int64)
    view = stage.data
    for j, path in enumerate(paths):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            lengths[j] = -1
            continue
        try:
            lengths[j] = os.readv(fd, [view[j * slot : (j + 1) * slot]])
        except OSError:
            lengths[j] = -1
        finally:
            os.close(fd)
    return lengths


def storage_rows(
    paths: Sequence[str], template: PtTemplate, out: np.ndarray, stage: np.ndarray
) -> np.ndarray:
    """The storage bytes of each file of ``paths`` into the row of ``out`` (uint8
    ``(len(paths), template.nbytes)``) where its skeleton decides them; returns which rows
    were filled (bool). The caller counts the reads (a sample whose other fields go
    the one-file way is read again whole).

    ``stage``: uint8, at least :func:`stage_bytes` long.
    """
    k = len(paths)
    done = np.zeros(k, dtype=bool)
    if template.reason or not template.skeletons or k == 0:
        return done
    slot = _slot(template)
    lengths = read_rows(paths, stage, slot)
    rows = stage[: k * slot].reshape(k, slot)
    names = rows[:, _NAME_LEN].copy().view(np.uint16).reshape(k)
    readable = (lengths > 0) & (lengths < slot)
    keys = lengths * 65536 + names
    for key in np.unique(keys[readable]).tolist():
        length, name = divmod(int(key), 65536)
        skeleton = template.skeletons.get((length, np.uint16(name).tobytes()))
        if skeleton is None:
            continue
        picked = np.flatnonzero(readable & (keys == key))
        whole = len(picked) == k
        group = rows if whole else rows[picked]
        ok = skeleton.rows_match(group)
        start = skeleton.storage_start
        if whole and ok.all():
            out[:] = rows[:, start : start + template.nbytes]
            done[:] = True
        else:
            good = picked[ok]
            out[good] = group[ok, start : start + template.nbytes]
            done[good] = True
    return done
