"""The matrix geometry in the loader: FFCV ``Operation``\\ s after a decoder that did no
geometry (it decodes each stored image whole, raw or JPEG).

:class:`Warp` moves A (or B) by its samples' matrices (:func:`.warp_draws.warp_matrices`),
bilinearly (:func:`~ffcv_pairs.kernels.warp.warp_bilinear`); :class:`DenseWarp` moves a
declared dense field by A's matrices, by nearest sampling, and adjusts a disparity's or a
flow's values by the matrices' linear part. Brightness, contrast, noise, the per-sample
photometric ops and normalisation run after them, on the moved images.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numba as nb
import numpy as np
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

from ..format.fields import FieldSpec
from ..kernels import SharedCompile
from ..kernels.displacement import elastic_field
from ..kernels.hashing import WARP_OP_IDS
from ..kernels.nearest import NearestShape
from ..kernels.numpy_warp import warp_stand_in
from ..kernels.stand_in import ParallelSoon
from ..kernels.warp import warp_bilinear, warp_bilinear_serial
from ..kernels.warp_nearest import warp_nearest, warp_nearest_serial
from .axes import ImageAxes
from .checks import PAD_MODES
from .dense import DenseField
from .warp_draws import output_size, warp_matrices

__all__ = ["DenseWarp", "Warp", "check_dense_warp", "displacements"]

#: The options under which a disparity or a flow has no per-sample scale-and-sign change.
_BENDS = (
    *("rotate", "affine_degrees", "affine_translate", "affine_scale", "affine_shear"),
    *("perspective", "elastic", "transpose", "d4", "b_offset"),
)


def displacements(aug: Any, ids: np.ndarray, clock: np.ndarray, tag: int, size: tuple) -> Any:
    """``(n, oh, ow, 2)`` float64: each sample's elastic displacement in output pixels
    (zeros where the op is not drawn), or ``(0, oh, ow, 2)`` when ``elastic`` is off. Read
    only: under ``geometry_paired`` A, B and a mask of one batch get one array (the last
    field made is kept, by its inputs: the field is the costly part of the op)."""
    oh, ow = size
    if "elastic" not in aug.warp_ops:
        return np.zeros((0, oh, ow, 2))
    alpha, sigma = aug.elastic
    key = 0 if aug.geometry_paired else tag
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    clock = np.array(clock)  # a copy: the inputs the kept field is known by
    inputs = (ids.tobytes(), *map(int, clock), key, oh, ow, alpha, sigma, aug.elastic_p)
    with _LAST_FIELD_LOCK:
        if _LAST_FIELD and _LAST_FIELD[0] == inputs:
            return _LAST_FIELD[1]
    out = np.empty((len(ids), oh, ow, 2))
    gains = np.array([alpha * ow / (2 * oh), alpha * oh / (2 * ow)])
    call = SharedCompile()
    call(elastic_field, ids, clock, WARP_OP_IDS["elastic"], key, aug.elastic_p, sigma, gains, out)
    with _LAST_FIELD_LOCK:
        _LAST_FIELD[:] = [inputs, out]
    return out


_LAST_FIELD: list[Any] = []  # [inputs, field] of the last field :func:`displacements` made
_LAST_FIELD_LOCK = threading.Lock()


class Warp(Operation):
    """The matrix geometry of image field ``tag`` (0: A, 1: B), stored as ``axes``."""

    def __init__(self, augment: Any, axes: ImageAxes, clock: np.ndarray, tag: int):
        super().__init__()
        self.aug, self.axes, self.clock, self.tag = augment, axes, clock, tag
        self.size = output_size(augment, axes.height, axes.width)
        self.out_shape = axes.shape(*self.size)

    def declare_state_and_memory(self, previous_state: State):
        state = replace(previous_state, jit_mode=True, shape=self.out_shape)
        return state, AllocationQuery(self.out_shape, previous_state.dtype)

    def generate_code(self) -> Callable:
        aug, ax, clock, tag, size = self.aug, self.axes, self.clock, self.tag, self.size
        mode, fill = PAD_MODES[aug.warp_pad_mode], float(aug.fill)
        # until a kernel is compiled, numpy warps (the same bytes, nothing to compile)
        parallel = ParallelSoon(warp_bilinear, warp_bilinear_serial, warp_stand_in)
        serial = ParallelSoon(warp_bilinear_serial, warp_bilinear_serial, warp_stand_in)
        stored = (ax.planes, ax.height, ax.width, ax.pixel)
        shaped = (ax.planes, *size, ax.pixel)

        def warp(images, dst, indices):
            n = len(indices)
            work = np.float32 if images.dtype == np.float16 else images.dtype
            src = np.ascontiguousarray(images[:n], dtype=work).reshape(n, *stored)
            direct = dst.dtype == work and dst[:n].flags.c_contiguous
            out = dst[:n] if direct else np.empty(dst[:n].shape, work)
            mats = warp_matrices(aug, indices, clock, tag, ax.height, ax.width)
            disp = displacements(aug, indices, clock, tag, size)
            rounding = work == np.uint8
            call = parallel if nb.get_num_threads() > 1 else serial
            call(src, out.reshape(n, *shaped), mats, disp, mode, fill, rounding)
            if not direct:
                dst[:n] = out
            return dst[:n]

        warp.with_indices = True  # type: ignore[attr-defined]
        return warp


def check_dense_warp(aug: Any, name: str, dense: DenseField) -> None:
    """A disparity or a flow follows the matrix geometry only where it scales and flips:
    refuse the options that bend it, by name."""
    if dense.kind == "mask":
        return
    for option in _BENDS:
        if option in aug.warp_ops:
            raise ValueError(
                f"augment {option}={getattr(aug, option)}: dense field {name!r} of kind "
                f"{dense.kind!r} cannot follow it (its values would need more than a scale "
                f"and a sign); declare it as a mask, or drop {option}"
            )


class DenseWarp(Operation):
    """A dense field moved by A's matrices (nearest), values adjusted for its kind.

    Args:
        augment: The ``PairAugment``.
        dense: The field's :class:`~ffcv_pairs.augment.dense.DenseField`.
        spec: Its stored shape and dtype.
        shape: :func:`~ffcv_pairs.augment.dense.dense_shape`: where its pixels are.
        clock: The loader's ``[seed, epoch]``.
    """

    def __init__(
        self, augment: Any, dense: DenseField, spec: FieldSpec, shape: NearestShape, clock: Any
    ):
        super().__init__()
        self.aug, self.dense, self.clock, self.shape = augment, dense, clock, shape
        self.size = output_size(augment, shape.height, shape.width)
        self.dtype = spec.np_dtype
        sizes = list(spec.shape)
        at = 1 if len(sizes) == 3 and sizes[1:] == [shape.height, shape.width] else 0
        sizes[at], sizes[at + 1] = self.size
        self.out_shape = tuple(sizes)
        self.channels_last = shape.pixel_bytes > self.dtype.itemsize

    def declare_state_and_memory(self, previous_state: State):
        state = replace(previous_state, jit_mode=True, shape=self.out_shape)
        return state, AllocationQuery(self.out_shape, self.dtype)

    def generate_code(self) -> Callable:
        aug, s, clock, size = self.aug, self.shape, self.clock, self.size
        serial, parallel = SharedCompile(), ParallelSoon(warp_nearest, warp_nearest_serial)
        items = s.pixel_bytes // self.dtype.itemsize
        fill = np.full(items, self.dense.fill, self.dtype).view(np.uint8)
        kind, dense_fill, last = self.dense.kind, self.fill_value, self.channels_last
        mode = PAD_MODES[aug.pad_mode]

        def move(fields, dst, indices):
            n = len(indices)
            out = dst[:n]
            src = np.ascontiguousarray(fields[:n]).view(np.uint8)
            src = src.reshape(n, s.planes, s.height, s.width, s.pixel_bytes)
            flat = out.reshape(n, -1).view(np.uint8).reshape(n, s.planes, *size, s.pixel_bytes)
            mats = warp_matrices(aug, indices, clock, 0, s.height, s.width)
            disp = displacements(aug, indices, clock, 0, size)
            call = parallel if nb.get_num_threads() > 1 else partial(serial, warp_nearest_serial)
            call(src, flat, mats, disp, mode, fill)
            if kind != "mask":
                scale_values(out, mats, kind, last, dense_fill)
            return out

        move.with_indices = True  # type: ignore[attr-defined]
        return move

    @property
    def fill_value(self) -> Any:
        return self.dtype.type(self.dense.fill)


def scale_values(out: np.ndarray, mats: np.ndarray, kind: str, last: bool, fill: Any) -> None:
    """A disparity's or a flow's values in output pixels, in place: the source's values
    through the inverse of each matrix's linear part (a scale and a sign per axis, or a
    quarter turn); pixels equal to ``fill`` are kept."""
    n = len(out)
    inv = np.linalg.inv(mats[:, :2, :2])
    invalid = out == fill
    kept = out[invalid]
    grid = (n,) + (1,) * (out.ndim - 2)
    if kind == "disparity":
        out *= inv[:, 0, 0].reshape((n,) + (1,) * (out.ndim - 1)).astype(out.dtype)
    else:
        u = (out[..., 0] if last else out[:, 0]).copy()
        v = (out[..., 1] if last else out[:, 1]).copy()
        for j, dst in enumerate((out[..., 0], out[..., 1]) if last else (out[:, 0], out[:, 1])):
            a = inv[:, j, 0].reshape(grid).astype(out.dtype)
            b = inv[:, j, 1].reshape(grid).astype(out.dtype)
            dst[...] = a * u + b * v
    out[invalid] = kept
