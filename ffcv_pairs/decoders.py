"""FFCV decoders for pair files: images straight from the page cache, labels as ``(B,)``.

Kernels are module-level ``@njit(cache=True, parallel=True)`` functions, so they
compile once per machine, not once per loader. An op's ``generate_code`` returns
a thin Python function that calls its kernel with the op's parameters; the
loader builds its pipeline with FFCV's compiler switched off, so FFCV does not
wrap that function in a fresh (uncacheable) ``njit`` every time.

Kernels see images as bytes: float16, which numba cannot type, decodes like
any other dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numba as nb
import numpy as np
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

__all__ = ["ImageDecoder", "LabelDecoder", "as_bytes"]


def as_bytes(batch: np.ndarray) -> np.ndarray:
    """``(B, ...)`` array of any dtype -> ``(B, nbytes)`` uint8 view."""
    return batch.reshape(batch.shape[0], -1).view(np.uint8)


@nb.njit(cache=True, parallel=True, nogil=True)
def _decode_images(indices, ptrs, mmap, out):  # pragma: no cover - JIT
    nbytes = out.shape[1]
    for i in nb.prange(len(indices)):
        p = ptrs[indices[i]]
        out[i, :] = mmap[p : p + nbytes]


@nb.njit(cache=True, nogil=True)
def _decode_labels(indices, labels, out):  # pragma: no cover - JIT
    for i in range(len(indices)):
        out[i] = labels[indices[i]]


class ImageDecoder(Operation):
    """Copy each sample's image bytes from the mapped file into the batch buffer."""

    def declare_state_and_memory(self, previous_state: State) -> tuple[State, AllocationQuery]:
        shape, dtype = tuple(self.field.shape), np.dtype(self.field.dtype)
        return (
            replace(previous_state, jit_mode=True, shape=shape, dtype=dtype),
            AllocationQuery(shape, dtype),
        )

    def generate_code(self) -> Callable:
        def decode(indices, destination, metadata, storage_state):
            out = destination[: len(indices)]
            _decode_images(indices, metadata, storage_state[0], as_bytes(out))
            return out

        return decode


class LabelDecoder(Operation):
    """Labels as a ``(B,)`` int64 array (upstream's ``IntDecoder`` gives ``(B, 1)``)."""

    def declare_state_and_memory(self, previous_state: State) -> tuple[State, AllocationQuery]:
        dtype = np.dtype("<i8")
        return (
            replace(previous_state, jit_mode=True, shape=(), dtype=dtype),
            AllocationQuery((), dtype),
        )

    def generate_code(self) -> Callable:
        def decode(indices, destination, metadata, storage_state):
            out = destination[: len(indices)]
            _decode_labels(indices, metadata, out)
            return out

        return decode
