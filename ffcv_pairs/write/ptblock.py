"""Many ``.pt`` files of one field at once: one ``readv`` each, checks for all of them.

The writer reads a page's samples together. Each file is read with one ``os.readv``
into its own row of its field's staging buffer (rows of ``slot`` bytes, more than the
longest file a skeleton was learned from, so a short read means the whole file is there).
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
from typing import NamedTuple

import numpy as np

from .ptfile import PtTemplate

__all__ = ["ROWS", "Staged", "read_samples", "stage_bytes", "storage_rows"]

ROWS = 256  # samples per staging buffer (its size: ROWS * slot bytes per field)
_NAME_LEN = slice(26, 28)  # first local header: the name's length (half of the key)


class Staged(NamedTuple):
    """One field's files of up to :data:`ROWS` samples: ``rows`` uint8 ``(k, slot)``, file
    ``j`` from the first byte of row ``j``; ``lengths`` its byte count (-1: unreadable)."""

    rows: np.ndarray
    lengths: np.ndarray


def _slot(template: PtTemplate) -> int:
    """Row size: more than the longest skeleton's file, rounded to a cache line (a longer
    file has no skeleton: its short read is enough to send it to the one-file path)."""
    longest = max((length for length, _ in template.skeletons), default=0)
    return (longest + 64) // 64 * 64  # a whole number of words: Skeleton.rows_match


def stage_bytes(template: PtTemplate, k: int) -> int:
    """The staging buffer :func:`read_samples` needs for ``k`` files of ``template``'s field."""
    return k * _slot(template)


def _read_into(path: str, row: memoryview) -> int:
    # O_NONBLOCK: a FIFO opens at once (with no writer, it reads nothing), a device fills
    # the row; the file goes to the one-file path, which refuses what is not a regular file.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return -1
    try:
        return os.readv(fd, [row])
    except OSError:
        return -1
    finally:
        os.close(fd)


def read_samples(
    paths: Sequence[Sequence[str]],
    templates: Sequence[PtTemplate],
    stages: Sequence[np.ndarray],
) -> list[Staged]:
    """``paths[f][j]``, field ``f``'s file of sample ``j``, into row ``j`` of field ``f``'s
    staging buffer (``stages[f]``, at least :func:`stage_bytes` long).

    Sample by sample, every field of a sample before the next (the order a conversion's
    files were most likely written in, and the order the caller asked the kernel for them:
    :mod:`~ffcv_pairs.write.readahead`).
    """
    k = len(paths[0])
    slots = [_slot(t) for t in templates]
    views = [stage.data for stage in stages]
    lengths = np.empty((len(paths), k), dtype=np.int64)

    for j in range(k):
        for f, slot in enumerate(slots):
            lengths[f, j] = _read_into(paths[f][j], views[f][j * slot : (j + 1) * slot])
    return [
        Staged(stage[: k * slot].reshape(k, slot), lengths[f])
        for f, (stage, slot) in enumerate(zip(stages, slots))
    ]


def storage_rows(staged: Staged, template: PtTemplate, out: np.ndarray) -> np.ndarray:
    """The storage bytes of each staged file into the row of ``out`` (uint8
    ``(k, template.nbytes)``) where its skeleton decides them; returns which rows were
    filled (bool). The caller counts the reads (a sample whose other fields go the one-file
    way is read again whole).
    """
    rows, lengths = staged
    k, slot = rows.shape
    done = np.zeros(k, dtype=bool)
    if template.reason or not template.skeletons or k == 0:
        return done
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
