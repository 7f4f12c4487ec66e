"""The units of a :class:`~ffcv_pairs.augment.config.PairAugment` on one file.

``normalize_mean``, ``normalize_std`` and ``noise_std`` are in the units of the values the
loader hands back: a uint8 image's 0..255, or a quantized file's floats (the loader
dequantizes by rewriting them to act on the stored codes). Where that range is known, a
``normalize_mean`` outside it is in other units, and refused: 0-255 means applied to floats
of ``[0, 1]`` would send every value to about ``[-2.1, -1.8]`` without a word.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .._checks import shown
from ..format.schema import PairSchema, Quantization
from .axes import image_axes
from .config import PairAugment

__all__ = ["check_mean_within", "check_units", "dequantizing"]


def check_mean_within(augment: PairAugment, low: float, high: float, values: str) -> None:
    """Refuse a ``normalize_mean`` of ``augment`` outside ``[low, high]``, the range of the
    values it normalises (``values`` says whose).

    Raises:
        ValueError: naming the mean, its channel and the range.
    """
    for c, m in enumerate(augment.normalize_mean or ()):
        if not low <= m <= high:
            raise ValueError(
                f"augment normalize_mean[{c}]={m:g} lies outside [{low:g}, {high:g}], the "
                f"range of {values}: normalize_mean and normalize_std are in the units of the "
                f"values the loader hands back"
            )


def check_units(augment: PairAugment, schema: PairSchema) -> None:
    """``augment`` on a file of ``schema`` read as stored: refuse a ``normalize_mean``
    outside 0..255 where an image field is uint8 (see :func:`check_mean_within`), and a
    normalisation in ``[0, 1]`` units there (every mean at most 1, every std below 1: it
    would send 0..255 past 1000 without a word)."""
    mean, std = augment.normalize_mean or (), augment.normalize_std or ()
    for name in schema.IMAGE_FIELDS:
        dtype = np.dtype(schema.spec(name).dtype)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            check_mean_within(augment, info.min, info.max, f"{name}'s {dtype} values")
            if mean and max(mean) <= 1 and max(std) < 1:
                raise ValueError(
                    f"augment normalize_mean={shown(mean)} and normalize_std={shown(std)} are "
                    f"in [0, 1] units, but {name}'s {dtype} values run {info.min}..{info.max}: "
                    f"give them x{info.max} (torchvision's ToDtype(scale=True) makes the 0..1 "
                    f"values these are for)"
                )


def dequantizing(augment: PairAugment, q: Quantization, schema: PairSchema) -> PairAugment:
    """``augment`` on a file quantized with ``q``, handing back floats in its range. The
    normalisation (or none), ``noise_std``, ``solarize_threshold`` and ``erasing_value``, given
    in the floats' units, are rewritten to act on the stored codes: ``mean' = (mean - lo) /
    step``, ``std' = std / step``, ``noise_std' = noise_std / step``, ``threshold' =
    (threshold - lo) / step``, ``value'`` the code nearest ``(value - lo) / step`` (within
    0..255). Without a normalisation, one ``mean'`` and ``std'`` serve every channel of A and
    of B, whatever their channels. ``fill`` is a code; brightness and contrast scale the
    codes.

    Raises:
        ValueError: an integer ``out_dtype``, images that are not 2-d or 3-d, or a
            ``normalize_mean`` outside ``[lo, hi]``.
    """
    if augment.out_dtype == "uint8":
        raise ValueError(
            "out_dtype='uint8' with dequantize: the values of a quantized file come back "
            "as floats; use dequantize=False for the stored uint8 codes"
        )
    for name in schema.IMAGE_FIELDS:
        try:
            image_axes(schema.spec(name), augment.channels, name)
        except ValueError as e:
            raise ValueError(f"dequantize: {e}; use dequantize=False for the codes") from None
    check_mean_within(augment, q.lo, q.hi, "this quantized file's floats")
    mean = augment.normalize_mean or (0.0,)
    std = augment.normalize_std or (1.0,)
    return replace(
        augment,
        normalize_mean=tuple((m - q.lo) / q.step for m in mean),
        normalize_std=tuple(s / q.step for s in std),
        noise_std=augment.noise_std / q.step,
        solarize_threshold=(
            None
            if augment.solarize_threshold is None
            else (augment.solarize_threshold - q.lo) / q.step
        ),
        erasing_value=(
            augment.erasing_value
            if augment.erasing_value == "random"
            else float(min(max(round((augment.erasing_value - q.lo) / q.step), 0), 255))
        ),
    )
