"""Where an image's channels are: :class:`ImageAxes` of a stored field, checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..format.schema import ArraySpec, channel_axis

__all__ = ["ImageAxes", "image_axes"]


@dataclass(frozen=True)
class ImageAxes:
    """Where the channels are: ``first`` (C, H, W), ``last`` (H, W, C) or ``none`` (H, W)."""

    channels: Literal["first", "last", "none"]
    height: int
    width: int
    num_channels: int

    @property
    def planes(self) -> int:
        return self.num_channels if self.channels == "first" else 1

    @property
    def pixel(self) -> int:
        """Elements per pixel within a plane."""
        return self.num_channels if self.channels == "last" else 1

    def shape(self, height: int, width: int) -> tuple[int, ...]:
        c = self.num_channels
        if self.channels == "first":
            return (c, height, width)
        if self.channels == "last":
            return (height, width, c)
        return (height, width)

    def channel_axis(self) -> int | None:
        """Axis of channels in a batch ``(B, ...)``."""
        return {"first": 1, "last": 3, "none": None}[self.channels]


def image_axes(spec: ArraySpec, channels: str = "auto", name: str = "image") -> ImageAxes:
    """Infer (or check) where the channel axis of ``spec`` is.

    ``auto``: :func:`~ffcv_pairs.format.schema.channel_axis` (2-d is ``none``; 3-d takes the
    axis, first or last, that is strictly smaller than the other two as channels).
    """
    shape = spec.shape
    if len(shape) == 2:
        if channels not in ("auto", "none"):
            raise ValueError(f"{name}: shape {shape} has no channel axis (channels={channels!r})")
        return ImageAxes("none", shape[0], shape[1], 1)
    if len(shape) != 3:
        raise ValueError(f"{name}: augmentation needs 2-d or 3-d images, got shape {shape}")
    if channels == "auto":
        found = channel_axis(shape)
        if found is None:
            raise ValueError(
                f"{name}: cannot tell the channel axis of shape {shape}; set "
                f"augment channels: first (C,H,W) or last (H,W,C)"
            )
        channels = found
    if channels == "first":
        return ImageAxes("first", shape[1], shape[2], shape[0])
    if channels == "last":
        return ImageAxes("last", shape[0], shape[1], shape[2])
    raise ValueError(f"channels must be auto, first or last, got {channels!r}")
