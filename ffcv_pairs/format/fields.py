"""The label and the extra fields of a sample: a scalar or a fixed-shape array each.

* An integer scalar is an ``IntField`` (int64, in the metadata table), as every label
  of files written before extra fields existed;
* a float scalar is a ``FloatField`` (float64, in the metadata table);
* an array is an ``NDArrayField`` of fixed shape and dtype (:data:`FIELD_DTYPES`),
  stored in the data region, in the sample's slot after A and B.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ffcv.fields.base import Field

__all__ = ["FIELD_DTYPES", "INT_LABEL", "FieldSpec", "check_field_name"]

#: Array dtypes a label or extra field may have.
FIELD_DTYPES: tuple[str, ...] = (
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
)
_SCALAR_DTYPES = ("int64", "float64")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NAME_BYTES = 16  # upstream's field-descriptor table keeps names in 16 bytes


def check_field_name(name: object, taken: tuple[str, ...]) -> str:
    """``name`` when it can name an extra field (an identifier of at most 16 ASCII
    characters that no other field has); else a ValueError quoting it."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > _NAME_BYTES:
        raise ValueError(
            f"field name {name!r} must be an identifier of at most {_NAME_BYTES} ASCII characters"
        )
    if name in taken:
        raise ValueError(f"field name {name!r} is taken; fields so far are {list(taken)}")
    return name


@dataclass(frozen=True)
class FieldSpec:
    """Shape and dtype of the label or of an extra field.

    Args:
        shape: ``()`` for a scalar, else the fixed array shape of every sample.
        dtype: ``int64`` or ``float64`` for a scalar; one of :data:`FIELD_DTYPES` for an
            array.
    """

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d <= 0 for d in shape):
            raise ValueError(f"a field's shape must have positive sizes, got {list(shape)}")
        object.__setattr__(self, "shape", shape)
        allowed = _SCALAR_DTYPES if not shape else FIELD_DTYPES
        if self.dtype not in allowed:
            kind = "scalar" if not shape else "array"
            raise ValueError(f"a {kind} field's dtype must be one of {allowed}, got {self.dtype!r}")

    @property
    def is_scalar(self) -> bool:
        """Kept in the metadata table (no bytes in the data region)."""
        return not self.shape

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes in the data region per sample (0 for a scalar)."""
        return 0 if self.is_scalar else int(np.prod(self.shape)) * self.np_dtype.itemsize

    def describe(self) -> str:
        return self.dtype if self.is_scalar else f"{self.dtype}{list(self.shape)}"

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype} | ({"shape": list(self.shape)} if self.shape else {})

    def ffcv_field(self) -> Field:
        """The FFCV ``Field`` that stores it."""
        from ffcv.fields import FloatField, IntField, NDArrayField

        if not self.is_scalar:
            return NDArrayField(self.np_dtype, self.shape)
        return IntField() if self.dtype == "int64" else FloatField()

    @classmethod
    def from_handler(cls, handler: Any) -> FieldSpec:
        """The spec of an upstream field; a ValueError naming its kind when it is none of
        ``IntField``, ``FloatField`` or ``NDArrayField``."""
        from ffcv.fields import FloatField, IntField, NDArrayField

        if isinstance(handler, IntField):
            return INT_LABEL
        if isinstance(handler, FloatField):
            return cls((), "float64")
        if isinstance(handler, NDArrayField):
            return cls(tuple(int(d) for d in handler.shape), np.dtype(handler.dtype).name)
        raise ValueError(
            f"is a {type(handler).__name__}, expected IntField, FloatField or NDArrayField"
        )


#: The label of every file written before other kinds existed.
INT_LABEL = FieldSpec((), "int64")
