"""The torchvision v2 rows of the translator (:mod:`.translate`): class name -> function of
the transform (its public attributes, as torchvision 0.29 stores them) and the
:class:`~.translate.Context` -> PairAugment options. torchvision is never imported here.

torchvision applies one draw to every image of a call (``t(a, b)``), so the options are
paired (the ``*_paired`` defaults), except ``GaussianNoise``, drawn per image.
``interpolation`` may be an ``InterpolationMode``, its name, or the PIL constant torchvision
takes for it (2: bilinear).
"""

from __future__ import annotations

from typing import Any

from .translate import (
    Context,
    Row,
    Untranslatable,
    color_jitter,
    ordered,
    scalar,
    with_probability,
)

__all__ = ["TORCHVISION"]


#: The PIL constants torchvision takes for an interpolation (``_interpolation_modes_from_int``).
_PIL_MODES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _mode(t: Any, *allowed: str) -> None:
    given = t.interpolation
    if isinstance(given, int) and not isinstance(given, bool):
        if given not in _PIL_MODES:
            raise Untranslatable(
                f"interpolation={given}: not a PIL constant torchvision takes "
                f"({', '.join(f'{k}: {v}' for k, v in _PIL_MODES.items())})"
            )
        mode, shown = _PIL_MODES[given], f"{given} (PIL's {_PIL_MODES[given]})"
    else:
        mode = str(getattr(given, "value", given)).lower()
        shown = repr(mode)
    if mode not in allowed:
        raise Untranslatable(
            f"interpolation={shown}: ours is {allowed[0]} here; set "
            f"interpolation=InterpolationMode.{allowed[0].upper()}"
        )


def _fill(t: Any, ctx: Context) -> dict[str, Any]:
    fill = ctx.level(scalar("fill", getattr(t, "fill", None)))
    return {"fill": fill} if fill else {}


def _size(value: Any) -> tuple[int, int]:
    values = [int(v) for v in (value if isinstance(value, list | tuple) else [value])]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def _crop(t: Any, ctx: Context) -> dict[str, Any]:
    pad = t.padding
    pads = [0] if pad is None else list(pad) if isinstance(pad, list | tuple) else [pad]
    if any(p != pads[0] for p in pads):
        raise Untranslatable(f"padding={pad}: ours pads every side alike")
    out: dict[str, Any] = {"crop": _size(t.size)}
    if pads[0]:
        out["crop_padding"] = int(pads[0])
    if t.pad_if_needed:
        out["pad_if_needed"] = _size(t.size)
    if pads[0] or t.pad_if_needed:
        if t.padding_mode not in ("constant", "reflect", "edge"):
            raise Untranslatable(f"padding_mode={t.padding_mode!r}: constant, reflect or edge")
        if t.padding_mode != "constant":
            out["pad_mode"] = t.padding_mode
        else:
            out.update(_fill(t, ctx))
    return out


def _resized_crop(t: Any, ctx: Context) -> dict[str, Any]:
    _mode(t, "bilinear")
    return {
        "resized_crop": _size(t.size),
        "crop_scale": tuple(t.scale),
        "crop_ratio": tuple(t.ratio),
    }


def _resize(t: Any, ctx: Context) -> dict[str, Any]:
    _mode(t, "bilinear")
    if not isinstance(t.size, list | tuple) or len(t.size) != 2 or t.max_size is not None:
        raise Untranslatable(f"size={t.size}: ours resizes to (height, width) only")
    return {"resize": _size(t.size)}


def _jitter(t: Any, ctx: Context) -> dict[str, Any]:
    return color_jitter(t)


def _grayscale(t: Any, ctx: Context) -> dict[str, Any]:
    if t.num_output_channels != 3:
        raise Untranslatable(f"num_output_channels={t.num_output_channels}: ours keeps 3")
    return {"grayscale": 1.0}


def _policy(name: str) -> Row:
    def row(t: Any, ctx: Context) -> dict[str, Any]:
        _mode(t, "nearest")
        out = {"policy": name, "policy_bins": int(t.num_magnitude_bins), **_fill(t, ctx)}
        if name == "rand_augment":
            out.update(policy_num_ops=int(t.num_ops), policy_magnitude=int(t.magnitude))
        return out

    return row


def _normalize(t: Any, ctx: Context) -> dict[str, Any]:
    unit = ctx.unit()
    return {
        "normalize_mean": tuple(round(float(m) * unit, 10) for m in t.mean),
        "normalize_std": tuple(round(float(s) * unit, 10) for s in t.std),
    }


def _dtype(t: Any, ctx: Context, scale: bool | None = None) -> dict[str, Any]:
    if isinstance(t.dtype, dict):
        raise Untranslatable(f"dtype={t.dtype}: one dtype for the images")
    name = str(t.dtype).rsplit(".", 1)[-1]
    if name not in ("uint8", "float16", "bfloat16", "float32"):
        raise Untranslatable(f"dtype={t.dtype}: uint8, float16, bfloat16 or float32")
    if name != "uint8" and (t.scale if scale is None else scale):
        ctx.scaled = True
    return {} if name == "uint8" else {"out_dtype": name}


