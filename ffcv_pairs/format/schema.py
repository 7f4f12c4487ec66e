"""The one contract between writer and loader: field names, shapes and dtypes.

A `.beton` written by this project holds ``A`` and ``B`` (fixed shape and dtype each),
a ``label`` and any extra fields (:mod:`~ffcv_pairs.format.fields`), in this order.
Nothing else in the project spells these names out; it asks the schema.

An image field may be *quantized*: floats of a declared range stored as uint8
(:class:`Quantization`); or *JPEG*-compressed (:class:`Jpeg`): upstream's
``RGBImageField`` in JPEG mode, which plain FFCV decodes too (as RGB). The file says
so in a note at byte :data:`NOTE_OFFSET` of the field's 1024-byte argument block,
after what upstream's ``NDArrayField`` keeps there (shape and dtype as JSON: under 300
bytes; ``RGBImageField`` keeps nothing). Upstream ignores the note; this project reads
quantized values back in their range (``LoaderConfig.dequantize``) and a JPEG in the
image's own shape, which the note keeps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from .fields import INT_LABEL, FieldSpec, check_field_name
from .quantization import Quantization

if TYPE_CHECKING:
    from ffcv.fields.base import Field

__all__ = [
    "NOTE_OFFSET",
    "SUPPORTED_DTYPES",
    "ArraySpec",
    "FieldSpec",
    "Jpeg",
    "JpegAxes",
    "PairSchema",
    "Quantization",
    "channel_axis",
    "jpeg_axes",
]

#: Image dtypes that are stored and loaded bit-exactly.
SUPPORTED_DTYPES: tuple[str, ...] = ("uint8", "float16", "float32")
#: Where a field's note starts in its argument block (see the module docstring).
NOTE_OFFSET = 768
_NOTE_MAGIC = b"ffcv-pairs-note/1 "
_NOTE_ROOM = 1024 - NOTE_OFFSET

JpegAxes = Literal["chw", "hwc", "hw"]


def channel_axis(shape: tuple[int, ...]) -> Literal["first", "last", "none"] | None:
    """Where an image's channels are, read from its shape alone: ``none`` for 2-d; for 3-d
    the first or last axis, whichever is strictly smaller than the other two; None when
    neither is (or for another number of axes)."""
    if len(shape) == 2:
        return "none"
    if len(shape) != 3:
        return None
    if shape[0] < min(shape[1:]):
        return "first"
    if shape[2] < min(shape[:2]):
        return "last"
    return None


def jpeg_axes(shape: tuple[int, ...]) -> JpegAxes:
    """How an image of ``shape`` maps to a JPEG: its :func:`channel_axis` (as the
    augmentation reads it), with 1 or 3 channels; else a ValueError giving the shape."""
    axis = channel_axis(shape)
    if axis == "none":
        return "hw"
    if axis == "first" and shape[0] in (1, 3):
        return "chw"
    if axis == "last" and shape[2] in (1, 3):
        return "hwc"
    raise ValueError(
        f"JPEG stores images of shape (C, H, W), (H, W, C) or (H, W) with C = 1 or 3, "
        f"got {list(shape)}"
    )


@dataclass(frozen=True)
class Jpeg:
    """Each image stored as a JPEG of ``quality`` (1-100; lossy, see the writer's docs)."""

    quality: int

    def __post_init__(self) -> None:
        q = self.quality
        if isinstance(q, bool) or not isinstance(q, int | np.integer) or not 1 <= q <= 100:
            raise ValueError(f"JPEG quality must be an integer from 1 to 100, got {q!r}")
        object.__setattr__(self, "quality", int(q))

    def to_json(self) -> dict[str, Any]:
        return {"codec": "jpeg", "quality": self.quality}

    def describe(self) -> str:
        return f"JPEG quality {self.quality}"


@dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one image field.

    Args:
        shape: The fixed array shape of every sample, e.g. ``(3, 64, 64)``.
        dtype: One of :data:`SUPPORTED_DTYPES` (the stored dtype).
        quantized: For uint8 that stands for floats, their :class:`Quantization`.
        jpeg: For a uint8 image stored compressed, its :class:`Jpeg` (``shape`` is then
            the decoded shape; see :func:`jpeg_axes`).
    """

    shape: tuple[int, ...]
    dtype: str
    quantized: Quantization | None = None
    jpeg: Jpeg | None = None

    def __post_init__(self) -> None:
        if not self.shape or any(int(d) <= 0 for d in self.shape):
            raise ValueError(f"shape must be non-empty with positive sizes, got {self.shape}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(
                f"dtype {self.dtype!r} is not supported; use one of {SUPPORTED_DTYPES}"
            )
        if self.quantized is not None and self.dtype != "uint8":
            raise ValueError(f"a quantized field is stored as uint8, got {self.dtype!r}")
        if self.jpeg is not None:
            if self.dtype != "uint8":
                raise ValueError(
                    f"JPEG stores uint8 images, got {self.dtype}{list(self.shape)} (quantize "
                    f"floats to uint8 first: --quantize uint8 --range LO,HI)"
                )
            jpeg_axes(self.shape)

    @property
    def jpeg_axes(self) -> JpegAxes:
        """Where a JPEG field's channels are (see :func:`jpeg_axes`)."""
        return jpeg_axes(self.shape)

    @property
    def height_width(self) -> tuple[int, int]:
        """A JPEG field's rows and columns."""
        shape = self.shape
        return (shape[1], shape[2]) if self.jpeg_axes == "chw" else (shape[0], shape[1])

    @property
    def channels(self) -> int:
        """A JPEG field's channels (1 or 3)."""
        return {"chw": self.shape[0], "hwc": self.shape[-1], "hw": 1}[self.jpeg_axes]

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.np_dtype.itemsize

    def describe(self, quantization: bool = True) -> str:
        text = f"{self.dtype}{list(self.shape)}"
        if self.jpeg is not None:
            text = f"{text} as {self.jpeg.describe()}"
        if self.quantized is None or not quantization:
            return text
        return f"{text} {self.quantized.describe(lossy=self.jpeg is not None)}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.quantized is not None:
            out["quantize"] = self.quantized.to_json(lossy=self.jpeg is not None)
        if self.jpeg is not None:
            out["compress"] = self.jpeg.to_json()
        return out

    def note(self) -> bytes:
        """What the `.beton`'s argument block notes of this field (empty: nothing)."""
        parts: dict[str, Any] = {}
        if self.quantized is not None:
            parts["quantize"] = {"range": [self.quantized.lo, self.quantized.hi]}
        if self.jpeg is not None:
            parts["jpeg"] = {"quality": self.jpeg.quality, "shape": list(self.shape)}
        if not parts:
            return b""
        text = _NOTE_MAGIC + json.dumps(parts).encode()
        assert len(text) < _NOTE_ROOM, text
        return text

    @staticmethod
    def parse_note(arguments: bytes) -> dict[str, Any]:
        """What a field's argument block notes: ``{"quantize": Quantization, "jpeg": (Jpeg,
        shape)}``, each only when noted.

        Raises:
            ValueError: a note this version cannot read (quoted).
        """
        room = bytes(arguments[NOTE_OFFSET:]).rstrip(b"\0")
        if not room:
            return {}
        if not room.startswith(_NOTE_MAGIC):
            raise ValueError(f"unknown note in the field's arguments: {room[:40]!r}")
        try:
            raw = json.loads(room[len(_NOTE_MAGIC) :])
            parsed: dict[str, Any] = {}
            if "quantize" in raw:
                parsed["quantize"] = Quantization(*raw["quantize"]["range"])
            if "jpeg" in raw:
                shape = tuple(int(d) for d in raw["jpeg"]["shape"])
                parsed["jpeg"] = (Jpeg(raw["jpeg"]["quality"]), shape)
            return parsed
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"unreadable note ({e}): {room[:80]!r}") from None


