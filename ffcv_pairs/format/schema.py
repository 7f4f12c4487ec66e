"""The one contract between writer and loader: field names, shapes and dtypes.

A `.beton` written by this project holds three fields, in this order:
``A`` and ``B`` (``NDArrayField``, fixed shape and dtype each) and ``label``
(``IntField``, an int64 scalar kept in the metadata table). Nothing else in the
project spells these names out; it asks the schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from ffcv.fields.base import Field

__all__ = ["SUPPORTED_DTYPES", "ArraySpec", "PairSchema"]

#: Image dtypes that are stored and loaded bit-exactly.
SUPPORTED_DTYPES: tuple[str, ...] = ("uint8", "float16", "float32")


@dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one image field.

    Args:
        shape: The fixed array shape of every sample, e.g. ``(3, 64, 64)``.
        dtype: One of :data:`SUPPORTED_DTYPES`.
    """

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if not self.shape or any(int(d) <= 0 for d in self.shape):
            raise ValueError(f"shape must be non-empty with positive sizes, got {self.shape}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(
                f"dtype {self.dtype!r} is not supported; use one of {SUPPORTED_DTYPES}"
            )

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.np_dtype.itemsize

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class PairSchema:
    """What one sample is: image A, image B and an integer label.

    Args:
        a: Spec of image A.
        b: Spec of image B.
    """

    a: ArraySpec
    b: ArraySpec

    IMAGE_FIELDS: ClassVar[tuple[str, str]] = ("A", "B")
    LABEL_FIELD: ClassVar[str] = "label"

    @classmethod
    def field_names(cls) -> tuple[str, str, str]:
        """The on-disk field names, in file order."""
        return (*cls.IMAGE_FIELDS, cls.LABEL_FIELD)

    def spec(self, field: str) -> ArraySpec:
        """The :class:`ArraySpec` of image field ``field`` (``"A"`` or ``"B"``)."""
        if field == self.IMAGE_FIELDS[0]:
            return self.a
        if field == self.IMAGE_FIELDS[1]:
            return self.b
        raise ValueError(f"unknown image field {field!r}; expected one of {self.IMAGE_FIELDS}")

    @property
    def sample_bytes(self) -> int:
        """Bytes of image data per sample (A and B together)."""
        return self.a.nbytes + self.b.nbytes

    def ffcv_fields(self) -> dict[str, Field]:
        """The FFCV ``Field`` objects to write, in file order."""
        from ffcv.fields import IntField, NDArrayField

        a_name, b_name = self.IMAGE_FIELDS
        return {
            a_name: NDArrayField(self.a.np_dtype, self.a.shape),
            b_name: NDArrayField(self.b.np_dtype, self.b.shape),
            self.LABEL_FIELD: IntField(),
        }

    @classmethod
    def from_handlers(cls, handlers: dict[str, Any], path: str) -> PairSchema:
        """Check the fields an FFCV ``Reader`` found and build the schema.

        Raises:
            ValueError: naming ``path`` when a field is missing or of the wrong kind.
        """
        from ffcv.fields import IntField, NDArrayField

        names = list(handlers)
        missing = [n for n in cls.field_names() if n not in handlers]
        if missing:
            raise ValueError(
                f"{path}: missing field(s) {missing}; found {names}, "
                f"expected {list(cls.field_names())} (write it with writers/write_beton.py)"
            )
        specs = []
        for name in cls.IMAGE_FIELDS:
            h = handlers[name]
            if not isinstance(h, NDArrayField):
                raise ValueError(
                    f"{path}: field {name!r} is a {type(h).__name__}, expected NDArrayField"
                )
            dtype = np.dtype(h.dtype).name
            try:
                specs.append(ArraySpec(tuple(int(d) for d in h.shape), dtype))
            except ValueError as e:
                raise ValueError(f"{path}: field {name!r}: {e}") from None
        if not isinstance(handlers[cls.LABEL_FIELD], IntField):
            raise ValueError(
                f"{path}: field {cls.LABEL_FIELD!r} is a "
                f"{type(handlers[cls.LABEL_FIELD]).__name__}, expected IntField"
            )
        return cls(a=specs[0], b=specs[1])

    def to_json(self) -> dict[str, Any]:
        return {
            name: {"shape": list(spec.shape), "dtype": spec.dtype}
            for name, spec in zip(self.IMAGE_FIELDS, (self.a, self.b))
        } | {self.LABEL_FIELD: {"dtype": "int64"}}

    def describe(self) -> str:
        a_name, b_name = self.IMAGE_FIELDS
        return f"{a_name}={self.a.describe()} {b_name}={self.b.describe()} {self.LABEL_FIELD}=int64"
