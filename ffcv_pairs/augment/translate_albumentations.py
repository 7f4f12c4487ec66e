"""The Albumentations rows of the translator (:mod:`.translate`): class name -> function of
the transform (its public attributes, as Albumentations 2.0.8 stores them) and the
:class:`~.translate.Context` -> PairAugment options. Albumentations is never imported here.

Albumentations applies one draw to every target of a call (``additional_targets={'image2':
'image'}``), noise and JPEG included, so every option is paired. Its fractions of the largest
value (``Solarize``, ``GaussNoise``) are taken on ``value_max`` (255: uint8 files). OpenCV's
codes: interpolation 1 is linear; border modes 0 constant, 1 replicate (``edge``), 4
reflect-101 (``reflect``).

B is the one ``additional_targets`` entry of type ``image`` (none: the pipeline is applied to B
as to A, with the same draw); :func:`check_targets` refuses any other target but masks.
Albumentations' ``Affine`` turns counter-clockwise for a positive angle, and ours (torchvision's
affine) clockwise: its ``rotate`` range is negated.
"""

from __future__ import annotations

from typing import Any

from .translate import Context, Row, Untranslatable, always, color_jitter, ordered, spread

__all__ = ["ALBUMENTATIONS", "TARGET_TYPES", "check_targets"]

#: The ``additional_targets`` types a pipeline may name: one ``image`` (B) and masks (a label
#: field that follows the geometry as a dense field).
TARGET_TYPES = ("image", "mask", "masks")

_BORDERS = {0: "constant", 1: "edge", 4: "reflect"}


def _linear(t: Any) -> None:
    if int(t.interpolation) != 1:
        raise Untranslatable(f"interpolation={t.interpolation}: ours is linear (cv2.INTER_LINEAR)")


def _border(t: Any) -> dict[str, Any]:
    mode = _BORDERS.get(int(t.border_mode))
    if mode is None:
        raise Untranslatable(
            f"border_mode={t.border_mode}: cv2.BORDER_CONSTANT, BORDER_REPLICATE or "
            f"BORDER_REFLECT_101"
        )
    if mode != "constant":
        return {"pad_mode": mode}
    fill = t.fill
    if isinstance(fill, list | tuple):
        if any(v != fill[0] for v in fill):
            raise Untranslatable(f"fill={fill}: ours takes one value for every channel")
        fill = fill[0]
    return {"fill": float(fill)} if fill else {}


def _fixed(name: str, value: Any) -> float:
    lo, hi = value
    if lo != hi:
        raise Untranslatable(f"{name}={tuple(value)}: ours takes one value, not a range")
    return float(lo)


def _rot90(t: Any, ctx: Context) -> dict[str, Any]:
    always(t, "ours turns by a random quarter every time")
    return {"rot90": True}


def _d4(t: Any, ctx: Context) -> dict[str, Any]:
    always(t, "ours draws one of the 8 every time")
    return {"d4": True}


def _rotate(t: Any, ctx: Context) -> dict[str, Any]:
    _linear(t)
    if t.crop_border:
        raise Untranslatable("crop_border=True: ours keeps the image's size")
    return {"rotate": ordered("limit", t.limit), "rotate_p": float(t.p), **_border(t)}


def _affine(t: Any, ctx: Context) -> dict[str, Any]:
    _linear(t)
    if t.fit_output or any(any(v) for v in (t.translate_px or {}).values()):
        raise Untranslatable("fit_output or translate_px: ours shifts by fractions of the size")
    if t.balanced_scale:
        raise Untranslatable("balanced_scale=True: ours draws the scale uniformly in its range")
    sx, sy = (tuple(t.scale[k]) for k in ("x", "y"))
    if (sx != sy or sx[0] != sx[1]) and not t.keep_ratio:
        raise Untranslatable(
            f"scale={t.scale} with keep_ratio=False draws x and y apart; ours scales both axes "
            f"alike (keep_ratio=True)"
        )
    shear_x, shear_y = (tuple(float(v) for v in t.shear[k]) for k in ("x", "y"))
    lo, hi = ordered("rotate", t.rotate)
    if (any(shear_x) and any(shear_y)) or ((lo or hi) and any(shear_x + shear_y)):
        raise Untranslatable(
            f"rotate={t.rotate}, shear={t.shear}: Albumentations rotates, then shears x and y "
            f"at once; ours (torchvision's) shears x, then y, then rotates: give a shear on one "
            f"axis and no rotation, or a rotation and no shear"
        )
    out: dict[str, Any] = {
        "affine_degrees": (-hi, -lo),  # its angle turns counter-clockwise, ours clockwise
        "affine_scale": tuple(float(v) for v in sx),
        "affine_shear": shear_x + shear_y,
        "affine_p": float(t.p),
    }
    if t.translate_percent is not None:
        shift = t.translate_percent
        out["affine_translate"] = (
            spread("translate_percent x", shift["x"], 0.0),
            spread("translate_percent y", shift["y"], 0.0),
        )
    return {**out, **_border(t)}


