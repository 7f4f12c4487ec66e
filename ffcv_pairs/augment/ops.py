"""Per-field augmentation ops: FFCV ``Operation``\\ s that receive the sample ids.

For uint8 A and B every CPU op is fused into the decoder (see :mod:`.placement`);
these ops serve the other dtypes. Each CPU op calls a cached, parallel numba
kernel from :mod:`kernels` with the batch's sample ids (``with_indices``) and
the loader's ``[seed, epoch]`` clock, which it reads by reference, so a new
epoch needs no recompilation. float16 batches, which numba cannot type, are
converted to float32 and back around the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

from ..format.schema import PairSchema
from ..kernels import SharedCompile
from ..kernels.noise import normal_table
from ..kernels.photometric import ChannelPlanes, photometric
from ..kernels.pixels import photometric_uint8
from ..kernels.resize import ResizeShape, resized_crop
from .config import ImageAxes, PairAugment
from .photo_ops import refuse_outside
from .placement import OpPlacement
from .warp_ops import Warp

__all__ = [
    "AsBFloat16",
    "NormalizeConvert",
    "Photometric",
    "ResizedCrop",
    "channel_planes",
    "cpu_ops",
    "device_ops",
]


def channel_planes(axes: ImageAxes, shape: tuple[int, ...]) -> ChannelPlanes:
    """The kernels' :class:`~ffcv_pairs.kernels.photometric.ChannelPlanes` of an image of
    ``shape`` (the output of the ops before) laid out as ``axes``."""
    n = int(np.prod(shape))
    return ChannelPlanes(axes.planes, axes.pixel, n // axes.planes)


def _numeric(batch: np.ndarray) -> np.ndarray:
    """A uint8/float32 array the kernels can type (float16 -> float32 copy)."""
    return batch.astype(np.float32) if batch.dtype == np.float16 else batch


class ResizedCrop(Operation):
    """Random resized crop (bilinear) + flips + rot90 + translate, shared by A and B."""

    def __init__(self, augment: PairAugment, axes: ImageAxes, clock: np.ndarray, tag: int):
        super().__init__()
        self.axes, self.clock, self.tag = axes, clock, tag
        self.geo = augment.geometry_config(axes)
        self.out_shape = augment.output_shape(axes)

    def declare_state_and_memory(self, previous_state: State):
        return replace(previous_state, jit_mode=True, shape=self.out_shape), AllocationQuery(
            self.out_shape, previous_state.dtype
        )

    def generate_code(self) -> Callable:
        ax, geo, clock, tag = self.axes, self.geo, self.clock, self.tag
        oh, ow, call = geo.out_h, geo.out_w, SharedCompile()

        def crop(images, dst, indices):
            n = len(indices)
            src = _numeric(images[:n]).reshape(n, -1)
            out = dst[:n] if dst.dtype != np.float16 else np.empty(dst[:n].shape, np.float32)
            integer = out.dtype == np.uint8
            rs = ResizeShape(ax.planes, ax.height, ax.width, ax.pixel, oh, ow, integer)
            call(resized_crop, indices, src, out.reshape(n, -1), rs, geo, clock, tag)
            if out is not dst[:n]:
                dst[:n] = out
            return dst[:n]

        crop.with_indices = True  # type: ignore[attr-defined]
        return crop


class Photometric(Operation):
    """Brightness, contrast and gaussian noise, in place; paired or per image.

    Float images are clamped to ``value_range`` (:class:`~ffcv_pairs.augment.config.PairAugment`);
    one holding values outside it is refused with a ``ValueError`` naming the sample,
    since clamping would change data the user did not ask to change.
    """

    def __init__(
        self, augment: PairAugment, axes: ImageAxes, clock: np.ndarray, tag: int, name: str
    ):
        super().__init__()
        self.cfg = augment.photometric_config()
        self.axes, self.clock, self.tag, self.name = axes, clock, tag, name
        self.shape = augment.output_shape(axes)

    def declare_state_and_memory(self, previous_state: State):
        return previous_state, None

    def generate_code(self) -> Callable:
        cfg, clock, tag, table = self.cfg, self.clock, self.tag, normal_table()
        chans, name = channel_planes(self.axes, self.shape), self.name
        call = SharedCompile()

        def jitter(images, _, indices):
            n = len(indices)
            work = _numeric(images[:n]).reshape(n, -1)
            if work.dtype == np.uint8:
                call(photometric_uint8, indices, work, cfg, clock, tag, chans, table)
                return images
            outside = np.zeros((n, 3), dtype=np.float64)
            call(photometric, indices, work, cfg, clock, tag, chans, table, outside)
            if outside[:, 0].any():
                bounds = (cfg.low, cfg.high)
                refuse_outside(indices, outside, bounds, name, "brightness, contrast and noise")
            if images.dtype == np.float16:
                images[:n] = work.reshape(images[:n].shape)
            return images

        jitter.with_indices = True  # type: ignore[attr-defined]
        return jitter


_TORCH_DTYPES = {
    "uint8": torch.uint8,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
}


class NormalizeConvert(Operation):
    """On the device: ``(x - mean) / std`` per channel, then cast to ``out_dtype``."""

    def __init__(
        self,
        mean: tuple[float, ...] | None,
        std: tuple[float, ...] | None,
        out_dtype: str,
        channel_axis: int | None,
    ):
        super().__init__()
        self.mean, self.std = mean, std
        self.out_dtype = _TORCH_DTYPES[out_dtype]
        self.channel_axis = channel_axis

    def declare_state_and_memory(self, previous_state: State):
        return replace(previous_state, jit_mode=False, dtype=self.out_dtype), None

    def generate_code(self) -> Callable:
        out_dtype = self.out_dtype
        cache: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        mean, std, axis = self.mean, self.std, self.channel_axis

        def stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if x.device not in cache:
                shape = [1] * x.ndim
                if axis is not None:
                    shape[axis] = -1
                m = torch.tensor(mean, dtype=torch.float32, device=x.device).reshape(shape)
                s = torch.tensor(std, dtype=torch.float32, device=x.device).reshape(shape)
                cache[x.device] = (m, s)
            return cache[x.device]

        def normalize(x: torch.Tensor, _) -> torch.Tensor:
            if mean is None:
                return x.to(out_dtype)
            m, s = stats(x)
            return ((x.to(torch.float32) - m) / s).to(out_dtype)

        return normalize


class AsBFloat16(Operation):
    """View a uint16 tensor of bfloat16 bits (what the fused CPU kernel writes) as bfloat16."""

    def declare_state_and_memory(self, previous_state: State):
        return replace(previous_state, jit_mode=False, dtype=torch.bfloat16), None

    def generate_code(self) -> Callable:
        def as_bfloat16(x: torch.Tensor, _) -> torch.Tensor:
            return x.view(torch.bfloat16)

        return as_bfloat16


def cpu_ops(
    augment: PairAugment, name: str, schema: PairSchema, clock: np.ndarray, placement: OpPlacement
) -> list[Operation]:
    """The CPU ops of field ``name`` after the shared decoder: the matrix geometry or the
    resized crop, photometric (none when the decoder fuses them)."""
    if placement.fused:
        return []
    axes = augment.field_axes(schema)[name]
    tag = schema.IMAGE_FIELDS.index(name)
    ops: list[Operation] = []
    if augment.warps:
        if not placement.warped:  # else the decoder warps (load/warp_decode)
            ops.append(Warp(augment, axes, clock, tag))
    elif augment.resizes:
        ops.append(ResizedCrop(augment, axes, clock, tag))
    if augment.has_photometric:
        ops.append(Photometric(augment, axes, clock, tag, name))
    return ops


def device_ops(
    augment: PairAugment, name: str, schema: PairSchema, placement: OpPlacement
) -> list[Operation]:
    """The ops of field ``name`` after ``ToTensor`` (and ``ToDevice``): normalise and cast,
    unless the decoder did (then at most a bfloat16 view of its bits)."""
    if placement.cpu_output:
        return [AsBFloat16()] if placement.output_dtype == "bfloat16" else []
    axes = augment.field_axes(schema)[name]
    stored = schema.spec(name).dtype
    out = augment.resolved_out_dtype(stored)
    if augment.normalize_mean is None and out == stored:
        return []
    return [
        NormalizeConvert(augment.normalize_mean, augment.normalize_std, out, axes.channel_axis())
    ]
