"""Dense labels that follow the geometry: a mask, a disparity or a flow map per pixel.

Declared per field in :class:`~ffcv_pairs.augment.config.PairAugment` (``dense={'label':
'mask'}``, or ``{'label': DenseField('mask', fill=255)}``). Such a field takes its sample's
one placement, the crop, flips, turns, shift and resized crop of A (and of B, when the
geometry is paired), by nearest sampling (:mod:`~ffcv_pairs.kernels.nearest`), and its
values change as the geometry says for its kind:

* ``mask``: class ids or any values; never changed.
* ``disparity`` (one channel, float): scaled by the horizontal resize ``ow / rw`` and
  negated by a horizontal flip (a half turn flips too). A quarter turn would make it
  vertical, so ``rot90`` is refused with it.
* ``flow`` (two channels ``(u, v)``, float): scaled per axis (``ow / rw``, ``oh / rh``),
  negated per flipped axis, and turned with the image (a quarter turn maps ``(u, v)`` to
  ``(v, -u)``).

Pixels from outside the image under ``pad_mode="constant"`` take the field's ``fill`` (an
ignore value, such as 255 for a mask); the other padding modes read the field as they read
the images. A stored pixel equal to ``fill`` counts as invalid too: its value is kept as
it is. Photometric ops never touch these fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

from .._checks import number, one_of, shown
from ..format.fields import FieldSpec
from ..format.schema import PairSchema
from ..kernels import SharedCompile
from ..kernels.geometry import GeometryConfig
from ..kernels.nearest import NearestShape, nearest_geometry
from .axes import ImageAxes
from .checks import is_value_of

__all__ = [
    "DENSE_KINDS",
    "DenseField",
    "DenseGeometry",
    "DenseKind",
    "check_dense",
    "dense_shape",
    "image_shaped",
]

DenseKind = Literal["mask", "disparity", "flow"]
DENSE_KINDS: tuple[str, ...] = ("mask", "disparity", "flow")
_CHANNELS = {"disparity": 1, "flow": 2}


@dataclass(frozen=True)
class DenseField:
    """How a per-pixel field follows the geometry.

    Args:
        kind: ``mask``, ``disparity`` or ``flow`` (see the module docstring).
        fill: The value of pixels from outside the image under constant padding, and the
            stored value that marks a pixel invalid (kept as it is). A value of the
            field's dtype.
    """

    kind: DenseKind = "mask"
    fill: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", one_of("dense kind", self.kind, DENSE_KINDS))
        object.__setattr__(self, "fill", number("dense fill", self.fill))


def check_dense(value: Any) -> dict[str, DenseField]:
    """``PairAugment(dense=...)`` as ``{field: DenseField}``: each value a
    :class:`DenseField`, a kind (``"mask"``) or a mapping of its arguments (YAML)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(
            f"augment dense must map field names to a kind or DenseField, got {shown(value)}"
        )
    out: dict[str, DenseField] = {}
    for name, spec in value.items():
        if not isinstance(name, str):
            raise TypeError(f"augment dense: a field name must be a string, got {shown(name)}")
        if isinstance(spec, str):
            spec = DenseField(kind=spec)  # type: ignore[arg-type]
        elif isinstance(spec, Mapping):
            unknown = sorted(set(spec) - {"kind", "fill"})
            if unknown:
                raise ValueError(f"augment dense[{name!r}]: unknown option(s) {unknown}")
            spec = DenseField(**spec)
        elif not isinstance(spec, DenseField):
            raise TypeError(
                f"augment dense[{name!r}] must be a kind {list(DENSE_KINDS)}, a DenseField or "
                f"a mapping, got {shown(spec)}"
            )
        out[name] = spec
    return out


def image_shaped(schema: PairSchema) -> list[str]:
    """The label and extra fields whose last sizes hold A's ``(height, width)``: the ones a
    geometric op would leave behind unless they are declared dense."""
    a = schema.a.shape
    sizes = {(a[i], a[i + 1]) for i in range(len(a) - 1)}
    found = []
    for name, field in schema.values.items():
        shape = field.shape
        pairs = {(shape[i], shape[i + 1]) for i in range(max(0, len(shape) - 3), len(shape) - 1)}
        if pairs & sizes:
            found.append(name)
    return found


