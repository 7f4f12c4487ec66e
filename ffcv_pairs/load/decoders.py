"""FFCV decoders for pair files: A and B in one pass, labels as ``(B,)``.

:class:`PairDecoder` reads A and B of each sample in one parallel kernel,
straight from the page cache, and applies the (shared) geometric augmentation
on the way (the matrix geometry too, for raw uint8: :mod:`.warp_decode`), so augmented
batches cost one pass over memory. Its result is the pair of buffers; :class:`TakeField`
picks A in the A pipeline and B in the B pipeline (which references the decoder, an
upstream ``RefNode``).

Kernels are module-level ``@njit(cache=True)`` functions (see :mod:`ffcv_pairs.kernels`),
so they compile once per machine, not once per loader. ``generate_code`` returns a thin
Python function that calls the kernel with the op's parameters; the loader builds its
pipeline with FFCV's compiler off, so FFCV does not wrap it in a fresh, uncacheable
``njit``. Kernels see bytes: float16, which numba cannot type, decodes as any dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numba as nb
import numpy as np
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

from ..augment.config import ImageAxes, PairAugment
from ..augment.placement import OpPlacement
from ..format.joined import DatasetReader
from ..format.reader import BetonError
from ..format.schema import ArraySpec, PairSchema
from ..kernels import SharedCompile
from ..kernels.decode import (
    BatchRefs,
    FieldPair,
    StoredImage,
    copy_pairs,
    copy_pairs_serial,
    decode_pairs,
    decode_pairs_serial,
)
from ..kernels.fused import fused_pairs, fused_pairs_serial
from ..kernels.geometry import GeometryConfig
from ..kernels.jpeg import (
    CHW,
    FORM_BYTES,
    FORM_CHANNELS,
    FORM_CHANNELS_FIRST,
    FORM_DOWNSCALE,
    FORM_HEIGHT,
    FORM_JPEG,
    FORM_WIDTH,
    HWC,
    unpack_pairs,
    unpack_pairs_serial,
)
from ..kernels.numpy_ops import copy_stand_in, fused_stand_in
from ..kernels.stand_in import ParallelSoon, compile_pending
from .fusing import fused_config, output_array, unused_ops
from .warp_decode import warp_in_decoder

__all__ = ["JpegPairDecoder", "LabelDecoder", "PairDecoder", "TakeField", "planes_view"]


def planes_view(batch: np.ndarray, planes: int, height: int) -> np.ndarray:
    """``(B, ...)`` array of any dtype -> ``(B, planes, height, bytes per row)`` uint8 view."""
    return batch.view(np.uint8).reshape(batch.shape[0], planes, height, -1)


class _FieldOutput:
    """How the decoder reads one field (``stored``, for the kernel) and what it writes."""

    def __init__(self, spec: ArraySpec, axes: ImageAxes | None, aug: PairAugment | None):
        self.spec = spec
        self.dtype = spec.np_dtype
        geometric = aug is not None and aug.has_geometry and not (aug.resizes or aug.warps)
        if axes is None or aug is None or not geometric:
            self.out_shape = spec.shape
            self.stored = StoredImage(1, 1, spec.nbytes, 1)
            self.fill = np.zeros(1, dtype=np.uint8)
            self.out_planes, self.out_height = 1, 1
            return
        item = spec.np_dtype.itemsize
        self.out_shape = aug.output_shape(axes)
        self.fill = np.full(axes.pixel, aug.fill, dtype=spec.np_dtype).view(np.uint8)
        self.stored = StoredImage(axes.planes, axes.height, axes.width, axes.pixel * item)
        self.out_planes = axes.planes
        self.out_height = aug.out_size[0] if aug.out_size is not None else axes.height


#: No geometric op: the decoder copies each image whole.
_IDENTITY = GeometryConfig(
    0.0, 0.0, False, 0, 0, 0, 1.0, 1.0, 1.0, 1.0, 0, 0, 0, False, False, True, True
)


class PairDecoder(Operation):
    """Decode A and B together (optionally with the shared geometric augmentation).

    Args:
        schema: The file's schema.
        ptr_b: Data pointers of field B (A's arrive as the decoder's metadata).
        augment: Geometry to apply on the way, or None.
        clock: ``[seed, epoch]``, updated by the loader before each epoch.
        page_shift: ``log2`` of the file's page size (to find pages in the process cache).
        placement: Where the ops run (see :mod:`~ffcv_pairs.augment.placement`); when
            ``placement.fused``, the decoder applies every CPU op
            (:mod:`~ffcv_pairs.kernels.fused`).
        stats: The file's image statistics and how each field was summed (see
            :mod:`~ffcv_pairs.format.stats`), or None.
    """

    def __init__(
        self,
        schema: PairSchema,
        ptr_b: np.ndarray,
        augment: PairAugment | None,
        clock: np.ndarray,
        page_shift: np.uint64,
        placement: OpPlacement | None = None,
        stats: tuple[np.ndarray, dict[str, str | None]] | None = None,
    ):
        super().__init__()
        axes = augment.field_axes(schema) if augment is not None else {}
        self.fields = [
            _FieldOutput(schema.spec(n), axes.get(n), augment) for n in schema.IMAGE_FIELDS
        ]
        self.fused = None
        if augment is not None and placement is not None and placement.fused:
            self.fused = fused_config(augment, schema, placement, clock, stats)
            for out, shape in zip(self.fields, self.fused.shapes):
                out.out_shape, out.dtype = shape, self.fused.dtype
        self.warp = None  # the matrix geometry, where the decoder applies it
        if augment is not None and placement is not None and placement.warped:
            self.warp = warp_in_decoder(augment, [axes[n] for n in schema.IMAGE_FIELDS], clock)
            for out, name in zip(self.fields, schema.IMAGE_FIELDS):
                out.out_shape = augment.output_shape(axes[name])
        geometric = (
            augment is not None and augment.has_geometry and not (augment.resizes or augment.warps)
        )
        if augment is not None and geometric:
            self.geo = augment.geometry_config(axes[schema.IMAGE_FIELDS[0]])
        else:
            self.geo = _IDENTITY
        self.ptr_b, self.clock = ptr_b, clock
        self.page_shift = page_shift

    def declare_state_and_memory(self, previous_state: State):
        a = self.fields[0]
        queries = [AllocationQuery(f.out_shape, f.dtype) for f in self.fields]
        return replace(previous_state, jit_mode=True, shape=a.out_shape, dtype=a.dtype), queries

    def generate_code(self) -> Callable:
        source, run = self._source_code(), self._run_code()

        def decode(indices, destination, metadata, storage_state):
            out_a, out_b = destination
            mm, batch = source(indices, metadata, storage_state)
            run(batch, mm, out_a, out_b)
            compile_pending()  # parallel kernels served by their serial twins so far
            return out_a, out_b

        return decode

    def _source_code(self) -> Callable:
        """``(indices, metadata, storage_state) -> (bytes, BatchRefs)``: where the batch's
        images are (A's pointers arrive as the decoder's metadata)."""
        ptr_b, shift = self.ptr_b, self.page_shift

        def source(indices, metadata, storage_state):
            return _batch_refs(indices, metadata, ptr_b, storage_state, shift)

        return source

    def _run_code(self) -> Callable:
        """``(batch, mm, out_a, out_b)``: decode (and augment) the batch into the outputs."""
        if self.fused is not None:
            return self._fused_code()
        if self.warp is not None:
            return self.warp
        fa, fb = self.fields
        stored_a, stored_b = fa.stored, fb.stored
        fills = np.zeros((2, max(len(fa.fill), len(fb.fill))), dtype=np.uint8)
        fills[0, : len(fa.fill)], fills[1, : len(fb.fill)] = fa.fill, fb.fill
        geo, clock = self.geo, self.clock
        if geo.identity:
            return self._copy_code()
        serial, parallel = SharedCompile(), ParallelSoon(decode_pairs, decode_pairs_serial)

        def run(batch, mm, out_a, out_b):
            # numba's thread count is per thread: this epoch thread's, set from its
            # loader's num_threads (upstream's Compiler.num_threads is process-wide).
            call = parallel if nb.get_num_threads() > 1 else partial(serial, decode_pairs_serial)
            outs = FieldPair(
                planes_view(out_a, fa.out_planes, fa.out_height),
                planes_view(out_b, fb.out_planes, fb.out_height),
            )
            call(batch, mm, outs, stored_a, stored_b, fills, geo, clock)

        return run

    def _copy_code(self) -> Callable:
        """No geometry: each image is copied whole (:func:`.copy_pairs`)."""
        # Until a kernel is compiled, numpy copies (the same bytes, nothing to compile).
        parallel = ParallelSoon(copy_pairs, copy_pairs_serial, copy_stand_in)
        serial = ParallelSoon(copy_pairs_serial, copy_pairs_serial, copy_stand_in)

        def run(batch, mm, out_a, out_b):
            call = parallel if nb.get_num_threads() > 1 else serial
            dst_a = planes_view(out_a, 1, 1)[:, 0, 0]  # (batch, bytes), a view
            dst_b = planes_view(out_b, 1, 1)[:, 0, 0]
            call(batch.rows, batch.ptr_a, batch.ptr_b, mm, dst_a, dst_b)

        return run

    def _fused_code(self) -> Callable:
        cfg = self.fused
        assert cfg is not None
        # A pipeline of ops that numpy_ops has (flips, padded crops, brightness, contrast,
        # to uint8) is served by numpy while its kernel compiles: the same bytes.
        stand_in = fused_stand_in(cfg.geo, cfg.photo, cfg.ops)
        parallel = ParallelSoon(fused_pairs, fused_pairs_serial, stand_in)
        serial = ParallelSoon(fused_pairs_serial, fused_pairs_serial, stand_in)
        unused = unused_ops(cfg)

        def run(batch, mm, out_a, out_b):
            outs = FieldPair(output_array(out_a), output_array(out_b))
            threads = nb.get_num_threads()  # this epoch thread's (see above)
            ops = cfg.ops._replace(threads=threads)
            call = parallel if threads > 1 else serial
            call(batch, mm, outs, cfg.stored_a, cfg.stored_b, cfg.geo, cfg.photo, ops, *unused)

        return run


class JpegPairDecoder(PairDecoder):
    """:class:`PairDecoder` for a file with JPEG fields: each batch's images are first
    decoded (a raw field copied) into a scratch buffer, in their stored layout, and the
    same kernels then read them from there, so augmentation draws exactly as on raw data.

    Args:
        reader: The open file (its pointers, JPEG sizes and path).
        augment, clock, placement, stats: As :class:`PairDecoder`.
        downscale: Under a fused resized crop, decode each JPEG at the largest of
            turbojpeg's 1/2, 1/4 and 1/8 that its region still spans the output at
            (:func:`~ffcv_pairs.kernels.geometry.reduction`); the fused kernel then
            resizes the same region of the reduced image.
    """

    def __init__(
        self,
        reader: DatasetReader,
        augment: PairAugment | None,
        clock: np.ndarray,
        placement: OpPlacement | None = None,
        stats: tuple[np.ndarray, dict[str, str | None]] | None = None,
        downscale: bool = True,
    ):
        schema = reader.schema
        a_name, b_name = schema.IMAGE_FIELDS
        b_ptrs = reader.image_pointers(b_name)
        super().__init__(schema, b_ptrs, augment, clock, reader.page_shift, placement, stats)
        self.ptr_a, self.sizes, self.path = (
            reader.image_pointers(a_name),
            reader.image_sizes(),
            reader.path,
        )
        fused = self.fused
        reduces = downscale and fused is not None and fused.geo.resize
        self.forms = np.zeros((2, 7), dtype=np.int64)
        for t, spec in enumerate((schema.a, schema.b)):
            row = self.forms[t]
            row[FORM_BYTES] = spec.nbytes
            if spec.jpeg is not None:
                row[FORM_JPEG], row[FORM_CHANNELS] = 1, spec.channels
                row[FORM_CHANNELS_FIRST] = CHW if spec.jpeg_axes == "chw" else HWC
                row[FORM_HEIGHT], row[FORM_WIDTH] = spec.height_width
                row[FORM_DOWNSCALE] = reduces
        if fused is not None:
            ops = fused.ops._replace(downscale=self.forms[:, FORM_DOWNSCALE] > 0)
            self.fused = replace(fused, ops=ops)
        self.unpack_geo = fused.geo if fused is not None else self.geo

    def _source_code(self) -> Callable:
        ptr_a, ptr_b, shift, sizes, forms = (
            self.ptr_a,
            self.ptr_b,
            self.page_shift,
            self.sizes,
            self.forms,
        )
        stride, a_bytes = int(forms[:, FORM_BYTES].sum()), np.uint64(forms[0, FORM_BYTES])
        scratch = [np.empty(0, dtype=np.uint8)]  # grown to the largest batch, then reused
        path, geo, clock = self.path, self.unpack_geo, self.clock
        serial, parallel = SharedCompile(), ParallelSoon(unpack_pairs, unpack_pairs_serial)

        def source(indices, metadata, storage_state):
            mm, batch = _batch_refs(indices, ptr_a, ptr_b, storage_state, shift)
            n = len(indices)
            if len(scratch[0]) < n * stride:
                scratch[0] = np.empty(n * stride, dtype=np.uint8)
            out = scratch[0][: n * stride].reshape(n, stride)
            call = parallel if nb.get_num_threads() > 1 else partial(serial, unpack_pairs_serial)
            status = call(batch, mm, sizes, out, forms, geo, clock)
            if status.any():
                i = int(np.argmax(status != 0))
                t, sample = int(status[i]) - 1, int(indices[i])
                raise BetonError(
                    f"{path}: sample {sample} field {PairSchema.IMAGE_FIELDS[t]!r}: corrupt or "
                    f"truncated JPEG ({int(sizes[sample, t])} bytes); `ffcv-pairs verify` "
                    f"checks the whole file"
                )
            starts = np.arange(n, dtype=np.uint64) * np.uint64(stride)
            rows = np.arange(n, dtype=np.int64)
            ptrs = _pointer_columns(starts, starts + a_bytes)
            return _read_only(out.reshape(-1)), BatchRefs(indices, rows, *ptrs)

        return source


def _batch_refs(indices, ptr_a, ptr_b, storage_state, shift):
    """The bytes to read from and where each sample's images start in them: the file's
    mapping and its pointers, or (process cache) the private page slots."""
    if len(storage_state) == 4:  # process cache: pages sit in private slots
        mm, ptrs_a, ptrs_b, rows = _slot_pointers(indices, ptr_a, ptr_b, storage_state, shift)
        return mm, BatchRefs(indices, rows, ptrs_a, ptrs_b)
    return storage_state[0], BatchRefs(indices, indices, ptr_a, ptr_b)


def _slot_pointers(indices, ptr_a, ptr_b, storage_state, shift):
    """Pointers into upstream's process-cache slots (``memory[slot, offset]``) for a batch."""
    memory, page_to_slot = storage_state[0], storage_state[3]
    mask = np.uint64((1 << int(shift)) - 1)
    slot_bytes = np.uint64(memory.shape[1])
    out = []
    for ptrs in (ptr_a, ptr_b):
        p = np.asarray(ptrs[indices], dtype=np.uint64)
        out.append(page_to_slot[p >> shift].astype(np.uint64) * slot_bytes + (p & mask))
    ptrs_a, ptrs_b = _pointer_columns(out[0], out[1])
    return _read_only(memory.reshape(-1)), ptrs_a, ptrs_b, np.arange(len(indices), dtype=np.int64)


