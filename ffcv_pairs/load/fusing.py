"""What the fused decoder kernel reads for a loader (see :mod:`ffcv_pairs.kernels.fused`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..augment.config import ImageAxes, PairAugment
from ..augment.placement import OpPlacement
from ..format.schema import PairSchema
from ..kernels.decode import StoredImage
from ..kernels.fused import FusedOps
from ..kernels.geometry import GeometryConfig
from ..kernels.noise import normal_table
from ..kernels.photometric import PhotometricConfig
from ..kernels.pixels import OUT_BFLOAT16, OUT_FLOAT16, OUT_FLOAT32, OUT_UINT8

__all__ = ["FusedConfig", "fused_config", "output_array", "unused_ops"]

#: Output dtype name -> (the kernels' OUT_* kind, the buffer's numpy dtype).
_KINDS: dict[str, tuple[int, np.dtype]] = {
    "uint8": (OUT_UINT8, np.dtype(np.uint8)),
    "float32": (OUT_FLOAT32, np.dtype(np.float32)),
    "float16": (OUT_FLOAT16, np.dtype(np.float16)),
    "bfloat16": (OUT_BFLOAT16, np.dtype(np.uint16)),  # bits, viewed as bfloat16 later
}


@dataclass(frozen=True)
class FusedConfig:
    """The kernel's arguments besides the batch, and what the decoder allocates.

    Attributes:
        stored_a, stored_b: The stored images.
        geo, photo: The geometry and photometric configs.
        ops: The rest (``threads`` is set per batch).
        shapes: Output shape of A and of B.
        dtype: The output buffers' dtype (uint16 for bfloat16 bits).
    """

    stored_a: StoredImage
    stored_b: StoredImage
    geo: GeometryConfig
    photo: PhotometricConfig
    ops: FusedOps
    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    dtype: np.dtype


def _norm(augment: PairAugment, channels: int) -> np.ndarray:
    """float32 ``(2, 2, channels)``: per field, the mean and 1/std (0 and 1: none)."""
    norm = np.zeros((2, 2, channels), dtype=np.float32)
    norm[:, 1] = 1.0
    if augment.normalize_mean is not None and augment.normalize_std is not None:
        norm[:, 0] = np.asarray(augment.normalize_mean, dtype=np.float32)
        norm[:, 1] = 1.0 / np.asarray(augment.normalize_std, dtype=np.float64)
    return norm


def _no_stats() -> np.ndarray:
    empty = np.zeros((0, 2, 4), dtype=np.uint32)
    empty.setflags(write=False)  # the same array type as a mapped stats file
    return empty


def _stats_use(
    augment: PairAugment, axes: dict[str, ImageAxes], stored: dict[str, str | None]
) -> np.ndarray:
    """Whether each field's contrast mean may come from its stored statistics: contrast
    is on, the geometry moves every pixel without dropping or adding any (flips, quarter
    turns), and a 3-channel image was summed per channel in the loader's channel order."""
    keeps_pixels = augment.out_size is None and not any(augment.translate)
    use = np.zeros(2, dtype=np.bool_)
    for t, (name, ax) in enumerate(axes.items()):
        summed = stored.get(name)
        per_channel = ax.num_channels != 3 or summed == ax.channels
        use[t] = augment.contrast > 0 and keeps_pixels and summed is not None and per_channel
    return use


def fused_config(
    augment: PairAugment,
    schema: PairSchema,
    placement: OpPlacement,
    clock: np.ndarray,
    stats: tuple[np.ndarray, dict[str, str | None]] | None = None,
) -> FusedConfig:
    """The :class:`FusedConfig` of ``augment`` on uint8 files of ``schema``; ``stats``: the
    file's image statistics and how each field was summed (see
    :mod:`~ffcv_pairs.format.stats`), or None."""
    axes = augment.field_axes(schema)
    a, b = (axes[n] for n in schema.IMAGE_FIELDS)
    records, stored = (_no_stats(), {}) if stats is None else stats
    images = [StoredImage(ax.planes, ax.height, ax.width, ax.pixel) for ax in (a, b)]
    fills = np.full((2, max(a.pixel, b.pixel)), augment.fill, dtype=np.float64)
    kind, dtype = _KINDS[placement.output_dtype]
    ops = FusedOps(
        photometric=augment.has_photometric,
        kind=kind,
        norm=_norm(augment, a.num_channels),
        table=normal_table(),
        fills=np.clip(fills, 0, 255).astype(np.uint8),
        clock=clock,
        stats=records,
        stats_use=_stats_use(augment, {n: axes[n] for n in schema.IMAGE_FIELDS}, stored),
        downscale=np.zeros(2, dtype=np.bool_),  # set by the JPEG decoder
        threads=1,
    )
    return FusedConfig(
        stored_a=images[0],
        stored_b=images[1],
        geo=augment.geometry_config(a),
        photo=augment.photometric_config(),
        ops=ops,
        shapes=(augment.output_shape(a), augment.output_shape(b)),
        dtype=dtype,
    )


def output_array(out: np.ndarray) -> np.ndarray:
    """A batch buffer as the fused kernel writes it: ``(batch, bytes)`` uint8, whatever the
    dtype (the kernel takes the dtype from ``FusedOps.kind``, so it compiles once for all)."""
    return out.reshape(out.shape[0], -1).view(np.uint8)


def unused_ops(cfg: FusedConfig) -> tuple[bool | None, bool | None, bool | None]:
    """:func:`~ffcv_pairs.kernels.fused.fused_pairs`' ``float_out``, ``resizing`` and
    ``every_op``: None where the pipeline has no float output, no resized crop, nothing but
    a resized crop to uint8 (pruned from its compile)."""
    uint8 = cfg.ops.kind == OUT_UINT8
    resize_only = cfg.geo.resize and uint8 and not cfg.ops.photometric
    return (
        None if uint8 else True,
        True if cfg.geo.resize else None,
        None if resize_only else True,
    )
