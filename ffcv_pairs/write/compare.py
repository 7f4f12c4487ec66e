"""Compare a written `.beton` with its sources, sample by sample, bit-exactly: a quantized
field (see :class:`~ffcv_pairs.format.schema.Quantization`) with a fresh quantization of
its source, whose codes are exactly those stored."""

from __future__ import annotations

import numpy as np

from ..format.integrity import Mismatch
from ..format.reader import PairReader
from ..format.schema import PairSchema
from .shuffle import Permutation
from .sources import PairSource, cast_to_store, quantize_floats, to_array, to_label

__all__ = ["compare_with_source"]


def _stored(reader: PairReader, field: str, sid: int) -> np.ndarray:
    spec = reader.schema.spec(field)
    ptr = int(reader.image_pointers(field)[sid])
    raw = np.fromfile(reader.path, dtype=np.uint8, count=spec.nbytes, offset=ptr)
    return raw.view(spec.np_dtype).reshape(spec.shape)


def compare_with_source(
    reader: PairReader,
    source: PairSource,
    samples: int | None,
    seed: int = 0,
    store_dtype: str | None = None,
    shuffle_seed: int | None = None,
) -> Mismatch | None:
    """Compare ``samples`` random samples (all when None) with ``source``, bit-exactly.

    ``shuffle_seed`` (from the sidecar) maps each position of the file to its source
    index through :class:`~ffcv_pairs.write.shuffle.Permutation`.
    """
    n = reader.num_samples
    if len(source) < n:
        return Mismatch(f"source has {len(source)} samples, the file {n}")
    ids = (
        np.arange(n)
        if samples is None or samples >= n
        else np.sort(np.random.default_rng(seed).choice(n, size=samples, replace=False))
    )
    origin = ids if shuffle_seed is None else Permutation(n, shuffle_seed).source_of(ids)
    labels = reader.metadata[f"f{reader.field_index(PairSchema.LABEL_FIELD)}"]
    for sid, i in zip(ids.tolist(), origin.tolist()):
        raw = source.read(i)
        at = f"sample {sid}" if shuffle_seed is None else f"sample {sid} (source index {i})"
        for value, field in zip(raw[:2], PairSchema.IMAGE_FIELDS):
            where, quantized = source.where(i, field), reader.schema.spec(field).quantized
            arr = to_array(value, where)
            if quantized is not None:
                want = quantize_floats(arr, quantized, where)
            else:
                want = cast_to_store(arr, store_dtype, where)
            got = _stored(reader, field, sid)
            if (
                want.shape != got.shape
                or want.dtype != got.dtype
                or (want.tobytes() != got.tobytes())
            ):
                return Mismatch(f"{at}: field {field!r} differs from {where}")
        where = source.where(i, PairSchema.LABEL_FIELD)
        if to_label(raw[2], where) != int(labels[sid]):
            return Mismatch(f"{at}: label {int(labels[sid])} differs from {where}")
    return None