# A kernel compiles once per set of argument types, for tens of seconds (the fused one). The
# file's bytes reach it read-only and its pointers as read-only columns of a table (the
# mapping's metadata); bytes and pointers made here (the process cache's slots, the batch of
# decoded JPEGs) are given the same types, so every source runs the same machine code.
def _pointer_columns(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` as read-only uint64 columns of one ``(n, 2)`` table."""
    table = np.empty((len(a), 2), dtype=np.uint64)
    table[:, 0], table[:, 1] = a, b
    table.flags.writeable = False
    return table[:, 0], table[:, 1]


def _read_only(buffer: np.ndarray) -> np.ndarray:
    """A read-only view of ``buffer``."""
    view = buffer.view()
    view.flags.writeable = False
    return view


class TakeField(Operation):
    """Pick field ``index`` (0 for A, 1 for B) of the decoder's result; no copy."""

    def __init__(self, index: int, shape: tuple[int, ...], dtype: np.dtype):
        super().__init__()
        self.index, self.shape, self.dtype = index, shape, dtype

    def declare_state_and_memory(self, previous_state: State):
        return replace(previous_state, jit_mode=True, shape=self.shape, dtype=self.dtype), None

    def generate_code(self) -> Callable:
        index = self.index

        def take(pair, _):
            return pair[index]

        return take


class LabelDecoder(Operation):
    """Labels as a ``(B,)`` int64 array (upstream's ``IntDecoder`` gives ``(B, 1)``)."""

    def declare_state_and_memory(self, previous_state: State):
        dtype = np.dtype("<i8")
        return replace(previous_state, jit_mode=True, shape=(), dtype=dtype), AllocationQuery(
            (), dtype
        )

    def generate_code(self) -> Callable:
        def decode(indices, destination, metadata, storage_state):
            out = destination[: len(indices)]
            # numpy, no kernel to compile; fancy indexing, not np.take, which copies a
            # strided column (the labels are one of a table) whole first: 4 ms at 3M samples
            out[:] = metadata[indices]
            return out

        return decode
