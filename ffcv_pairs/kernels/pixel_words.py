"""Planes to one 4-byte word per pixel and back: plane ``k`` in byte ``k`` of the word.

The warp's RGB path gathers a pixel's taps in every plane at once from such words
(:mod:`.warp_quads`), and the JPEG artefacts hand them to libjpeg-turbo as RGBX pixels
(:mod:`.jpeg_artefacts`). Each loop is one pass that LLVM vectorises (a byte loop per plane
would go an element at a time).
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["interleave", "planes_from_words"]


@nb.njit(cache=True, nogil=True)
def interleave(s, planes, plane_in, quads):  # pragma: no cover - JIT
    """``quads[j]``: pixel ``j`` of every plane of the flat uint8 source ``s`` (``planes``
    planes of ``plane_in`` values, 1 to 4), plane ``k`` in byte ``k`` (the others 0). One
    pass: a loop per plane count, each vectorised."""
    u, n = np.uint32, plane_in
    p0, p1 = s[:n], s[n : 2 * n] if planes > 1 else s[:n]
    p2, p3 = s[2 * n : 3 * n] if planes > 2 else s[:n], s[3 * n : 4 * n] if planes > 3 else s[:n]
    if planes == 4:
        for j in range(n):
            quads[j] = u(p0[j]) | u(p1[j]) << 8 | u(p2[j]) << 16 | u(p3[j]) << 24
    elif planes == 3:
        for j in range(n):
            quads[j] = u(p0[j]) | u(p1[j]) << 8 | u(p2[j]) << 16
    elif planes == 2:
        for j in range(n):
            quads[j] = u(p0[j]) | u(p1[j]) << 8
    else:
        for j in range(n):
            quads[j] = u(p0[j])


@nb.njit(cache=True, nogil=True)
def planes_from_words(quads, planes, d):  # pragma: no cover - JIT
    """The inverse of :func:`interleave`: byte ``k`` of ``quads[j]`` into ``d[k * n + j]``
    (``d`` flat uint8, ``planes`` planes of ``n = len(quads)`` values, 1 to 4)."""
    n = len(quads)
    for k in range(planes):
        shift, plane = np.uint32(8 * k), d[k * n : (k + 1) * n]
        for j in range(n):
            plane[j] = np.uint8((quads[j] >> shift) & np.uint32(255))
