"""The options of the per-sample photometric ops (:mod:`.photo_ops`), declared once here and
inherited by :class:`~ffcv_pairs.augment.config.PairAugment` (keyword-only), with their
checks: each names the option, the value given and what is allowed.

Each op has a ``*_paired`` switch (default True): one draw for A and B, or one per image.
They run after the built-in brightness, contrast and noise (and the geometry), before the
user's ops and normalisation, in this order: ``color_jitter``, ``saturation``, ``hue``,
``gamma``, ``grayscale``, ``autocontrast``, ``equalize``, ``sharpness``, ``posterize``,
``solarize``, ``invert``, ``channel_shuffle``, ``blur``, ``jpeg``, then ``erasing``, the
last op before the user's ops (so it erases the image in its stored units, before
normalisation; dense fields are never erased). Erasing has ``erasing_target`` in place of a
``*_paired`` switch. Definitions: ``docs/augmentation.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .._checks import flag, integer, number, one_of, optional, pair, sequence_of, shown
from ..format.schema import PairSchema

__all__ = [
    "DRAWN_OPS",
    "ERASING_TARGETS",
    "KEEP_VALUES",
    "PHOTO_OPS",
    "PhotoOptions",
    "check_photo_options",
]

#: The ops, in the order they run; each has a ``<name>_paired`` option.
PHOTO_OPS = (
    "color_jitter",
    "saturation",
    "hue",
    "gamma",
    "grayscale",
    "autocontrast",
    "equalize",
    "sharpness",
    "posterize",
    "solarize",
    "invert",
    "channel_shuffle",
    "blur",
    "jpeg",
)
#: Every per-sample drawn op, in the order they run: :data:`PHOTO_OPS`, then erasing.
DRAWN_OPS = (*PHOTO_OPS, "erasing")
#: The drawn ops that clamp none of an image's values (they move them, or write new ones):
#: float values outside ``value_range`` are refused before the others only.
KEEP_VALUES = ("channel_shuffle", "erasing")
#: Where erasing runs: one box for A and B alike, A only, B only, or a box of its own each.
ERASING_TARGETS = ("both", *PairSchema.IMAGE_FIELDS, "each")


@dataclass(frozen=True, kw_only=True)
class PhotoOptions:
    """Per-sample photometric ops of :class:`~ffcv_pairs.augment.config.PairAugment`.

    Args:
        color_jitter: ``(brightness, contrast, saturation, hue)`` as torchvision's
            ``ColorJitter``: factors drawn in ``[max(0, 1 - v), 1 + v]`` (hue: a shift in
            ``[-hue, hue]`` turns, ``hue <= 0.5``), applied in a random order drawn per
            sample; a 0 leaves that part out. Saturation and hue need 3 channels.
        saturation: Blend with the grayscale image, factor in ``[max(0, 1 - s), 1 + s]``.
        hue: Shift the HSV hue by ``[-hue, hue]`` turns (``hue <= 0.5``; 3 channels).
        gamma: ``(low, high)`` of the exponent ``g`` drawn uniformly: ``t ** g`` on ``t`` in
            ``[0, 1]``; None: off.
        gamma_p: Probability of the gamma op (Albumentations' ``RandomGamma`` ``p``).
        grayscale: Probability of replacing the 3 channels by their grayscale.
        autocontrast: Probability of stretching each channel to the full range.
        equalize: Probability of equalising each channel's histogram (256 levels).
        sharpness: Probability of ``adjust_sharpness`` with ``sharpness_factor``.
        sharpness_factor: 0 blurs, 1 keeps, 2 sharpens (torchvision's default 2).
        posterize: Probability of keeping ``posterize_bits`` bits per value.
        posterize_bits: 0 to 8.
        solarize: Probability of inverting the values at or above ``solarize_threshold``.
        solarize_threshold: In the values' units; None: the middle of the range (128 for
            uint8).
        invert: Probability of inverting (uint8: ``255 - x``).
        channel_shuffle: Probability of a uniformly random permutation of the channels.
        blur: Probability of a Gaussian blur (torchvision's ``GaussianBlur``): separable, the
            kernel ``exp(-x**2 / (2 * sigma**2))`` over ``x`` in ``-(k - 1) / 2 .. (k - 1) /
            2``, normalised; borders mirrored without repeating the edge (torch's
            ``reflect``); any channel count.
        blur_sigma: ``(low, high)`` of ``sigma``, drawn uniformly.
        blur_kernel: The odd kernel size ``k``; None: ``int(3.5 * sigma) * 2 + 1`` from the
            drawn sigma (Albumentations' rule, which follows PIL's).
        jpeg: Probability of JPEG compression artefacts: the image encoded and decoded by
            libjpeg-turbo (4:2:0 chroma for 3 channels, the accurate integer DCT both ways:
            PIL's bytes); 1 or 3 channels. Float images are mapped to bytes over
            ``value_range`` (rounded half up), and back.
        jpeg_quality: ``(low, high)`` of the quality, an integer drawn uniformly (inclusive),
            1 to 100.
        erasing: Probability of erasing a box (torchvision's ``RandomErasing``): up to 10
            tries of an area fraction uniform in ``erasing_scale`` and an aspect ratio
            log-uniform in ``erasing_ratio``, ``h = round(sqrt(area * ratio))``, ``w =
            round(sqrt(area / ratio))``; the first that fits inside the image (``h <
            height`` and ``w < width``) is placed uniformly; none fits: nothing is erased.
        erasing_scale: ``(low, high)`` of the area fraction, in ``(0, 1]``.
        erasing_ratio: ``(low, high)`` of the aspect ratio ``h / w``, above 0.
        erasing_value: What the box holds, in the stored units (uint8: a whole number 0 to
            255; floats: inside ``value_range``); ``"random"``: per-pixel noise, standard
            normal after the pipeline's normalisation, as torchvision's erasing of a
            normalised tensor (``mean[c] + std[c] * z``, rounded half up and clamped for
            uint8), or, without a normalisation, uniform over the values (uint8: each of
            0..255 alike; Albumentations' ``fill="random"``).
        erasing_target: ``both`` (one box, and noise, for A and B), ``A`` or ``B`` (that
            image only) or ``each`` (a draw per image).
        color_jitter_paired, saturation_paired, hue_paired, gamma_paired,
            grayscale_paired, autocontrast_paired, equalize_paired, sharpness_paired,
            posterize_paired, solarize_paired, invert_paired, channel_shuffle_paired,
            blur_paired, jpeg_paired:
            The same draw for A and B (default), or one per image.
    """

    color_jitter: tuple[float, float, float, float] | None = None
    saturation: float = 0.0
    hue: float = 0.0
    gamma: tuple[float, float] | None = None
    gamma_p: float = 1.0
    grayscale: float = 0.0
    autocontrast: float = 0.0
    equalize: float = 0.0
    sharpness: float = 0.0
    sharpness_factor: float = 2.0
    posterize: float = 0.0
    posterize_bits: int = 4
    solarize: float = 0.0
    solarize_threshold: float | None = None
    invert: float = 0.0
    channel_shuffle: float = 0.0
    blur: float = 0.0
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int | None = None
    jpeg: float = 0.0
    jpeg_quality: tuple[int, int] = (50, 100)
    erasing: float = 0.0
    erasing_scale: tuple[float, float] = (0.02, 0.33)
    erasing_ratio: tuple[float, float] = (0.3, 3.3)
    erasing_value: float | Literal["random"] = 0.0
    erasing_target: Literal["both", 'A', 'B', "each"] = "both"  # fmt: skip
    color_jitter_paired: bool = True
    saturation_paired: bool = True
    hue_paired: bool = True
    gamma_paired: bool = True
    grayscale_paired: bool = True
    autocontrast_paired: bool = True
    equalize_paired: bool = True
    sharpness_paired: bool = True
    posterize_paired: bool = True
    solarize_paired: bool = True
    invert_paired: bool = True
    channel_shuffle_paired: bool = True
    blur_paired: bool = True
    jpeg_paired: bool = True

    @property
    def photo_ops(self) -> tuple[str, ...]:
        """The ops of :data:`DRAWN_OPS` this pipeline runs, in order."""
        on = {
            "color_jitter": self.color_jitter is not None and any(self.color_jitter),
            "gamma": self.gamma is not None and self.gamma_p > 0,
        }
        return tuple(name for name in DRAWN_OPS if on.get(name, getattr(self, name)))


def check_photo_options(aug: Any) -> None:
    """Check and store in plain form the options of :class:`PhotoOptions` on ``aug``."""

    def put(name: str, check: Any, *args: Any, **bounds: Any) -> None:
        object.__setattr__(aug, name, check(f"augment {name}", getattr(aug, name), *args, **bounds))

    put("color_jitter", optional(sequence_of), number, length=4, least=0.0)
    if aug.color_jitter is not None and aug.color_jitter[3] > 0.5:
        raise ValueError(
            f"augment color_jitter={aug.color_jitter}: its hue (the 4th value) must be <= 0.5"
        )
    put("saturation", number, least=0.0)
    put("hue", number, 0.0, 0.5)
    put("gamma", optional(pair), number, above=0.0)
    if aug.gamma is not None and aug.gamma[0] > aug.gamma[1]:
        raise ValueError(f"augment gamma={aug.gamma} must be (low, high) with low <= high")
    for name in ("gamma_p", "grayscale", "autocontrast", "equalize", "sharpness"):
        put(name, number, 0.0, 1.0)
    for name in ("posterize", "solarize", "invert", "channel_shuffle"):
        put(name, number, 0.0, 1.0)
    put("sharpness_factor", number, least=0.0)
    put("posterize_bits", integer, 0, 8)
    put("solarize_threshold", optional(number))
    for name in ("blur", "jpeg", "erasing"):
        put(name, number, 0.0, 1.0)
    _check_ranges(put, aug)
    put("blur_kernel", optional(integer), 1)
    if aug.blur_kernel is not None and aug.blur_kernel % 2 == 0:
        raise ValueError(f"augment blur_kernel must be odd, got {aug.blur_kernel}")
    if not isinstance(aug.erasing_value, str):
        put("erasing_value", number)
    elif aug.erasing_value != "random":
        raise ValueError(
            f"augment erasing_value must be a number or 'random', got {shown(aug.erasing_value)}"
        )
    put("erasing_target", one_of, ERASING_TARGETS)
    for name in PHOTO_OPS:
        put(f"{name}_paired", flag)


def _check_ranges(put: Any, aug: Any) -> None:
    """The ``(low, high)`` options of blur, JPEG and erasing."""
    put("blur_sigma", pair, number, above=0.0)
    put("jpeg_quality", pair, integer, least=1, most=100)
    put("erasing_scale", pair, number, above=0.0, most=1.0)
    put("erasing_ratio", pair, number, above=0.0)
    for name in ("blur_sigma", "jpeg_quality", "erasing_scale", "erasing_ratio"):
        low, high = getattr(aug, name)
        if low > high:
            raise ValueError(
                f"augment {name}={shown((low, high))} must be (low, high) with low <= high"
            )
