"""Raw source values to arrays of the schema: sample 0 sets the schema, every other sample
must match it, a store dtype is applied only where no value changes, and a quantization
only to floats inside its range."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..format.schema import SUPPORTED_DTYPES, ArraySpec, Jpeg, PairSchema, Quantization
from .sources import (
    INT64_MAX,
    PairSource,
    SourceError,
    cast_to_store,
    quantize_floats,
    to_array,
    to_label,
)
from .values import infer_extras, infer_value, split_item

__all__ = ["Converter"]


class Converter:
    """Turns raw values into arrays of the schema, naming the file on any mismatch."""

    def __init__(self, store_dtype: str | None, quantize: Quantization | None = None):
        if store_dtype is not None and store_dtype not in ("uint8", "float16"):
            raise ValueError(f"store_dtype must be None, 'uint8' or 'float16', got {store_dtype!r}")
        if store_dtype is not None and quantize is not None:
            raise ValueError(f"store_dtype={store_dtype!r} and quantize: choose one")
        self.store = store_dtype
        self.quantize = quantize

    def image(self, value: Any, where: str) -> np.ndarray:
        arr = to_array(value, where)
        if self.quantize is not None:
            return quantize_floats(arr, self.quantize, where)
        return cast_to_store(arr, self.store, where)

    def infer(self, source: PairSource, jpeg: dict[str, Jpeg] | None = None) -> PairSchema:
        """The schema of sample 0, refusing what cannot be stored; the fields in ``jpeg``
        stored as JPEG."""
        raw = split_item(source.read(0), source.where(0, "item"))
        specs = []
        for value, name in zip(raw[:2], PairSchema.IMAGE_FIELDS):
            where = source.where(0, name)
            arr = self.image(value, where)
            if arr.dtype.name not in SUPPORTED_DTYPES:
                hint = " (or --store-dtype uint8 / float16)" if arr.dtype.kind in "iuf" else ""
                raise SourceError(
                    f"{where}: dtype {arr.dtype} is not supported; store "
                    f"{'/'.join(SUPPORTED_DTYPES)}{hint}"
                )
            if arr.ndim == 0 or arr.size == 0:
                raise SourceError(f"{where}: expected a non-empty array, got shape {arr.shape}")
            try:
                coded = (jpeg or {}).get(name)
                specs.append(ArraySpec(arr.shape, arr.dtype.name, self.quantize, coded))
            except ValueError as e:
                raise SourceError(f"{where}: {e}") from None
        label = infer_value(raw[2], source.where(0, PairSchema.LABEL_FIELD))
        extras = infer_extras(raw[3], lambda name: source.where(0, name))
        try:
            schema = PairSchema(specs[0], specs[1], label, tuple(extras.items()))
        except (TypeError, ValueError) as e:
            raise SourceError(f"{source.where(0, 'item')}: {e}") from None
        return schema

    def check(self, arr: np.ndarray, spec: ArraySpec, where: str, batched: bool = False) -> None:
        shape = arr.shape[1:] if batched else arr.shape
        if shape != spec.shape or arr.dtype != spec.np_dtype:
            raise SourceError(
                f"{where}: {arr.dtype}{list(shape)} differs from sample 0 "
                f"({spec.describe()}); every sample must match"
            )

    def sample_bytes(
        self, value: Any, spec: ArraySpec, src: PairSource, i: int, part: str
    ) -> np.ndarray:
        """The bytes of one image; names the file (built only then) when it does not fit."""
        exact = type(value) is np.ndarray and value.dtype == spec.np_dtype
        if exact and value.shape == spec.shape and spec.quantized is None:
            return value.reshape(-1).view(np.uint8)
        where = src.where(i, part)
        arr = self.image(value, where)
        self.check(arr, spec, where)
        return arr.reshape(-1).view(np.uint8)

    @staticmethod
    def label(value: Any, src: PairSource, i: int) -> int:
        fast = type(value) is np.ndarray and value.dtype.kind in "iu" and value.size == 1
        if fast and value.ndim <= 1:
            label = int(value.reshape(()))
            if label <= INT64_MAX:  # a uint64 may not be: to_label refuses it by name
                return label
        return to_label(value, src.where(i, PairSchema.LABEL_FIELD))