def _crop(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    out: dict[str, Any] = {"crop": (int(t.height), int(t.width))}
    if t.pad_if_needed and t.pad_position != "center":
        raise Untranslatable(
            f"pad_if_needed=True, pad_position={t.pad_position!r}: ours pads around the centre "
            f"(pad_position='center')"
        )
    if t.pad_if_needed:
        out.update(pad_if_needed=(int(t.height), int(t.width)), **_border(t))
    return out


def _center(t: Any, ctx: Context) -> dict[str, Any]:
    return {**_crop(t, ctx), "center": True}


def _resized_crop(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    _linear(t)
    return {
        "resized_crop": tuple(int(v) for v in t.size),
        "crop_scale": tuple(t.scale),
        "crop_ratio": tuple(t.ratio),
    }


def _resize(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    _linear(t)
    return {"resize": (int(t.height), int(t.width))}


def _longest(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    _linear(t)
    if t.max_size_hw is not None or not isinstance(t.max_size, int):
        raise Untranslatable(f"max_size={t.max_size}: ours takes one side length")
    return {"resize_longest": int(t.max_size)}


def _pad(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    if t.position != "center" or t.pad_height_divisor or t.pad_width_divisor:
        raise Untranslatable("ours pads to a size, around the centre")
    return {"pad_if_needed": (int(t.min_height), int(t.min_width)), **_border(t)}


def _scale(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    _linear(t)
    lo, hi = t.scale_limit
    return {"scale_jitter": (1.0 + float(lo), 1.0 + float(hi))}


def _jitter(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    return color_jitter(t)


def _gray(t: Any, ctx: Context) -> dict[str, Any]:
    if t.num_output_channels != 3 or t.method != "weighted_average":
        raise Untranslatable(
            f"num_output_channels={t.num_output_channels}, method={t.method!r}: ours keeps 3 "
            f"channels, weighted"
        )
    return {"grayscale": float(t.p)}


def _autocontrast(t: Any, ctx: Context) -> dict[str, Any]:
    if t.method != "pil" or t.cutoff or t.ignore is not None:
        raise Untranslatable(
            f"method={t.method!r}, cutoff={t.cutoff}: ours is the linear stretch "
            f"(method='pil', cutoff=0)"
        )
    return {"autocontrast": float(t.p)}


def _equalize(t: Any, ctx: Context) -> dict[str, Any]:
    if t.mode != "pil" or not t.by_channels or t.mask is not None:
        raise Untranslatable(f"mode={t.mode!r}: ours is PIL's, per channel (mode='pil')")
    return {"equalize": float(t.p)}


def _hsv(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    if any(t.sat_shift_limit) or any(t.val_shift_limit):
        raise Untranslatable(
            "sat_shift_limit and val_shift_limit add to S and V; ours multiplies saturation "
            "(ColorJitter): only a hue shift translates"
        )
    return {"hue": spread("hue_shift_limit", t.hue_shift_limit, 0.0) / 180.0}


def _brightness_contrast(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    if any(t.brightness_limit):
        raise Untranslatable(
            "brightness_limit adds to the values; ours multiplies them: only contrast_limit "
            "(x * (1 + c)) translates, as brightness"
        )
    return {"brightness": spread("contrast_limit", t.contrast_limit, 0.0)}


def _noise(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    if any(t.mean_range) or not t.per_channel or t.noise_scale_factor != 1:
        raise Untranslatable("ours adds zero-mean noise per value (per_channel, scale factor 1)")
    std = _fixed("std_range", t.std_range) * ctx.value_max
    return {"noise_std": std, "noise_paired": True}


def _blur(t: Any, ctx: Context) -> dict[str, Any]:
    kernel = int(_fixed("blur_limit", t.blur_limit)) or None
    sigma = tuple(float(s) for s in t.sigma_limit)
    if not any(sigma):
        if kernel is None:
            raise Untranslatable("sigma_limit=(0, 0) and blur_limit=(0, 0): give one")
        sigma = (0.3 * ((kernel - 1) * 0.5 - 1) + 0.8,) * 2  # OpenCV's sigma of a kernel
    return {"blur": float(t.p), "blur_sigma": sigma, "blur_kernel": kernel, "blur_paired": True}


def _jpeg(t: Any, ctx: Context) -> dict[str, Any]:
    if t.compression_type != "jpeg":
        raise Untranslatable(f"compression_type={t.compression_type!r}: ours is JPEG")
    quality = tuple(int(q) for q in t.quality_range)
    return {"jpeg": float(t.p), "jpeg_quality": quality, "jpeg_paired": True}


def _erasing(t: Any, ctx: Context) -> dict[str, Any]:
    fill = t.fill if isinstance(t.fill, str) else float(t.fill)
    if isinstance(fill, str) and fill != "random":
        raise Untranslatable(f"fill={fill!r}: a number or 'random'")
    return {
        "erasing": float(t.p),
        "erasing_scale": tuple(t.scale),
        "erasing_ratio": tuple(t.ratio),
        "erasing_value": fill,
        "erasing_target": "both",
    }


def _normalize(t: Any, ctx: Context) -> dict[str, Any]:
    always(t)
    if t.normalization != "standard":
        raise Untranslatable(f"normalization={t.normalization!r}: ours is 'standard'")
    top = float(t.max_pixel_value)
    return {
        "normalize_mean": tuple(round(float(m) * top, 10) for m in t.mean),
        "normalize_std": tuple(round(float(s) * top, 10) for s in t.std),
    }


def _to_float(t: Any, ctx: Context) -> dict[str, Any]:
    top = ctx.value_max if t.max_value is None else float(t.max_value)
    return {"normalize_mean": (0.0,), "normalize_std": (top,), "out_dtype": "float32"}


def check_targets(pipeline: Any) -> None:
    """Refuse a ``Compose`` (or one nested in ``pipeline``) whose ``additional_targets`` ours
    cannot follow: two or more of type ``image`` (ours has A and B), or a type other than
    those of :data:`TARGET_TYPES`.

    Raises:
        ValueError: naming the targets.
    """
    if isinstance(pipeline, list | tuple):
        for item in pipeline:
            check_targets(item)
        return
    if type(pipeline).__name__ != "Compose":
        return
    targets = getattr(pipeline, "additional_targets", None) or {}
    images = sorted(k for k, v in targets.items() if v == "image")
    other = {k: v for k, v in targets.items() if v not in TARGET_TYPES}
    if len(images) > 1 or other:
        why = (
            f"{len(images)} of type 'image' ({', '.join(images)}); ours has A and B, so B is "
            f"the one"
            if len(images) > 1
            else f"{', '.join(f'{k!r}: {v!r}' for k, v in other.items())}; ours takes one "
            f"'image' (B), and 'mask' or 'masks' (a label field)"
        )
        raise ValueError(f"albumentations Compose: additional_targets={dict(targets)}: {why}")
    check_targets(list(getattr(pipeline, "transforms", [])))


def _p(option: str) -> Row:
    return lambda t, ctx: {option: float(t.p)}


ALBUMENTATIONS: dict[str, Row] = {
    "HorizontalFlip": _p("hflip"),
    "VerticalFlip": _p("vflip"),
    "RandomRotate90": _rot90,
    "Transpose": _p("transpose"),
    "D4": _d4,
    "Rotate": _rotate,
    "Affine": _affine,
    "RandomCrop": _crop,
    "CenterCrop": _center,
    "RandomResizedCrop": _resized_crop,
    "Resize": _resize,
    "LongestMaxSize": _longest,
    "PadIfNeeded": _pad,
    "RandomScale": _scale,
    "ColorJitter": _jitter,
    "ToGray": _gray,
    "Posterize": lambda t, ctx: {
        "posterize": float(t.p),
        "posterize_bits": int(_fixed("num_bits", t.num_bits)),
    },
    "Solarize": lambda t, ctx: {
        "solarize": float(t.p),
        "solarize_threshold": _fixed("threshold_range", t.threshold_range) * ctx.value_max,
    },
    "InvertImg": _p("invert"),
    "AutoContrast": _autocontrast,
    "Equalize": _equalize,
    "ChannelShuffle": _p("channel_shuffle"),
    "RandomGamma": lambda t, ctx: {
        "gamma": tuple(float(g) / 100 for g in t.gamma_limit),
        "gamma_p": float(t.p),
    },
    "HueSaturationValue": _hsv,
    "RandomBrightnessContrast": _brightness_contrast,
    "GaussNoise": _noise,
    "GaussianBlur": _blur,
    "ImageCompression": _jpeg,
    "Erasing": _erasing,
    "Normalize": _normalize,
    "ToFloat": _to_float,
    "ToTensorV2": lambda t, ctx: {},
}
