"""Decode A and B of every sample straight from the mapping, with the shared geometry.

A batch is described by :class:`BatchRefs` (the sample ids, which key the
randomness, and where each sample's images start in ``mm``); each field by a
:class:`StoredImage` and one pixel of constant padding (row ``t`` of ``fills``).
Outputs are byte arrays ``(batch, planes, out_h, out_w * pixel_bytes)``: the
decoder moves whole pixels as bytes, so it works for any dtype (float16 too,
which numba cannot type).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba as nb
import numpy as np

from .bytemoves import copy_bytes
from .geometry import geometry_params
from .planes import PlaneMove, move_plane

__all__ = [
    "BatchRefs",
    "FieldPair",
    "StoredImage",
    "copy_pairs",
    "copy_pairs_serial",
    "decode_pairs",
    "decode_pairs_serial",
]


class BatchRefs(NamedTuple):
    """Sample ``i`` of a batch is ``ids[i]``; its images start at ``ptr_a[rows[i]]`` and
    ``ptr_b[rows[i]]``."""

    ids: np.ndarray
    rows: np.ndarray
    ptr_a: np.ndarray
    ptr_b: np.ndarray


class FieldPair(NamedTuple):
    """One value for A and one for B, of one type, so that ``pair[t]`` takes the field
    number ``t`` (0: A, 1: B) at run time."""

    a: Any
    b: Any


class StoredImage(NamedTuple):
    """A stored image as ``(planes, height, width, pixel_bytes)``. Without geometry:
    ``(1, 1, nbytes, 1)``."""

    planes: int
    height: int
    width: int
    pixel_bytes: int


@nb.njit(cache=True, nogil=True)
def _decode_sample(i, batch, mm, outs, stored, fills, geo, clock):  # pragma: no cover - JIT
    """Sample ``i`` of a batch: see :func:`decode_pairs` (``outs`` and ``stored``: each a
    :class:`FieldPair`)."""
    starts = (batch.ptr_a[batch.rows[i]], batch.ptr_b[batch.rows[i]])
    if geo.identity:
        for t in range(2):
            p = stored[t]
            n = p.planes * p.height * p.width * p.pixel_bytes
            copy_bytes(outs[t][i].reshape(-1), 0, mm, starts[t], n)
        return
    place = geometry_params(geo, clock, batch.ids[i], 0, stored.a.height, stored.a.width)
    for t in range(2):
        p, out = stored[t], outs[t]
        if t == 1 and not geo.paired:
            place = geometry_params(geo, clock, batch.ids[i], 1, p.height, p.width)
        dst = out[i].reshape(-1)
        mv = PlaneMove(
            p.height,
            p.width,
            out.shape[2],
            out.shape[3] // p.pixel_bytes,
            p.pixel_bytes,
            geo.pad_mode,
        )
        plane_in, plane_out = p.height * p.width * p.pixel_bytes, dst.shape[0] // p.planes
        for plane in range(p.planes):
            s0 = starts[t] + plane * plane_in
            move_plane(mm, s0, dst, plane * plane_out, mv, place, fills[t])


@nb.njit(cache=True, parallel=True, nogil=True)
def decode_pairs(batch, mm, outs, stored_a, stored_b, fills, geo, clock):  # pragma: no cover - JIT
    """Decode (and geometrically augment) A and B of every sample of ``batch``.

    Args:
        batch: :class:`BatchRefs`.
        mm: The file's bytes (the mapping, or the process cache's slots).
        outs: :class:`FieldPair` of byte arrays ``(batch, planes, out_h, out_w * pixel_bytes)``.
        stored_a, stored_b: :class:`StoredImage` of A and of B.
        fills: uint8 ``(2, bytes)``: one pixel of constant padding for A and for B.
        geo: :class:`~ffcv_pairs.kernels.geometry.GeometryConfig`.
        clock: ``[seed, epoch]``, read by reference (a new epoch needs no recompiling).
    """
    # numba's parallel loop takes arrays and named tuples that are arguments, but not
    # tuples of arrays, nor named tuples unpacked from a tuple: unpack outside the loop
    # (and take A's and B's StoredImage as two arguments), regroup inside it.
    ids, rows, ptr_a, ptr_b = batch.ids, batch.rows, batch.ptr_a, batch.ptr_b
    out_a, out_b = outs.a, outs.b
    for i in nb.prange(len(ids)):
        batch_i = BatchRefs(ids, rows, ptr_a, ptr_b)
        outs_i, stored = FieldPair(out_a, out_b), FieldPair(stored_a, stored_b)
        _decode_sample(i, batch_i, mm, outs_i, stored, fills, geo, clock)


@nb.njit(cache=True, nogil=True)
def decode_pairs_serial(batch, mm, outs, stored_a, stored_b, fills, geo, clock):  # pragma: no cover
    """:func:`decode_pairs` on one thread: no parallel runtime (about 45 MB a process)."""
    for i in range(len(batch.ids)):
        _decode_sample(i, batch, mm, outs, FieldPair(stored_a, stored_b), fills, geo, clock)


# Without geometry a batch is a copy: these kernels do only that, and compile in well under
# a second where decode_pairs, which carries every geometric move, takes about 8 s of one
# core on an empty cache (the first batch of an unaugmented loader waited for it).
@nb.njit(cache=True, parallel=True, nogil=True)
def copy_pairs(rows, ptr_a, ptr_b, mm, out_a, out_b):  # pragma: no cover - JIT
    """``out_a[i] = mm[ptr_a[rows[i]]:][:out_a.shape[1]]``, and the same for B: every sample
    of a batch stored whole (``out_a``, ``out_b``: ``(batch, bytes)`` uint8)."""
    for i in nb.prange(len(rows)):
        copy_bytes(out_a[i], 0, mm, ptr_a[rows[i]], out_a.shape[1])
        copy_bytes(out_b[i], 0, mm, ptr_b[rows[i]], out_b.shape[1])


@nb.njit(cache=True, nogil=True)
def copy_pairs_serial(rows, ptr_a, ptr_b, mm, out_a, out_b):  # pragma: no cover - JIT
    """:func:`copy_pairs` on one thread."""
    for i in range(len(rows)):
        copy_bytes(out_a[i], 0, mm, ptr_a[rows[i]], out_a.shape[1])
        copy_bytes(out_b[i], 0, mm, ptr_b[rows[i]], out_b.shape[1])
