"""The checks of :class:`~ffcv_pairs.augment.config.PairAugment`'s options, run once when
it is made: each names the option, the value given and what is allowed. (``aug`` is the
``PairAugment`` being made; typed ``Any`` because this module sits below config.py.)"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._checks import flag, integer, number, one_of, optional, pair, sequence_of, shown
from ..kernels.geometry import PAD_CONSTANT, PAD_EDGE, PAD_REFLECT
from .photo_options import KEEP_VALUES
from .swap import label_swap

__all__ = [
    "MAX_SIDE",
    "PAD_MODES",
    "accept_old_names",
    "check_fill",
    "check_geometry",
    "check_photometric_and_output",
    "check_swap",
]

PAD_MODES = {"constant": PAD_CONSTANT, "reflect": PAD_REFLECT, "edge": PAD_EDGE}
#: Largest crop side, padding or shift, in pixels.
MAX_SIDE = 1 << 16


def _ordered(name: str, value: tuple[float, float] | None) -> None:
    if value is not None and value[0] > value[1]:
        raise ValueError(f"augment {name}={value} must be (low, high) with low <= high")


def _putter(aug: Any) -> Callable[..., None]:
    """``put(name, check, *args, **bounds)``: option ``name`` of ``aug`` checked by ``check``
    (from :mod:`ffcv_pairs._checks`) and stored in its plain form."""

    def put(name: str, check: Any, *args: Any, **bounds: Any) -> None:
        value = check(f"augment {name}", getattr(aug, name), *args, **bounds)
        object.__setattr__(aug, name, value)

    return put


def check_geometry(aug: Any) -> None:
    """The geometric options: types, ranges, and which go together."""
    put = _putter(aug)
    put("hflip", number, 0.0, 1.0)
    put("vflip", number, 0.0, 1.0)
    put("rot90", flag)
    put("crop", optional(pair), integer, least=1, most=MAX_SIDE)
    put("crop_padding", integer, 0, MAX_SIDE)
    put("resized_crop", optional(pair), integer, least=1, most=MAX_SIDE)
    put("crop_scale", optional(pair), number, above=0.0, most=1.0)
    put("crop_ratio", pair, number, above=0.0, most=1e6)
    put("center", flag)
    put("translate", pair, integer, least=0, most=MAX_SIDE)
    put("pad_mode", one_of, list(PAD_MODES))
    put("fill", number)
    _ordered("crop_scale", aug.crop_scale)
    _ordered("crop_ratio", aug.crop_ratio)
    if aug.crop is not None and aug.resized_crop is not None:
        raise ValueError(f"augment crop={aug.crop} and resized_crop={aug.resized_crop}: choose one")
    if aug.crop_scale is not None and aug.resized_crop is None:
        raise ValueError(
            "augment crop_scale applies to resized_crop=(height, width), which is not set"
        )
    if aug.resized_crop is not None and aug.crop_padding:
        raise ValueError(
            "augment crop_padding applies to a plain crop, not to resized_crop; unset it"
        )
    _check_center_and_rot90(aug)


def _check_center_and_rot90(aug: Any) -> None:
    which = "resized_crop" if aug.resized_crop is not None else "crop"
    size = aug.out_size
    if aug.center and size is None:
        raise ValueError(
            "augment center applies to crop=(height, width) or resized_crop=(height, "
            "width), neither of which is set"
        )
    if aug.center and aug.crop_scale is not None:
        raise ValueError(
            f"augment center takes the central region, crop_scale={aug.crop_scale} draws "
            f"a random one: choose one"
        )
    if aug.rot90 and size is not None and size[0] != size[1]:
        raise ValueError(
            f"augment rot90 needs a square output, got {which}={size}: a quarter turn "
            f"swaps height and width; use a square size or rot90=False"
        )


def check_photometric_and_output(aug: Any) -> None:
    """The photometric and output options."""
    put = _putter(aug)
    put("brightness", number, 0.0, below=1.0)
    put("contrast", number, 0.0, below=1.0)
    put("noise_std", number, 0.0)
    put("value_range", optional(pair), number)
    if aug.value_range is not None and not aug.value_range[0] < aug.value_range[1]:
        raise ValueError(f"augment value_range={aug.value_range} must be (low, high), low < high")
    for name in ("brightness_paired", "contrast_paired", "noise_paired", "geometry_paired"):
        put(name, flag)
    put("normalize_mean", optional(sequence_of), number)
    put("normalize_std", optional(sequence_of), number, above=0.0)
    if (aug.normalize_mean is None) != (aug.normalize_std is None):
        raise ValueError("augment normalize_mean and normalize_std go together")
    put("out_dtype", optional(one_of), ["uint8", "float16", "bfloat16", "float32"])
    put("channels", one_of, ["auto", "first", "last"])


def check_swap(aug: Any) -> None:
    """``swap``, a probability, and ``swap_label``, which goes with it (a function or its
    import path, imported now so that a wrong one is named at once; kept as given)."""
    put = _putter(aug)
    put("swap", number, 0.0, 1.0)
    label_swap("augment swap_label", aug.swap_label)
    if aug.swap_label is not None and not aug.swap:
        raise ValueError(
            f"augment swap_label={shown(aug.swap_label)} applies to swap, which is 0; set "
            f"swap=p or unset swap_label"
        )


def is_value_of(value: float, dtype: str) -> bool:
    """Whether ``value`` is a value of ``dtype``: any number for a float dtype, a whole
    number in range for an integer one (a fill that would wrap or round is not)."""
    kind = np.dtype(dtype)
    if kind.kind not in "iu":
        return True
    info = np.iinfo(kind)
    return float(value).is_integer() and info.min <= value <= info.max


def check_fill(aug: Any, name: str, stored: str) -> None:
    """``aug.fill`` must be a value of field ``name``'s ``stored`` dtype (padding never wraps
    or rounds) and, on floats, inside the value range where it pads and an op clamps to it.

    Raises:
        ValueError: naming the fill, the field and its dtype or value range.
    """
    dtype, (low, high) = np.dtype(stored), aug.float_range
    pads = (aug.pad_mode == "constant" and aug.has_geometry) or aug.policy_ops
    clamps = aug.has_photometric or aug.policy_ops or set(aug.photo_ops) - set(KEEP_VALUES)
    if dtype.kind == "f" and pads and clamps and not low <= aug.fill <= high:
        raise ValueError(
            f"augment fill={aug.fill:g} lies outside value_range ({low:g}, {high:g}) of "
            f"{name}'s {dtype} values, which the photometric ops clamp to: set fill or "
            f"value_range"
        )
    if not is_value_of(aug.fill, stored):
        info = np.iinfo(dtype)
        raise ValueError(
            f"augment fill={aug.fill} is not a {dtype} value ({name} is {dtype}): use a "
            f"whole number in [{info.min}, {info.max}]"
        )


def accept_old_names(aug: Any, paired_geometry: bool | None) -> None:
    """Options as they were once spelled: accepted, with a warning that says the new way."""
    if paired_geometry is not None:
        warnings.warn(
            "augment paired_geometry is now geometry_paired (every *_paired flag reads "
            "the same way); the old name still works",
            FutureWarning,
            stacklevel=4,
        )
        object.__setattr__(aug, "geometry_paired", paired_geometry)
    if aug.crop is not None and aug.crop_scale is not None and aug.resized_crop is None:
        warnings.warn(
            f"augment crop={shown(tuple(aug.crop))} with crop_scale is a resized crop: "
            f"say resized_crop={shown(tuple(aug.crop))} (crop alone is a plain crop); "
            f"taken as that",
            FutureWarning,
            stacklevel=4,
        )
        object.__setattr__(aug, "resized_crop", aug.crop)
        object.__setattr__(aug, "crop", None)