def dense_shape(
    name: str, field: FieldSpec, dense: DenseField, axes: ImageAxes, rot90: bool
) -> NearestShape:
    """Where ``field``'s pixels are, checked against A's ``axes`` and ``dense``'s kind (the
    output size is filled in by :class:`DenseGeometry`)."""
    shape, size = field.shape, (axes.height, axes.width)
    what = f"dense field {name!r} ({field.dtype}{list(shape)})"
    item = np.dtype(field.dtype).itemsize
    if shape == size:
        planes, pixel = 1, 1
    elif len(shape) == 3 and shape[1:] == size:
        planes, pixel = shape[0], 1
    elif len(shape) == 3 and shape[:2] == size:
        planes, pixel = 1, shape[2]
    else:
        raise ValueError(
            f"{what} must be {size}, (C, {size[0]}, {size[1]}) or ({size[0]}, {size[1]}, C): "
            f"A's height and width"
        )
    channels = planes * pixel
    need = _CHANNELS.get(dense.kind)
    if need is not None and (channels != need or np.dtype(field.dtype).kind != "f"):
        raise ValueError(
            f"{what} of kind {dense.kind!r} must be floating-point with {need} channel(s)"
        )
    if dense.kind == "disparity" and rot90:
        raise ValueError(
            f"{what}: a quarter turn (rot90) would make a horizontal disparity vertical; "
            f"use rot90=False, or declare it as a mask"
        )
    _check_fill(what, field.dtype, dense.fill)
    return NearestShape(planes, size[0], size[1], pixel * item, size[0], size[1])


def _check_fill(what: str, dtype: str, fill: float) -> None:
    if not is_value_of(fill, dtype):
        raise ValueError(f"{what}: fill={fill:g} is not a value of {dtype}")


class DenseGeometry(Operation):
    """A dense field moved by its sample's geometry (after its decoder), values adjusted.

    Args:
        dense: The field's :class:`DenseField`.
        spec: Its stored shape and dtype.
        shape: :func:`dense_shape`.
        geo: The images' :class:`~ffcv_pairs.kernels.geometry.GeometryConfig`.
        clock: The loader's ``[seed, epoch]``.
    """

    def __init__(
        self,
        dense: DenseField,
        spec: FieldSpec,
        shape: NearestShape,
        geo: GeometryConfig,
        clock: np.ndarray,
    ):
        super().__init__()
        self.dense, self.geo, self.clock = dense, geo, clock
        self.shape = shape._replace(oh=geo.out_h, ow=geo.out_w)
        self.dtype = spec.np_dtype
        sizes = list(spec.shape)
        at = 1 if len(sizes) == 3 and sizes[1:] == [shape.height, shape.width] else 0
        sizes[at], sizes[at + 1] = geo.out_h, geo.out_w
        self.out_shape = tuple(sizes)
        self.fill = np.full(shape.pixel_bytes // self.dtype.itemsize, dense.fill, self.dtype)

    def declare_state_and_memory(self, previous_state: State):
        state = replace(previous_state, jit_mode=True, shape=self.out_shape)
        return state, AllocationQuery(self.out_shape, self.dtype)

    def generate_code(self) -> Callable:
        shape, geo, clock, call = self.shape, self.geo, self.clock, SharedCompile()
        fill, kind, dense_fill = self.fill.view(np.uint8), self.dense.kind, self.fill[0]
        channels_last = shape.pixel_bytes > self.dtype.itemsize

        def move(fields, dst, indices):
            n = len(indices)
            out = dst[:n]
            src = np.ascontiguousarray(fields[:n]).reshape(n, -1).view(np.uint8)
            places = np.empty((n, 7), np.int64)
            flat = out.reshape(n, -1).view(np.uint8)
            call(nearest_geometry, indices, src, flat, shape, geo, clock, fill, places)
            if kind != "mask":
                adjust_values(out, places, kind, geo, channels_last, dense_fill)
            return out

        move.with_indices = True  # type: ignore[attr-defined]
        return move


def adjust_values(
    out: np.ndarray,
    places: np.ndarray,
    kind: str,
    geo: GeometryConfig,
    channels_last: bool,
    fill: float,
) -> None:
    """What the geometry does to a disparity's or a flow's values, in place (``places``:
    each sample's placement, columns :data:`~ffcv_pairs.kernels.nearest.PLACE_FIELDS`)."""
    n = len(out)
    hflip, vflip, rot, rh, rw = (places[:, j] for j in (0, 1, 2, 5, 6))
    sx = geo.out_w / rw if geo.resize else np.ones(n)
    sy = geo.out_h / rh if geo.resize else np.ones(n)
    half = rot == 2
    fx = np.where((hflip > 0) != half, -sx, sx)
    fy = np.where((vflip > 0) != half, -sy, sy)
    invalid = out == fill
    kept = out[invalid]
    if kind == "disparity":
        out *= fx.reshape((n,) + (1,) * (out.ndim - 1)).astype(out.dtype)
    else:
        u = out[..., 0] if channels_last else out[:, 0]
        v = out[..., 1] if channels_last else out[:, 1]
        grid = (n,) + (1,) * (u.ndim - 1)
        a = u * fx.reshape(grid).astype(out.dtype)
        b = v * fy.reshape(grid).astype(out.dtype)
        turn = rot.reshape(grid) % 2 == 1  # (u, v) -> (v, -u) or (-v, u)
        sign = np.where(rot.reshape(grid) == 1, 1, -1).astype(out.dtype)
        u[...] = np.where(turn, sign * b, a)
        v[...] = np.where(turn, -sign * a, b)
    out[invalid] = kept
