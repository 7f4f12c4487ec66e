"""A torchvision v2 or Albumentations pipeline as :class:`~ffcv_pairs.augment.config.PairAugment`
options: ``PairAugment.from_torchvision(v2.Compose([...]))``,
``PairAugment.from_albumentations(A.Compose([...], additional_targets={'image2': 'image'}))``,
or in YAML ``augment: {albumentations: [{HorizontalFlip: {p: 0.5}}, ...]}``.

Each transform is read by its class name and public attributes (neither library is imported
to translate an object; the YAML form imports the library to build the objects first) through
a table of rows, class name -> function(transform) -> options: :mod:`.translate_torchvision`
and :mod:`.translate_albumentations`. A class without a row is refused with its name and the
supported ones; a transform whose parameters our ops cannot reproduce is refused with the
reason; nothing is dropped silently. Values in the libraries' float units (``ToDtype(...,
scale=True)`` then ``Normalize``; Albumentations' ``max_pixel_value`` and fractions of the
largest value) become the stored values' units through ``value_max`` (255: uint8 files).

PairAugment runs its ops in one fixed order, whatever the order of the list: the geometry as
one placement, then the photometric ops (:data:`PHOTOMETRIC_ORDER`), then normalisation. A
list whose order that changes is refused, naming the two transforms, except where the order
does not matter: flips, quarter turns and transposes move pixels without changing them, and
per-pixel photometric ops commute with the geometry (but contrast, autocontrast, equalize,
sharpness, blur, erasing and a policy read the image around or as a whole, so they must
follow a crop or other geometry, as they do here). Two transforms that set one option (two
crops, two colour jitters) are refused too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from .._checks import number
from ..errors import FfcvPairsError

__all__ = [
    "PHOTOMETRIC_ORDER",
    "Context",
    "Untranslatable",
    "always",
    "color_jitter",
    "ordered",
    "scalar",
    "spread",
    "translate",
    "translated_options",
    "with_probability",
]

#: Options that move pixels without changing them: they commute with every other op.
PERMUTING = ("hflip", "vflip", "rot90", "transpose", "d4")
#: Options of the geometry, composed into the one placement per sample.
GEOMETRY = (
    "crop", "resized_crop", "resize", "resize_longest", "pad_if_needed", "scale_jitter",
    "rotate", "affine_degrees", "affine_translate", "affine_scale", "affine_shear",
    "perspective", "elastic", "b_offset",
)  # fmt: skip
#: The photometric options in the order PairAugment runs them.
PHOTOMETRIC_ORDER = (
    "brightness", "contrast", "noise_std", "color_jitter", "saturation", "hue", "gamma",
    "grayscale", "autocontrast", "equalize", "sharpness", "posterize", "solarize", "invert",
    "channel_shuffle", "blur", "jpeg", "policy", "erasing",
)  # fmt: skip
#: Photometric options that read more than the pixel itself: they do not commute with geometry.
NONLOCAL = ("contrast", "autocontrast", "equalize", "sharpness", "blur", "erasing", "policy")
#: Options several transforms may set, to one value.
SHARED = ("fill", "pad_mode", "out_dtype")
OUTPUT = ("normalize_mean", "normalize_std")


class Untranslatable(FfcvPairsError, ValueError):
    """A transform's parameters that PairAugment's ops cannot reproduce (the reason)."""


@dataclass
class Context:
    """What a row may read beside its transform: ``value_max``, the stored values' largest
    (255 for uint8), and ``scaled``, whether an earlier transform turned the values into
    floats in ``[0, 1]`` (torchvision's ``ToDtype(..., scale=True)``)."""

    value_max: float = 255.0
    scaled: bool = False

    def unit(self) -> float:
        """The factor from the values the transform sees to the stored ones."""
        return self.value_max if self.scaled else 1.0

    def level(self, value: float) -> float:
        """A value the op writes into the image (a fill, an erasing value) in stored units:
        ``value`` times :meth:`unit`, and, from ``[0, 1]`` onto uint8's levels (a unit of
        255), rounded to the nearest level, half up (0.5 -> 128), as a uint8 file holds
        whole values only; the library's float result differs by at most half a level."""
        stored = value * self.unit()
        return float(math.floor(stored + 0.5)) if self.unit() == 255 else stored


Row = Callable[[Any, Context], dict[str, Any]]


def _flat(pipeline: Any, library: str) -> list[Any]:
    """The transforms of ``pipeline`` (a ``Compose``, a list, or one transform) in order,
    nested ``Compose``/``Sequential`` opened."""
    if isinstance(pipeline, list | tuple):
        return [t for item in pipeline for t in _flat(item, library)]
    name = type(pipeline).__name__
    if name in ("Compose", "Sequential") and hasattr(pipeline, "transforms"):
        p = getattr(pipeline, "p", 1.0)
        if p != 1.0:
            raise ValueError(f"{library} {name}(p={p}): ours applies a pipeline always; p=1")
        return _flat(list(pipeline.transforms), library)
    return [pipeline]


def _kind(options: Mapping[str, Any]) -> str:
    if any(k in GEOMETRY for k in options):
        return "geometry"
    jitter = options.get("color_jitter")
    if any(k in NONLOCAL for k in options) or (jitter is not None and jitter[1] > 0):
        return "nonlocal"
    if any(k in PHOTOMETRIC_ORDER for k in options):
        return "pixel"
    if any(k in OUTPUT for k in options):
        return "output"
    return "free"  # flips and the like, conversions: commute with everything


def _rank(options: Mapping[str, Any]) -> int:
    ranks = [PHOTOMETRIC_ORDER.index(k) for k in options if k in PHOTOMETRIC_ORDER]
    return min(ranks) if ranks else -1


def _check_order(steps: list[tuple[str, dict[str, Any]]], library: str) -> None:
    """Refuse two transforms whose order PairAugment's fixed order would change."""
    for i, (first, a) in enumerate(steps):
        for second, b in steps[i + 1 :]:
            ka, kb = _kind(a), _kind(b)
            why = ""
            if ka == "output" and kb in ("pixel", "nonlocal"):
                why = "normalisation runs after every photometric op here"
            elif ka == "nonlocal" and kb == "geometry":
                why = f"{first} reads the whole image, and the geometry runs first here"
            elif {ka, kb} <= {"pixel", "nonlocal"} and _rank(a) > _rank(b):
                why = "the photometric ops run in the order " + ", ".join(PHOTOMETRIC_ORDER)
            if why:
                raise ValueError(
                    f"{library}: {first} before {second} cannot be kept in that order "
                    f"({why}); put {second} first, or build PairAugment yourself"
                )


def translated_options(
    pipeline: Any, table: Mapping[str, Row], library: str, value_max: float = 255.0
) -> dict[str, Any]:
    """The PairAugment options of ``pipeline``, through ``table`` (class name -> row).

    Raises:
        ValueError: an unsupported class (named, with the supported ones), parameters our ops
            cannot reproduce, two transforms setting one option, an order ours changes, or a
            ``value_max`` that is not a positive number (TypeError: not a number).
    """
    ctx = Context(value_max=number(f"augment from_{library}: value_max", value_max, above=0))
    steps: list[tuple[str, dict[str, Any]]] = []
    for t in _flat(pipeline, library):
        name = type(t).__name__
        row = table.get(name)
        if row is None:
            raise ValueError(
                f"{library} {name} is not supported; supported: {', '.join(sorted(table))}"
            )
        try:
            options = row(t, ctx)
        except Untranslatable as e:
            raise ValueError(f"{library} {name}: {e}") from None
        steps.append((name, options))
    _check_order(steps, library)
    if ctx.scaled and not any("normalize_mean" in options for _, options in steps):
        steps.append(
            ("ToDtype(scale=True)", {"normalize_mean": (0.0,), "normalize_std": (value_max,)})
        )
    out: dict[str, Any] = {}
    by: dict[str, str] = {}
    for name, options in steps:
        for key, value in options.items():
            crops = {"crop", "resized_crop"}
            clash = [k for k in by if k == key or (k in crops and key in crops)]
            if clash and (key not in SHARED or out[key] != value):
                raise ValueError(
                    f"{library}: {by[clash[0]]} and {name} both set {clash[0]} (PairAugment "
                    f"has one of each op); keep one"
                )
            out[key], by[key] = value, name
    return out


def translate(
    cls: type,
    pipeline: Any,
    table: Mapping[str, Row],
    library: str,
    overrides: Mapping[str, Any],
    value_max: float = 255.0,
) -> Any:
    """``cls(**options)``: ``pipeline``'s options, then ``overrides`` over them.

    Raises:
        ValueError: see :func:`translated_options`; an option PairAugment does not have yet.
    """
    options = translated_options(pipeline, table, library, value_max)
    known = {f.name for f in fields(cls)}
    missing = sorted(set(options) - known)
    if missing:
        raise ValueError(
            f"{library}: the pipeline needs PairAugment option(s) {missing}, which this "
            f"version does not have"
        )
    return cls(**{**options, **overrides})


# -- what rows share -------------------------------------------------------------------------
#: Options that are a probability: ``RandomApply(p)`` multiplies the one a transform sets.
PROBABILITIES = (
    "hflip", "vflip", "transpose", "grayscale", "sharpness", "posterize", "solarize", "invert",
    "autocontrast", "equalize", "channel_shuffle", "gamma_p", "blur", "jpeg", "erasing",
    "rotate_p", "affine_p", "perspective_p", "elastic_p",
)  # fmt: skip


def always(t: Any, what: str = "ours has no probability for it") -> None:
    """Refuse a transform whose ``p`` is not 1."""
    p = float(getattr(t, "p", 1.0))
    if p != 1.0:
        raise Untranslatable(f"p={p}: {what}; only p=1 translates")


def spread(name: str, value: Any, centre: float, floor: float | None = None) -> float:
    """``v`` of a range given as ``(centre - v, centre + v)`` (``floor``: the low end clamped
    to it, as torchvision's ColorJitter clamps factors at 0); None is 0."""
    if value is None:
        return 0.0
    lo, hi = (float(x) for x in value)
    v = hi - centre
    low = centre - v if floor is None else max(floor, centre - v)
    if v < 0 or abs(lo - low) > 1e-9:
        form = "(-v, v)" if centre == 0 else f"({centre:g} - v, {centre:g} + v)"
        clamp = "" if floor is None else f", the low end clamped at {floor:g}"
        raise Untranslatable(
            f"{name}={tuple(value)}: ours needs a range symmetric around {centre:g}, "
            f"{form}{clamp}; {tuple(value)} is not"
        )
    return round(v, 12)  # (1 + 0.2) - 1 is 0.19999999999999996


def scalar(
    name: str, value: Any, unit: float = 1.0, takes: str = "one value for every channel"
) -> float:
    """One number from a number or a sequence of equal ones (one per channel, or per axis:
    ``takes`` says what ours takes, in the refusal of unequal ones)."""
    if value is None:
        return 0.0
    if isinstance(value, Mapping):
        raise Untranslatable(f"{name}={value!r}: one value for every input type and channel")
    values = list(value) if isinstance(value, list | tuple) else [value]
    if not values or any(v != values[0] for v in values):
        raise Untranslatable(f"{name}={value!r}: ours takes {takes}")
    return float(values[0]) * unit


def ordered(name: str, value: Any) -> tuple[float, float]:
    """A ``(low, high)`` range (of degrees, say) as two floats; reversed ends are refused."""
    lo, hi = (float(v) for v in value)
    if lo > hi:
        raise Untranslatable(f"{name}={tuple(value)}: a range (low, high) with low <= high")
    return lo, hi


def with_probability(options: dict[str, Any], p: float, what: str) -> dict[str, Any]:
    """``options`` of a transform applied with probability ``p`` (``RandomApply``)."""
    found = [k for k in options if k in PROBABILITIES]
    if len(found) != 1:
        raise Untranslatable(f"p={p} around {what}: ours has no probability for it")
    return {**options, found[0]: options[found[0]] * p}


def color_jitter(t: Any) -> dict[str, Any]:
    """A ``ColorJitter``'s four ranges (torchvision's and Albumentations' attributes alike) as
    ``color_jitter``; none on: no option."""
    parts = (
        spread("brightness", t.brightness, 1.0, 0.0),
        spread("contrast", t.contrast, 1.0, 0.0),
        spread("saturation", t.saturation, 1.0, 0.0),
        spread("hue", t.hue, 0.0),
    )
    return {"color_jitter": parts} if any(parts) else {}
