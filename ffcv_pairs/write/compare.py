"""Compare a written `.beton` with its sources, sample by sample, bit-exactly: a quantized
field (see :class:`~ffcv_pairs.format.schema.Quantization`) with a fresh quantization of
its source, whose codes are exactly those stored; a JPEG field's stored bytes with a fresh
encode of its source (the encoder is deterministic)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..format.integrity import Mismatch
from ..format.reader import BetonError, PairReader
from ..format.schema import PairSchema
from .encode import encode_jpeg
from .parts import SliceSource
from .shuffle import Permutation
from .sources import PairSource, cast_to_store, quantize_floats, to_array
from .values import fill_values, scalar_record, split_item

__all__ = ["compare_with_source", "stored_bytes", "stored_image"]


def stored_bytes(reader: PairReader, field: str, sid: int) -> np.ndarray:
    """The bytes image ``field`` of sample ``sid`` takes in the file (a JPEG, or raw)."""
    ptr = int(reader.image_pointers(field)[sid])
    size = reader.stored_bytes(field)
    count = int(size[sid]) if isinstance(size, np.ndarray) else size
    return np.fromfile(reader.path, dtype=np.uint8, count=count, offset=ptr)


def stored_image(reader: PairReader, field: str, sid: int) -> np.ndarray:
    """Image ``field`` of sample ``sid`` as the loader sees it before augmentation.

    Raises:
        BetonError: a JPEG that does not decode, naming the sample and field.
    """
    spec, data = reader.schema.spec(field), stored_bytes(reader, field, sid)
    if spec.jpeg is None:
        return data.view(spec.np_dtype).reshape(spec.shape)
    from ..kernels.jpeg import CHW, HWC, decode_image

    h, w = spec.height_width
    first = spec.jpeg_axes == "chw"
    out = np.empty((spec.channels, h, w) if first else (h, w, spec.channels), dtype=np.uint8)
    if decode_image(data, 0, len(data), out, CHW if first else HWC, spec.channels):
        raise BetonError(f"{reader.path}: sample {sid} field {field!r}: corrupt JPEG")
    return out.reshape(spec.shape)


def compare_with_source(
    reader: PairReader,
    source: PairSource,
    samples: int | None,
    seed: int = 0,
    store_dtype: str | None = None,
    shuffle_seed: int | None = None,
    source_count: int | None = None,
    part: dict[str, Any] | None = None,
) -> Mismatch | None:
    """Compare ``source``'s length, then ``samples`` random samples (all when None) with
    ``source``, bit-exactly.

    ``shuffle_seed`` (from the sidecar) maps each position of the file to its source
    index through :class:`~ffcv_pairs.write.shuffle.Permutation`. ``source_count`` (from
    the sidecar) is how many samples the source held when the file was written, more
    than the file's under ``--limit``; None: as many as the file holds. ``part`` (from
    the sidecar, see :data:`~ffcv_pairs.format.shards.PART_KEY`): the file holds that
    slice of ``source`` (``write --part``), and is compared with it.
    """
    n = reader.num_samples
    checked = _what_was_written(source, n, source_count, part)
    if isinstance(checked, Mismatch):
        return checked
    source = checked
    ids = (
        np.arange(n)
        if samples is None or samples >= n
        else np.sort(np.random.default_rng(seed).choice(n, size=samples, replace=False))
    )
    origin = ids if shuffle_seed is None else Permutation(n, shuffle_seed).source_of(ids)
    for sid, i in zip(ids.tolist(), origin.tolist()):
        raw = split_item(source.read(i), source.where(i, "item"))
        at = f"sample {sid}" if shuffle_seed is None else f"sample {sid} (source index {i})"
        for value, field in zip(raw[:2], PairSchema.IMAGE_FIELDS):
            spec = reader.schema.spec(field)
            where, quantized = source.where(i, field), spec.quantized
            arr = to_array(value, where)
            if quantized is not None:
                want = quantize_floats(arr, quantized, where)
            else:
                want = cast_to_store(arr, store_dtype, where)
            if want.shape != spec.shape or want.dtype != spec.np_dtype:
                return Mismatch(f"{at}: field {field!r} differs from {where}")
            if spec.jpeg is not None:
                want = encode_jpeg(want, spec.jpeg_axes, spec.jpeg.quality)
            if want.tobytes() != stored_bytes(reader, field, sid).tobytes():
                what = "stored JPEG differs from a fresh encode of" if spec.jpeg else "differs from"
                return Mismatch(f"{at}: field {field!r} {what} {where}")
            if quantized is not None and spec.jpeg is None:
                off = _code_error(want, arr, quantized.lo, quantized.hi)
                if off is not None:
                    return Mismatch(f"{at}: field {field!r}: {off} ({where})")
        differs = _compare_values(reader, (raw[2], raw[3]), sid, partial(source.where, i))
        if differs is not None:
            return Mismatch(f"{at}: {differs}")
    return None


def _compare_values(
    reader: PairReader, item: tuple[Any, Any], sid: int, where: Callable[[str], str]
) -> str | None:
    """Which of the label and extras ``item`` of sample ``sid`` differs from the file's,
    bit-exactly (a scalar by its value, an array by its bytes); None when none does."""
    schema = reader.schema
    slot, record = np.zeros(schema.slot_bytes, dtype=np.uint8), scalar_record(schema, 1)
    fill_values(schema, item, slot, record, where)
    offsets = schema.slot_offsets()
    for name, spec in schema.values.items():
        if spec.is_scalar:
            stored = reader.metadata[f"f{reader.field_index(name)}"][sid]
            if record[name][0].tobytes() != stored.tobytes():
                shown = int(stored) if spec.dtype == "int64" else float(stored)
                return f"{name} {shown} differs from {where(name)}"
            continue
        ptr = int(reader.image_pointers(name)[sid])
        stored = np.fromfile(reader.path, dtype=np.uint8, count=spec.nbytes, offset=ptr)
        if stored.tobytes() != slot[offsets[name] : offsets[name] + spec.nbytes].tobytes():
            return f"field {name!r} ({spec.describe()}) differs from {where(name)}"
    return None


def _what_was_written(
    source: PairSource, n: int, source_count: int | None, part: dict[str, Any] | None
) -> PairSource | Mismatch:
    """The samples of ``source`` a file of ``n`` was written from (a part's slice of it),
    or how its length differs from what the sidecar says."""
    if source_count is not None and len(source) != source_count:
        return Mismatch(
            f"source has {len(source)} samples, but the file was written from "
            f"{source_count} (its sidecar says)"
        )
    if part is not None:
        first, stop = int(part["first"]), int(part["stop"])
        if len(source) < stop:
            return Mismatch(
                f"source has {len(source)} samples, but the file is part "
                f"{part['index']}/{part['count']}, samples [{first}, {stop}) of it"
            )
        source, source_count = SliceSource(source, first, stop), None
    if len(source) < n or (source_count is None and len(source) != n):
        return Mismatch(f"source has {len(source)} samples, the file {n}")
    return source


def _code_error(codes: np.ndarray, values: np.ndarray, lo: float, hi: float) -> str | None:
    """Whether uint8 ``codes`` stand for ``values`` within half a step of ``[lo, hi]``, from
    the definition (``lo + code * (hi - lo) / 255``, in float64), not from the writer's own
    encoder: equal codes from a broken encoder (every code 0 under an infinite step) pass the
    byte comparison, not this one. None when they do; else what is wrong."""
    step = (float(hi) - float(lo)) / 255.0
    if not (np.isfinite(step) and step > 0):
        return f"quantize range [{lo:g}, {hi:g}] has no finite step, so its codes mean nothing"
    err = np.abs(lo + codes.astype(np.float64) * step - values.astype(np.float64))
    worst = float(np.nanmax(err)) if err.size else 0.0
    if np.isnan(err).any() or worst > step / 2 * (1 + 1e-9):
        return (
            f"codes stand for values up to {worst:.4g} away, more than half a step ({step / 2:.4g})"
        )
    return None
