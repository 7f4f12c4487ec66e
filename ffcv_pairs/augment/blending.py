"""What MixUp and CutMix share: each row's partner, blending rows, the images' spatial
axes, and how labels of each kind are mixed.

**Partner.** Row ``i`` of a batch is mixed with row ``i - 1`` (row 0 with the last row):
the batch rolled by one along its first axis, as torchvision v2's MixUp and CutMix do. A
batch of one is its own partner (nothing changes).

**Labels.** Class ids (an integer label of shape ``(n,)``) become soft targets, float32
``(n, num_classes)``: ``lam * onehot(y_i) + (1 - lam) * onehot(y_partner)``. A float label,
or any vector label (an integer one as float32), is blended linearly with the same
weights. A dense label, one whose per-sample shape starts or ends with the images'
``(H, W)``, is a per-pixel map: CutMix pastes the box into it, MixUp refuses it.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from ..format.schema import PairSchema, channel_axis

__all__ = [
    "Channels",
    "blend_rows",
    "class_targets",
    "dense_axes",
    "field_name",
    "mixed_label",
    "partner",
    "spatial_size",
]

Channels = Literal["auto", "first", "last"]


def partner(x: torch.Tensor) -> torch.Tensor:
    """Row ``i`` of the result is row ``i - 1`` of ``x`` (row 0's is the last row)."""
    return x.roll(1, 0)


def _rows(lam: torch.Tensor, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return lam.to(dtype).view(-1, *([1] * (x.ndim - 1)))


def blend_rows(x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``lam_i * x_i + (1 - lam_i) * x_partner`` for every row, in ``x``'s dtype: floats
    in their own precision; integers computed in float32 (float64 for integers wider than
    16 bits), rounded to nearest (ties to even) and clamped to the dtype. A row with
    ``lam = 1`` comes back unchanged."""
    if x.is_floating_point():
        # lerp computes end - (end - start) * (1 - w) for w >= 0.5: exactly x at w = 1.
        return torch.lerp(partner(x), x, _rows(lam, x, x.dtype))
    if x.dtype == torch.bool:
        raise TypeError("cannot blend a bool tensor")
    work = torch.float32 if x.element_size() <= 2 else torch.float64
    w = _rows(lam, x, work)
    mixed = x.to(work) * w + partner(x).to(work) * (1 - w)
    info = torch.iinfo(x.dtype)
    return mixed.round().clamp(info.min, info.max).to(x.dtype)


def field_name(batch: Any, index: int) -> str:
    """The name of field ``index`` of a named-tuple batch (``label``), or ``field {index}``."""
    names = getattr(batch, "_fields", None)
    return names[index] if names is not None else f"field {index}"


def spatial_size(
    image: torch.Tensor, channels: Channels, op: str, name: str = PairSchema.IMAGE_FIELDS[0]
) -> tuple[int, int, Literal["first", "last", "none"]]:
    """``(H, W, where the channels are)`` of an image batch ``(n, C, H, W)``, ``(n, H, W,
    C)`` or ``(n, H, W)``: ``channels`` as given, or for ``auto`` read from the shape
    (:func:`~ffcv_pairs.format.schema.channel_axis`).

    Raises:
        ValueError: not an image batch, or ``auto`` cannot tell the channel axis.
    """
    shape = tuple(image.shape[1:])
    if len(shape) == 2:
        return shape[0], shape[1], "none"
    if len(shape) != 3:
        raise ValueError(f"{op} needs image batches (n, [C,] H, W); {name} is {tuple(image.shape)}")
    found = channel_axis(shape) if channels == "auto" else channels
    if found == "first":
        return shape[1], shape[2], "first"
    if found == "last":
        return shape[0], shape[1], "last"
    raise ValueError(
        f"{op} cannot tell the channel axis of {name}'s shape {shape}; give channels='first' "
        f"or channels='last'"
    )


def dense_axes(label: torch.Tensor, hw: tuple[int, int]) -> Literal["last", "first"] | None:
    """Where a dense label's ``(H, W)`` are in its per-sample shape: ``last`` (``(H, W)``,
    ``(C, H, W)``), ``first`` (``(H, W, C)``), or None for a label that is not dense."""
    shape = tuple(label.shape[1:])
    if len(shape) < 2:
        return None
    if shape[-2:] == hw:
        return "last"
    if shape[:2] == hw:
        return "first"
    return None


def class_targets(label: torch.Tensor, num_classes: int, op: str, name: str) -> torch.Tensor:
    """Class ids ``(n,)`` as one-hot float32 ``(n, num_classes)``.

    Raises:
        ValueError: an id outside ``[0, num_classes)`` (checked on the CPU; on a GPU the
            scatter's own bounds check stops the kernel instead, to keep the host unblocked).
    """
    if label.device.type == "cpu" and len(label):
        low, high = int(label.min()), int(label.max())
        if low < 0 or high >= num_classes:
            bad = low if low < 0 else high
            raise ValueError(
                f"{op}: {name} holds class {bad}, outside 0..{num_classes - 1} "
                f"(num_classes={num_classes})"
            )
    out = torch.zeros((len(label), num_classes), dtype=torch.float32, device=label.device)
    return out.scatter_(1, label.long().view(-1, 1), 1.0)


def mixed_label(
    label: torch.Tensor, lam: torch.Tensor, num_classes: int | None, op: str, name: str
) -> torch.Tensor:
    """A label that is not dense, mixed with the weights ``lam`` (see the module docstring).

    Raises:
        ValueError: class ids without ``num_classes``, or an id out of range.
    """
    if label.is_floating_point():
        return blend_rows(label, lam)
    if label.ndim == 1 and label.dtype != torch.bool:
        if num_classes is None:
            raise ValueError(
                f"{op}: {name} holds class ids ({label.dtype}); give num_classes to get soft "
                f"targets"
            )
        return blend_rows(class_targets(label, num_classes, op, name), lam)
    return blend_rows(label.float(), lam)