def _rotation(t: Any, ctx: Context) -> dict[str, Any]:
    _mode(t, "bilinear")
    if t.expand or t.center is not None:
        raise Untranslatable("expand=True or a center: ours rotates about the centre, same size")
    return {"rotate": ordered("degrees", t.degrees), "rotate_p": 1.0, **_fill(t, ctx)}


def _affine(t: Any, ctx: Context) -> dict[str, Any]:
    _mode(t, "bilinear")
    if t.center is not None:
        raise Untranslatable("a center: ours turns about the image's centre")
    out: dict[str, Any] = {"affine_degrees": ordered("degrees", t.degrees), "affine_p": 1.0}
    for name in ("translate", "scale", "shear"):
        value = getattr(t, name)
        if value is not None:
            out[f"affine_{name}"] = tuple(float(v) for v in value)
    return {**out, **_fill(t, ctx)}


def _perspective(t: Any, ctx: Context) -> dict[str, Any]:
    _mode(t, "bilinear")
    return {"perspective": float(t.distortion_scale), "perspective_p": float(t.p), **_fill(t, ctx)}


def _elastic(t: Any, ctx: Context) -> dict[str, Any]:
    _mode(t, "bilinear")
    both = "one value for x and y"
    alpha, sigma = (scalar(k, getattr(t, k), takes=both) for k in ("alpha", "sigma"))
    return {"elastic": (alpha, sigma), "elastic_p": 1.0, **_fill(t, ctx)}


def _blur(t: Any, ctx: Context) -> dict[str, Any]:
    kernel = int(scalar("kernel_size", t.kernel_size, takes="one kernel size for height and width"))
    return {"blur": 1.0, "blur_sigma": tuple(float(s) for s in t.sigma), "blur_kernel": kernel}


def _erasing(t: Any, ctx: Context) -> dict[str, Any]:
    value = t.value if isinstance(t.value, str) else ctx.level(scalar("value", t.value))
    return {
        "erasing": float(t.p),
        "erasing_scale": tuple(t.scale),
        "erasing_ratio": tuple(t.ratio),
        "erasing_value": value,
        "erasing_target": "both",
    }


def _noise(t: Any, ctx: Context) -> dict[str, Any]:
    if t.mean != 0 or not t.clip:
        raise Untranslatable(f"mean={t.mean}, clip={t.clip}: ours adds zero-mean noise, clipped")
    return {"noise_std": float(t.sigma) * ctx.value_max, "noise_paired": False}


def _random_apply(t: Any, ctx: Context) -> dict[str, Any]:
    inner = list(t.transforms)
    name = type(inner[0]).__name__ if len(inner) == 1 else ""
    if name not in TORCHVISION or name == "RandomApply":
        raise Untranslatable("ours takes RandomApply around one supported transform")
    return with_probability(TORCHVISION[name](inner[0], ctx), float(t.p), name)


def _p(option: str, **more: Any) -> Row:
    def row(t: Any, ctx: Context) -> dict[str, Any]:
        return {option: float(t.p), **{k: getattr(t, v) for k, v in more.items()}}

    return row


def _nothing(t: Any, ctx: Context) -> dict[str, Any]:
    return {}


def _to_tensor(t: Any, ctx: Context) -> dict[str, Any]:
    ctx.scaled = True  # (deprecated) ToTensor: float32 in [0, 1]
    return {"out_dtype": "float32"}


TORCHVISION: dict[str, Row] = {
    "RandomHorizontalFlip": _p("hflip"),
    "RandomVerticalFlip": _p("vflip"),
    "RandomCrop": _crop,
    "CenterCrop": lambda t, ctx: {"crop": _size(t.size), "center": True},
    "RandomResizedCrop": _resized_crop,
    "Resize": _resize,
    "RandomRotation": _rotation,
    "RandomAffine": _affine,
    "RandomPerspective": _perspective,
    "ElasticTransform": _elastic,
    "ColorJitter": _jitter,
    "Grayscale": _grayscale,
    "RandomGrayscale": _p("grayscale"),
    "RandomAdjustSharpness": _p("sharpness", sharpness_factor="sharpness_factor"),
    "RandomPosterize": _p("posterize", posterize_bits="bits"),
    "RandomSolarize": lambda t, ctx: {
        "solarize": float(t.p),
        "solarize_threshold": float(t.threshold) * ctx.unit(),
    },
    "RandomInvert": _p("invert"),
    "RandomAutocontrast": _p("autocontrast"),
    "RandomEqualize": _p("equalize"),
    "RandomChannelPermutation": lambda t, ctx: {"channel_shuffle": 1.0},
    "GaussianBlur": _blur,
    "GaussianNoise": _noise,
    "JPEG": lambda t, ctx: {"jpeg": 1.0, "jpeg_quality": tuple(int(q) for q in t.quality)},
    "RandomErasing": _erasing,
    "TrivialAugmentWide": _policy("trivial_augment_wide"),
    "RandAugment": _policy("rand_augment"),
    "RandomApply": _random_apply,
    "Normalize": _normalize,
    "ToDtype": _dtype,
    "ConvertImageDtype": lambda t, ctx: _dtype(t, ctx, scale=True),
    "ToImage": _nothing,
    "ToTensor": _to_tensor,
    "PILToTensor": _nothing,
    "ToPureTensor": _nothing,
}
