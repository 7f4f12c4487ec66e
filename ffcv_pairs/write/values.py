"""The label and extra fields of raw samples: inferred from sample 0, every other sample
checked against it, stored in the metadata row (scalars) or the sample's slot (arrays).

A source item is ``(A, B, label)`` or ``(A, B, label, {"name": value, ...})``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..format.fields import FIELD_DTYPES, FieldSpec
from ..format.schema import PairSchema
from .sources import SourceError, to_array, to_label

__all__ = ["fill_values", "infer_extras", "infer_value", "scalar_record", "split_item"]


def split_item(item: Any, where: str) -> tuple[Any, Any, Any, Mapping[str, Any]]:
    """``(A, B, label, extras)`` of a source item of 3 or 4 elements."""
    if isinstance(item, Sequence) and not isinstance(item, str | bytes):
        if len(item) == 3:
            return item[0], item[1], item[2], {}
        if len(item) == 4 and isinstance(item[3], Mapping):
            return item[0], item[1], item[2], item[3]
    raise SourceError(
        f"{where}: expected an (A, B, label) or (A, B, label, {{name: value}}) tuple, got "
        f"{type(item).__name__}{f' of {len(item)}' if isinstance(item, Sequence) else ''}"
    )


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def infer_value(value: Any, where: str) -> FieldSpec:
    """The spec of a label or extra value: an integer scalar (also a 1-element 1-d integer
    tensor, as labels always were) is int64, a float scalar float64, else an array."""
    if isinstance(value, bool | np.bool_):
        raise SourceError(f"{where}: expected a number or an array, got bool {value}")
    if _scalar(value):
        return FieldSpec((), "int64" if isinstance(value, int | np.integer) else "float64")
    arr = to_array(value, where)
    shape = tuple(value.shape)  # to_array makes a 0-d value 1-d
    if arr.dtype.kind in "iu" and arr.size == 1 and len(shape) <= 1:
        to_label(value, where)  # refuses a uint64 that int64 does not hold
        return FieldSpec((), "int64")
    if arr.dtype.kind == "f" and not shape:
        return FieldSpec((), "float64")
    if arr.dtype.name not in FIELD_DTYPES:
        raise SourceError(f"{where}: dtype {arr.dtype} is not stored; use one of {FIELD_DTYPES}")
    if arr.size == 0:
        raise SourceError(f"{where}: expected a non-empty array, got shape {list(shape)}")
    return FieldSpec(shape, arr.dtype.name)


def infer_extras(extras: Mapping[str, Any], where: Callable[[str], str]) -> dict[str, FieldSpec]:
    """The specs of sample 0's extra fields, by name, in its order."""
    return {str(name): infer_value(value, where(str(name))) for name, value in extras.items()}


def _checked(value: Any, spec: FieldSpec, where: str) -> Any:
    """``value`` as ``spec`` stores it (a Python number, or an array); a SourceError naming
    ``where`` and both kinds when it differs from sample 0."""
    if isinstance(value, bool | np.bool_):
        got = FieldSpec((), "int64") if spec.is_scalar else None
    else:
        try:
            got = infer_value(value, where)
        except SourceError:
            got = None
    if got != spec:
        shown = got.describe() if got is not None else type(value).__name__
        raise SourceError(
            f"{where}: {shown} differs from sample 0 ({spec.describe()}); every sample must match"
        )
    if spec.dtype == "int64" and spec.is_scalar:
        return to_label(value, where)
    if spec.is_scalar:
        return float(np.asarray(value.cpu() if hasattr(value, "cpu") else value).reshape(()))
    return to_array(value, where)


def scalar_record(schema: PairSchema, k: int) -> np.ndarray:
    """Zeroed room for the scalar fields of ``k`` samples: a record per sample."""
    scalars = [(n, s.np_dtype) for n, s in schema.values.items() if s.is_scalar]
    return np.zeros(k, dtype=np.dtype(scalars))


def fill_values(
    schema: PairSchema,
    item: tuple[Any, Mapping[str, Any]],
    slot: np.ndarray,
    record: np.ndarray,
    where: Callable[[str], str],
) -> None:
    """Store the label and extras ``item`` of one sample: scalars into ``record`` (one
    row of :func:`scalar_record`), arrays into ``slot`` (its bytes in the data region)."""
    label, extras = item
    unknown = [name for name in extras if name not in dict(schema.extras)]
    missing = [name for name, _ in schema.extras if name not in extras]
    if unknown or missing:
        raise SourceError(
            f"{where(PairSchema.LABEL_FIELD)}: extra fields {sorted(map(str, extras))} differ "
            f"from sample 0's {[name for name, _ in schema.extras]}; every sample must match"
        )
    offsets = schema.slot_offsets()
    for name, spec in schema.values.items():
        raw = label if name == PairSchema.LABEL_FIELD else extras[name]
        value = _checked(raw, spec, where(name))
        if spec.is_scalar:
            record[name] = value
        else:
            at = offsets[name]
            slot[at : at + spec.nbytes] = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
