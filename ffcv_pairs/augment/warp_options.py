"""The options of the matrix geometry (:mod:`.warp_draws`, :mod:`.warp_ops`), declared once
here and inherited by :class:`~ffcv_pairs.augment.config.PairAugment` (keyword-only), with their
checks: each names the option, the value given and what is allowed.

A pipeline that uses none of them keeps the exact fast paths (the fused kernel, the decoder's
byte moves). One that uses any composes, per sample, one 3x3 output -> source matrix of all its
geometric ops, in this order: ``resize`` or ``resize_longest``, ``scale_jitter`` (and its
aspect), ``pad_if_needed``, ``rotate``, the affine, ``perspective``, then the window (``crop``,
``resized_crop``, ``center``, ``translate``, and ``b_offset`` for B), flips, quarter turns,
``transpose``, ``d4``, and last ``elastic``. Definitions: ``docs/augmentation.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._checks import flag, integer, number, optional, pair, sequence_of, shown

__all__ = ["WARP_OPTIONS", "WarpOptions", "check_warp_axes", "check_warp_options", "warp_canvas"]

#: The options, in the order the ops run (the ``*_p`` options go with theirs).
WARP_OPTIONS = (
    "resize",
    "resize_longest",
    "scale_jitter",
    "scale_jitter_aspect",
    "pad_if_needed",
    "rotate",
    "affine_degrees",
    "affine_translate",
    "affine_scale",
    "affine_shear",
    "perspective",
    "b_offset",
    "transpose",
    "d4",
    "elastic",
)
_MAX_SIDE = 1 << 16


@dataclass(frozen=True, kw_only=True)
class WarpOptions:
    """The matrix geometry of :class:`~ffcv_pairs.augment.config.PairAugment`: shared by A,
    B and the dense masks (one draw per sample), bilinear, out-of-image pixels by ``pad_mode``
    and ``fill``.

    Args:
        transpose: Probability of swapping rows and columns (Albumentations ``Transpose``;
            needs a square output).
        d4: One of the 8 symmetries of the square, uniformly (Albumentations ``D4``; square
            output).
        rotate: Degrees, as torchvision's ``RandomRotation``: ``d`` means ``(-d, d)``; an
            angle drawn uniformly, counter-clockwise, about the image centre.
        rotate_p: Probability of the rotation.
        affine_degrees, affine_translate, affine_scale, affine_shear: torchvision's
            ``RandomAffine``: an angle (``d`` means ``(-d, d)``, clockwise as torchvision's
            affine), a shift of up to ``(fx * width, fy * height)`` pixels (rounded), a scale
            factor in ``(low, high)``, and a shear in degrees (``s``: x in ``(-s, s)``; two
            values: x in that range; four: x and y ranges), about the image centre.
        affine_p: Probability of the affine.
        scale_jitter: ``(low, high)`` of a scale factor ``s`` drawn uniformly: the whole image
            is resized by ``s`` before the window is taken (a ``crop`` picks it in the scaled
            image; without one, the window is the central one of the output size).
        scale_jitter_aspect: ``(low, high)`` of an extra aspect factor ``a`` drawn
            log-uniformly: ``sx = s * sqrt(a)``, ``sy = s / sqrt(a)``.
        perspective: Distortion scale, as torchvision's ``RandomPerspective``.
        perspective_p: Probability of the perspective (torchvision's default 0.5).
        elastic: ``(alpha, sigma)`` as torchvision's ``ElasticTransform``: per output pixel,
            uniform noise in ``[-1, 1]`` smoothed by a gaussian of ``sigma``, times ``alpha``,
            as torchvision scales it (see ``docs/augmentation.md``).
        elastic_p: Probability of the elastic distortion.
        resize: ``(height, width)`` the whole image is resized to first.
        resize_longest: Resize the image so that its longer side is this (Albumentations
            ``LongestMaxSize``).
        pad_if_needed: ``(min height, min width)``: pad a smaller image to it, centred, by
            ``pad_mode`` and ``fill`` (Albumentations ``PadIfNeeded``).
        b_offset: Maximum ``(dy, dx)`` in pixels of B's window against A's, drawn uniformly in
            ``[-max, max]`` per sample (stereo's vertical jitter); dense fields follow A.
    """

    transpose: float = 0.0
    d4: bool = False
    rotate: float | tuple[float, float] | None = None
    rotate_p: float = 1.0
    affine_degrees: float | tuple[float, float] | None = None
    affine_translate: tuple[float, float] | None = None
    affine_scale: tuple[float, float] | None = None
    affine_shear: float | tuple[float, ...] | None = None
    affine_p: float = 1.0
    scale_jitter: tuple[float, float] | None = None
    scale_jitter_aspect: tuple[float, float] | None = None
    perspective: float = 0.0
    perspective_p: float = 0.5
    elastic: tuple[float, float] | None = None
    elastic_p: float = 1.0
    resize: tuple[int, int] | None = None
    resize_longest: int | None = None
    pad_if_needed: tuple[int, int] | None = None
    b_offset: tuple[float, float] = (0.0, 0.0)

    @property
    def has_affine(self) -> bool:
        """Whether the affine op runs."""
        parts = (self.affine_degrees, self.affine_translate, self.affine_scale, self.affine_shear)
        return self.affine_p > 0 and any(p is not None for p in parts)

    @property
    def warp_ops(self) -> tuple[str, ...]:
        """The options of :data:`WARP_OPTIONS` this pipeline uses, in order (the affine's
        parts by their names)."""
        on = {
            "rotate": self.rotate is not None and self.rotate_p > 0,
            "perspective": self.perspective > 0 and self.perspective_p > 0,
            "elastic": self.elastic is not None and self.elastic_p > 0,
            "b_offset": any(self.b_offset),
        }
        affine = ("affine_degrees", "affine_translate", "affine_scale", "affine_shear")

        def used(name: str) -> bool:
            if name in affine:
                return self.has_affine and getattr(self, name) is not None
            return on.get(name, getattr(self, name) not in (None, 0.0, False))

        return tuple(name for name in WARP_OPTIONS if used(name))

    @property
    def warps(self) -> bool:
        """Whether the pipeline uses the matrix geometry."""
        return bool(self.warp_ops)

    @property
    def warp_pad_mode(self) -> str:
        """The padding the images' warp uses: ``pad_mode``, but ``edge`` where the warp only
        resizes (and flips, turns or crops, unpadded): its only reads outside the image are
        within half a pixel of its edge, which a resize takes from the edge pixel (OpenCV's
        and torchvision's ``Resize``, enlarging) rather than blend with ``fill``."""
        ops, resizes = set(self.warp_ops), {"resize", "resize_longest"}
        unpadded = not (self.crop_padding or any(self.translate))  # type: ignore[attr-defined]
        if unpadded and ops & resizes and ops <= resizes | {"transpose", "d4"}:
            return "edge"
        return self.pad_mode  # type: ignore[attr-defined]


def warp_canvas(aug: Any, height: int, width: int) -> tuple[int, int]:
    """The size of an image of ``(height, width)`` after ``resize``/``resize_longest`` (before
    the scale jitter)."""
    if aug.resize is not None:
        return aug.resize
    if aug.resize_longest is not None:
        scale = aug.resize_longest / max(height, width)
        return max(1, round(height * scale)), max(1, round(width * scale))
    return height, width


def _degrees(name: str, value: Any) -> tuple[float, float] | None:
    """torchvision's degrees: ``d >= 0`` means ``(-d, d)``; else ``(low, high)``."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        d = number(name, value, least=0.0)
        return -d, d
    return _ordered(name, pair(name, value, number))


def _ordered(name: str, value: Any) -> Any:
    if value is not None and value[0] > value[1]:
        raise ValueError(f"{name}={shown(value)} must be (low, high) with low <= high")
    return value


def _shear(name: str, value: Any) -> tuple[float, float, float, float] | None:
    """torchvision's shear: ``s`` (x in ``(-s, s)``), 2 values (x), or 4 (x and y)."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        s = number(name, value, least=0.0)
        return -s, s, 0.0, 0.0
    items = sequence_of(name, value, number)
    if len(items) not in (2, 4):
        raise ValueError(f"{name}={shown(value)} must be one number, 2 values or 4 values")
    x0, x1, y0, y1 = (*items, 0.0, 0.0) if len(items) == 2 else items
    _ordered(name, (x0, x1))
    _ordered(name, (y0, y1))
    return x0, x1, y0, y1


def check_warp_options(aug: Any) -> None:
    """Check and store in plain form the options of :class:`WarpOptions` on ``aug`` (degrees
    and shear in their ``(low, high)`` forms)."""

    def put(name: str, check: Any, *args: Any, **bounds: Any) -> None:
        object.__setattr__(aug, name, check(f"augment {name}", getattr(aug, name), *args, **bounds))

    for name in ("transpose", "rotate_p", "affine_p", "perspective", "perspective_p", "elastic_p"):
        put(name, number, 0.0, 1.0)
    put("d4", flag)
    put("rotate", _degrees)
    put("affine_degrees", _degrees)
    put("affine_translate", optional(pair), number, least=0.0, most=1.0)
    put("affine_scale", optional(pair), number, above=0.0, most=1e3)
    put("affine_shear", _shear)
    put("scale_jitter", optional(pair), number, above=0.0, most=1e3)
    put("scale_jitter_aspect", optional(pair), number, above=0.0, most=1e3)
    put("elastic", optional(pair), number, least=0.0, most=1e4)
    put("resize", optional(pair), integer, least=1, most=_MAX_SIDE)
    put("resize_longest", optional(integer), 1, _MAX_SIDE)
    put("pad_if_needed", optional(pair), integer, least=1, most=_MAX_SIDE)
    put("b_offset", pair, number, least=0.0, most=float(_MAX_SIDE))
    for name in ("affine_scale", "scale_jitter", "scale_jitter_aspect"):
        _ordered(f"augment {name}", getattr(aug, name))
    if aug.elastic is not None and aug.elastic[1] > 64:
        raise ValueError(
            f"augment elastic={shown(aug.elastic)}: sigma must be at most 64 (its gaussian spans "
            f"8 * sigma + 1 pixels)"
        )
    if aug.resize is not None and aug.resize_longest is not None:
        raise ValueError(
            f"augment resize={aug.resize} and resize_longest={aug.resize_longest}: choose one"
        )
    size = aug.out_size
    for name in ("transpose", "d4"):
        if getattr(aug, name) and size is not None and size[0] != size[1]:
            raise ValueError(
                f"augment {name}={getattr(aug, name)} needs a square output, got {size}: it "
                f"swaps height and width"
            )


def check_warp_axes(aug: Any, name: str, axes: Any, size: tuple[int, int]) -> None:
    """What depends on the stored image ``name`` (its ``axes``) and the output ``size``:
    a square output for ``transpose`` and ``d4``."""
    for option in ("transpose", "d4"):
        if getattr(aug, option) and size[0] != size[1]:
            raise ValueError(
                f"augment {option}={getattr(aug, option)} needs a square output, got {size} "
                f"for {name} ({axes.height}, {axes.width}): it swaps height and width"
            )
