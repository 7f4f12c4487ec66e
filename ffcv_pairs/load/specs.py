"""The FFCV pipeline specs of a loader: one shared decoder for A and B, then each
field's CPU ops, and (with a device stage) the device ops each output runs after
its copy."""

from __future__ import annotations

import numpy as np
from ffcv.pipeline import PipelineSpec
from ffcv.pipeline.operation import Operation
from ffcv.transforms import ToTensor

from ..augment.config import PairAugment
from ..augment.dense import DenseGeometry, dense_shape, image_shaped
from ..augment.ops import cpu_ops, device_ops
from ..augment.placement import place_ops
from ..augment.user_apply import user_field_ops
from ..augment.warp_ops import DenseWarp, check_dense_warp
from ..format.joined import DatasetReader
from ..format.schema import PairSchema
from .decoders import JpegPairDecoder, LabelDecoder, PairDecoder, TakeField
from .delivery.stage import Finisher
from .field_ops import FieldOps, field_ops_of
from .value_decoders import ArrayFieldDecoder, ScalarDecoder

__all__ = ["pair_specs"]


def _finisher(op: Operation) -> Finisher:
    """A torch op of the pipeline (``f(x, dst)``) as a device-stage step (``f(x)``)."""
    code = op.generate_code()
    return lambda x: code(x, None)


def pair_specs(
    reader: DatasetReader,
    augment: PairAugment | None,
    clock: np.ndarray,
    stats: tuple[np.ndarray, dict[str, str | None]] | None,
    on_cpu: bool,
    jpeg_downscale: bool = True,
    field_ops: FieldOps | None = None,
) -> tuple[dict[str, PipelineSpec], list[list[Finisher]]]:
    """A: decoder (both images) -> take A -> CPU ops -> user ops -> ``field_ops`` -> ...; B:
    the same decoder -> take B -> ...; the label and each extra field: its decoder, then its
    ``field_ops``. With ``on_cpu`` the device ops (normalise, cast) end the pipelines;
    otherwise they are returned, per output, for the device stage.

    Args:
        clock: The loader's ``[seed, epoch]``, read by the augmentation kernels.
        stats: The file's image statistics (:func:`~ffcv_pairs.format.integrity.load_stats`).
        jpeg_downscale, field_ops: See :class:`~ffcv_pairs.load.options.LoaderConfig`.
    """
    schema = reader.schema
    moved = _dense_ops(augment, schema, clock, reader.path)
    b_ptrs = reader.image_pointers(PairSchema.IMAGE_FIELDS[1])
    appended = field_ops_of(field_ops, [*PairSchema.IMAGE_FIELDS, *schema.values], reader.path)
    images_appended = any(appended[name] for name in PairSchema.IMAGE_FIELDS)
    placement = place_ops(augment, schema, on_cpu=on_cpu, ops_after=images_appended)
    decoder: PairDecoder
    if schema.compressed:
        decoder = JpegPairDecoder(reader, augment, clock, placement, stats, jpeg_downscale)
    else:
        decoder = PairDecoder(schema, b_ptrs, augment, clock, reader.page_shift, placement, stats)
    specs: dict[str, PipelineSpec] = {}
    finishers: list[list[Finisher]] = []
    for index, name in enumerate(PairSchema.IMAGE_FIELDS):
        out = decoder.fields[index]
        after = device_ops(augment, name, schema, placement) if augment else []
        ops = [
            TakeField(index, out.out_shape, out.dtype),
            *(cpu_ops(augment, name, schema, clock, placement) if augment else []),
            *(user_field_ops(augment, name, schema, clock) if augment else []),
            *appended[name],
            ToTensor(),
            *(after if on_cpu else []),
        ]
        finishers.append([] if on_cpu else [_finisher(op) for op in after])
        if index == 0:
            specs[name] = PipelineSpec(name, decoder=decoder, transforms=ops)
        else:
            specs[name] = PipelineSpec(decoder, transforms=ops)
    for name, field in schema.values.items():
        value: Operation
        if field.is_scalar:
            value = LabelDecoder() if field.dtype == "int64" else ScalarDecoder(field)
        else:
            value = ArrayFieldDecoder(field, reader.page_shift)
        steps = [*moved.get(name, []), *appended[name], ToTensor()]
        specs[name] = PipelineSpec(name, decoder=value, transforms=steps)
        finishers.append([])
    return specs, finishers


def _dense_ops(
    augment: PairAugment | None, schema: PairSchema, clock: np.ndarray, path: object
) -> dict[str, list[Operation]]:
    """The :class:`~ffcv_pairs.augment.dense.DenseGeometry` of each field declared dense,
    by name. A field shaped like the images (their height and width among its last three
    sizes) but not declared would no longer line up with A and B after a crop, flip or
    turn: it is refused by name rather than handed back unmoved."""
    dense = augment.dense_fields if augment is not None else {}
    unknown = sorted(set(dense) - set(schema.values))
    if unknown:
        raise ValueError(
            f"{path}: augment dense names field(s) {unknown} that the file does not have; its "
            f"label and extra fields are {list(schema.values)}"
        )
    if augment is None or not augment.has_geometry:
        return {}
    axes = augment.field_axes(schema)[PairSchema.IMAGE_FIELDS[0]]
    ops: dict[str, list[Operation]] = {}
    for name in image_shaped(schema):
        if name not in dense:
            field = schema.values[name]
            raise ValueError(
                f"{path}: field {name!r} ({field.dtype}{list(field.shape)}) is shaped like the "
                f"images, but the augmentation's geometry (crop, flip, turn, translate) would "
                f"leave it behind: declare it, e.g. augment dense={{{name!r}: 'mask'}} (or "
                f"'disparity', 'flow'), so that it follows A, or load it without geometric ops"
            )
    for name, spec in dense.items():
        field = schema.values[name]
        moved = dense_shape(name, field, spec, axes, augment.rot90)
        if augment.warps:
            check_dense_warp(augment, name, spec)
            ops[name] = [DenseWarp(augment, spec, field, moved, clock)]
        else:
            geo = augment.geometry_config(axes)
            ops[name] = [DenseGeometry(spec, field, moved, geo, clock)]
    return ops
