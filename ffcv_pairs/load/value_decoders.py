"""FFCV decoders for the label and extra fields (:mod:`~ffcv_pairs.format.fields`): a
scalar as a ``(B,)`` array of its dtype, an array field as ``(B, *shape)``.

Array fields sit in the sample's slot after A and B, so they lie on the pages the
memory manager loads for the images; the decoder reads them through their metadata
pointers, from the file's mapping or (process cache) the private page slots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numba as nb
import numpy as np
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

from ..format.fields import FieldSpec

__all__ = ["ArrayFieldDecoder", "ScalarDecoder"]


@nb.njit(cache=True, nogil=True)
def _take_scalars(indices, column, out):  # pragma: no cover - JIT
    for i in range(len(indices)):
        out[i] = column[indices[i]]


@nb.njit(cache=True, nogil=True)
def _copy_rows(source, ptrs, out):  # pragma: no cover - JIT
    size = out.shape[1]
    for i in range(len(ptrs)):
        for k in range(size):  # not a slice assignment: see load/order.py
            out[i, k] = source[ptrs[i] + k]


class ScalarDecoder(Operation):
    """A scalar field (int64 or float64, in the metadata table) as a ``(B,)`` array."""

    def __init__(self, spec: FieldSpec):
        super().__init__()
        self.dtype = spec.np_dtype.newbyteorder("<")

    def declare_state_and_memory(self, previous_state: State):
        state = replace(previous_state, jit_mode=True, shape=(), dtype=self.dtype)
        return state, AllocationQuery((), self.dtype)

    def generate_code(self) -> Callable:
        def decode(indices, destination, metadata, storage_state):
            out = destination[: len(indices)]
            _take_scalars(indices, metadata, out)
            return out

        return decode


class ArrayFieldDecoder(Operation):
    """An array field (fixed shape and dtype, in the data region) as ``(B, *shape)``.

    Args:
        spec: The field's shape and dtype.
        page_shift: ``log2`` of the file's page size (for the process cache's slots).
    """

    def __init__(self, spec: FieldSpec, page_shift: np.uint64):
        super().__init__()
        self.spec, self.shift = spec, np.uint64(page_shift)

    def declare_state_and_memory(self, previous_state: State):
        shape, dtype = self.spec.shape, self.spec.np_dtype
        state = replace(previous_state, jit_mode=True, shape=shape, dtype=dtype)
        return state, AllocationQuery(shape, dtype)

    def generate_code(self) -> Callable:
        shift = self.shift
        mask = np.uint64((1 << int(shift)) - 1)

        def decode(indices, destination, metadata, storage_state):
            n = len(indices)
            out = destination[:n]
            ptrs = np.asarray(metadata[indices], dtype=np.uint64)
            if len(storage_state) == 4:  # process cache: pages sit in private slots
                memory, page_to_slot = storage_state[0], storage_state[3]
                slots = page_to_slot[ptrs >> shift].astype(np.uint64)
                ptrs = slots * np.uint64(memory.shape[1]) + (ptrs & mask)
                source = memory.reshape(-1)
            else:
                source = storage_state[0]
            _copy_rows(source, ptrs.astype(np.int64), out.reshape(n, -1).view(np.uint8))
            return out

        return decode
