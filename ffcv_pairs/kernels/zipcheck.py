"""Checks a file's bytes against a learned skeleton: one pass, no parsing.

A skeleton is what every ``.pt`` file of one field shares with the file it was learned
from (see :mod:`ffcv_pairs.write.ptfile`): every byte but the tensor's storage, the
serialization id, their CRCs and the archive's top folder name. The writer checks each
of millions of tiny files this way instead of walking its zip directory in Python.
"""

from __future__ import annotations

import numba as nb

__all__ = ["SLASH", "skeleton_matches"]

SLASH = 47  # b"/"


@nb.njit(cache=True, nogil=True)
def skeleton_matches(buf, fixed_pos, fixed_val, name_pos, name_len):  # pragma: no cover - JIT
    """True when ``buf[fixed_pos] == fixed_val`` everywhere and the ``name_len`` bytes at
    every offset of ``name_pos`` are the same folder name, with no ``/`` in it.

    The caller checks ``buf``'s length: every offset here must lie inside it.
    """
    for k in range(fixed_pos.size):
        if buf[fixed_pos[k]] != fixed_val[k]:
            return False
    first = name_pos[0]
    for j in range(name_len):
        if buf[first + j] == SLASH:
            return False
    for k in range(1, name_pos.size):
        at = name_pos[k]
        for j in range(name_len):
            if buf[at + j] != buf[first + j]:
                return False
    return True