@dataclass(frozen=True)
class PairSchema:
    """What one sample is: image A, image B, a label and any extra fields.

    Args:
        a: Spec of image A.
        b: Spec of image B.
        label: Spec of the label (default: an int64 scalar, as files before extras).
        extras: ``(name, spec)`` of each extra field, in file order after the label.
    """

    a: ArraySpec
    b: ArraySpec
    label: FieldSpec = INT_LABEL
    extras: tuple[tuple[str, FieldSpec], ...] = ()

    IMAGE_FIELDS: ClassVar[tuple[str, str]] = ("A", "B")
    LABEL_FIELD: ClassVar[str] = "label"

    def __post_init__(self) -> None:
        taken: tuple[str, ...] = self.field_names()
        for name, spec in self.extras:
            if not isinstance(spec, FieldSpec):
                raise TypeError(f"extra field {name!r}: expected a FieldSpec, got {spec!r}")
            taken = (*taken, check_field_name(name, taken))

    @classmethod
    def field_names(cls) -> tuple[str, str, str]:
        """The names every file has (A, B and the label), in file order."""
        return (*cls.IMAGE_FIELDS, cls.LABEL_FIELD)

    @property
    def names(self) -> tuple[str, ...]:
        """Every field's name, in file order (extras after the label)."""
        return (*self.field_names(), *(name for name, _ in self.extras))

    @property
    def values(self) -> dict[str, FieldSpec]:
        """The label and each extra field, by name, in file order."""
        return {self.LABEL_FIELD: self.label, **dict(self.extras)}

    @property
    def plain(self) -> bool:
        """An int64 label and no extras: a sample as before extra fields existed."""
        return self.label == INT_LABEL and not self.extras

    @property
    def arrays(self) -> dict[str, FieldSpec]:
        """The label and extras stored in the data region (arrays), by name."""
        return {name: spec for name, spec in self.values.items() if not spec.is_scalar}

    def spec(self, field: str) -> ArraySpec:
        """The :class:`ArraySpec` of image field ``field`` (``"A"`` or ``"B"``)."""
        if field == self.IMAGE_FIELDS[0]:
            return self.a
        if field == self.IMAGE_FIELDS[1]:
            return self.b
        raise ValueError(f"unknown image field {field!r}; expected one of {self.IMAGE_FIELDS}")

    @property
    def sample_bytes(self) -> int:
        """Bytes of image data per sample (A and B together), decoded."""
        return self.a.nbytes + self.b.nbytes

    @property
    def slot_bytes(self) -> int:
        """Bytes a sample takes in the data region: A, B, then each array field."""
        return self.sample_bytes + sum(spec.nbytes for spec in self.arrays.values())

    def slot_offsets(self) -> dict[str, int]:
        """Where each field stored in the data region starts in a sample's slot."""
        sizes = [self.a.nbytes, self.b.nbytes, *(s.nbytes for s in self.arrays.values())]
        starts = np.cumsum([0, *sizes[:-1]]).tolist()
        return dict(zip((*self.IMAGE_FIELDS, *self.arrays), starts, strict=True))

    @property
    def compressed(self) -> bool:
        """Whether A or B is stored as JPEG (so samples vary in size)."""
        return self.a.jpeg is not None or self.b.jpeg is not None

    def ffcv_fields(self) -> dict[str, Field]:
        """The FFCV ``Field`` objects to write, in file order."""
        from ffcv.fields import NDArrayField, RGBImageField

        def field(spec: ArraySpec) -> Field:
            if spec.jpeg is not None:
                return RGBImageField(write_mode="jpg", jpeg_quality=spec.jpeg.quality)
            return NDArrayField(spec.np_dtype, spec.shape)

        images = {name: field(self.spec(name)) for name in self.IMAGE_FIELDS}
        return images | {name: spec.ffcv_field() for name, spec in self.values.items()}

    def notes(self) -> dict[str, bytes]:
        """Each image field's note for its argument block (see :meth:`ArraySpec.note`)."""
        return {name: self.spec(name).note() for name in self.IMAGE_FIELDS}

    @property
    def quantized(self) -> Quantization | None:
        """The :class:`Quantization` of A and B (both or neither are quantized)."""
        return self.a.quantized

    @classmethod
    def from_handlers(
        cls, handlers: dict[str, Any], path: str, arguments: Mapping[str, bytes] | None = None
    ) -> PairSchema:
        """Check the fields an FFCV ``Reader`` found and build the schema.

        Args:
            handlers: The ``Reader``'s fields, by name.
            path: The file, for messages.
            arguments: Each field's raw argument block, for its note (None: no notes).

        Raises:
            ValueError: naming ``path`` when a field is missing or of the wrong kind.
        """
        from ffcv.fields import NDArrayField, RGBImageField

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
            if not isinstance(h, NDArrayField | RGBImageField):
                raise ValueError(
                    f"{path}: field {name!r} is a {type(h).__name__}, expected NDArrayField "
                    f"or RGBImageField"
                )
            try:
                note = arguments.get(name, b"") if arguments is not None else b""
                noted = ArraySpec.parse_note(note)
                quantized = noted.get("quantize")
                if isinstance(h, NDArrayField) and "jpeg" not in noted:
                    shape = tuple(int(d) for d in h.shape)
                    specs.append(ArraySpec(shape, np.dtype(h.dtype).name, quantized))
                elif isinstance(h, RGBImageField) and "jpeg" in noted:
                    jpeg, shape = noted["jpeg"]
                    specs.append(ArraySpec(shape, "uint8", quantized, jpeg))
                else:
                    kind = type(h).__name__
                    raise ValueError(
                        f"a {kind} {'with' if 'jpeg' in noted else 'without'} this project's "
                        f"JPEG note: not written by writers/write_beton.py"
                    )
            except ValueError as e:
                raise ValueError(f"{path}: field {name!r}: {e}") from None
        values = {}
        for name in names[names.index(cls.LABEL_FIELD) :]:
            try:
                values[name] = FieldSpec.from_handler(handlers[name])
            except ValueError as e:
                raise ValueError(f"{path}: field {name!r} {e}") from None
        if specs[0].quantized != specs[1].quantized:  # the loader maps both with one range
            a_name, b_name = cls.IMAGE_FIELDS
            raise ValueError(
                f"{path}: fields {a_name!r} and {b_name!r} note different quantizations "
                f"({specs[0].quantized} and {specs[1].quantized}); this writer never makes that"
            )
        label = values.pop(cls.LABEL_FIELD)
        try:
            return cls(a=specs[0], b=specs[1], label=label, extras=tuple(values.items()))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None

    def to_json(self) -> dict[str, Any]:
        images = {name: self.spec(name).to_json() for name in self.IMAGE_FIELDS}
        return images | {name: spec.to_json() for name, spec in self.values.items()}

    def describe(self) -> str:
        a_name, b_name = self.IMAGE_FIELDS
        q, lossy = self.a.quantized, self.a.jpeg is not None
        same = q is not None and q == self.b.quantized and lossy == (self.b.jpeg is not None)
        a, b = self.a.describe(not same), self.b.describe(not same)
        text = " ".join(
            [f"{a_name}={a} {b_name}={b}"]
            + [f"{name}={spec.describe()}" for name, spec in self.values.items()]
        )
        return f"{text}, {q.describe(lossy)}" if same and q is not None else text
