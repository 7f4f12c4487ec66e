"""``PairAugment``: one random transform applied identically to A and B, reproducibly.

Example (Python, or the ``augment:`` block of a LightningCLI YAML)::

    PairAugment(hflip=0.5, crop=(56, 56), crop_padding=4, pad_mode="reflect",
                brightness=0.2, brightness_paired=False,
                normalize_mean=(123.7, 116.3, 103.5), normalize_std=(58.4, 57.1, 57.4))

**Geometric** ops (crop / resized crop, translate, flips, rot90) are always
shared by A and B: one parameter draw per sample moves both images the same
way (``geometry_paired=False`` exists only to show what breaks without it).
They run in this order: take the region (a random ``crop`` of the padded image,
or a random ``resized_crop``; the central one with ``center``), shifted by the
translation; flip; rotate by k*90 deg.
Out-of-image pixels follow ``pad_mode`` (``constant`` uses ``fill``). **The matrix geometry**
(rotate, affine, perspective, scale jitter, resize, transpose, d4, elastic, ...; see
:mod:`~ffcv_pairs.augment.warp_options`) composes every geometric op into one matrix a sample.

**Photometric** ops (brightness, contrast, gaussian noise) each have a ``*_paired`` switch:
one draw for A and B, or one per image. **Output** (``normalize_mean``/``normalize_std``,
``out_dtype``) runs on ``device``; it and ``noise_std`` are in the units of the values handed
back (0-255 for uint8; a ``quantize``d file's own), see the class's Args.

**Per-sample photometric ops** (saturation, hue, ``color_jitter``, gamma, grayscale,
autocontrast, equalize, sharpness, posterize, solarize, invert, channel shuffle, Gaussian
blur, JPEG artefacts; see :mod:`~ffcv_pairs.augment.photo_options`) follow brightness,
contrast and noise; a **policy** (``policy="trivial_augment_wide"`` or ``"rand_augment"``,
torchvision's; see :mod:`~ffcv_pairs.augment.policy_options`) follows them, then random
erasing.

**Ops of the user's own** (``user_ops``, :class:`~ffcv_pairs.augment.user_ops.PairOp`) run
after the built-in ones and before normalisation, drawing from the same keys (see
``docs/user-ops.md``).
**Swap**: ``swap=p`` exchanges A and B per sample with probability ``p``, on the batch's
device after the rest (``swap_label`` says how the label changes; see
:mod:`~ffcv_pairs.augment.swap`).

Every random number is a hash of ``(seed, epoch, sample_id, op)``: identical
for A and B, and the same for every run, thread count, number of ranks and order.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import InitVar, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from ..format.schema import PairSchema
from ..kernels.geometry import GeometryConfig
from ..kernels.photometric import PhotometricConfig
from .axes import ImageAxes, image_axes
from .checks import (
    PAD_MODES,
    accept_old_names,
    check_fill,
    check_geometry,
    check_photometric_and_output,
    check_swap,
)
from .dense import DenseField, DenseKind, check_dense
from .photo_options import PhotoOptions, check_photo_options
from .policy_options import PolicyOptions, check_policy_options
from .translators import TABLES, fill_in, from_library, spec_options
from .user_ops import PairOp, pair_ops
from .warp_draws import output_size
from .warp_options import WarpOptions, check_warp_axes, check_warp_options

__all__ = ["ImageAxes", "PairAugment", "image_axes"]  # the axes: from .axes

PadMode = Literal["constant", "reflect", "edge"]
OutDtype = Literal["uint8", "float16", "bfloat16", "float32"]


@dataclass(frozen=True)
class PairAugment(PhotoOptions, PolicyOptions, WarpOptions):
    """Paired, reproducible JIT augmentation. See the module docstring. The per-sample
    photometric ops (saturation, hue, color_jitter, gamma, grayscale, autocontrast, equalize,
    sharpness, posterize, solarize, invert, channel_shuffle, blur, jpeg, erasing; keyword-only)
    are documented in :class:`~ffcv_pairs.augment.photo_options.PhotoOptions`; the policy
    (``policy``, ``policy_num_ops``, ``policy_magnitude``, ``policy_bins``,
    ``policy_paired``) in :class:`~ffcv_pairs.augment.policy_options.PolicyOptions`; the matrix
    geometry (transpose, d4, rotate, affine_*, scale_jitter, scale_jitter_aspect, perspective,
    elastic, resize, resize_longest, pad_if_needed, b_offset, and their ``*_p``; keyword-only)
    in :class:`~ffcv_pairs.augment.warp_options.WarpOptions`.

    Args:
        hflip: Probability of a horizontal flip (A and B together).
        vflip: Probability of a vertical flip.
        rot90: Rotate by a random multiple of 90 degrees (needs square output).
        crop: Output ``(height, width)`` of a random crop, or None.
        crop_padding: Pixels of padding on each side before a random crop.
        resized_crop: Output ``(height, width)`` of a random resized crop (bilinear),
            as torchvision's RandomResizedCrop, or None. Not with ``crop``.
        crop_scale: ``(low, high)`` area fraction of the resized crop's region;
            default ``(0.08, 1.0)``, as torchvision.
        crop_ratio: ``(low, high)`` aspect ratio range of the resized crop.
        center: Take the central region, not a random one (deterministic: for
            evaluation). With ``crop``, the central ``crop`` window; with ``resized_crop``,
            the largest central region of the output's aspect ratio, resized to it
            (torchvision's ``Resize`` then ``CenterCrop``). Needs one of them; not with
            ``crop_scale`` (``crop_ratio`` is not used).
        translate: Maximum shift ``(dy, dx)`` in pixels of the crop window.
        pad_mode: ``constant`` (``fill``), ``reflect`` or ``edge`` for pixels outside.
        fill: Value of ``constant`` padding, a stored value (uint8 and a quantized file's
            codes: a whole number 0..255).
        brightness: Multiply by a factor in ``[1 - b, 1 + b]``.
        contrast: Scale deviations from the image mean by ``[1 - c, 1 + c]``.
        noise_std: Standard deviation of additive gaussian noise, in the units of the
            values handed back (0-255 for uint8; a quantized file's floats).
        brightness_paired, contrast_paired, noise_paired: Same draw for A and B.
        value_range: ``(low, high)`` that brightness, contrast and noise clamp
            floating-point images to; default ``(0, 1)``, as torchvision. A float
            image holding values outside it is refused, never clamped silently.
            Integer images clamp to their dtype (uint8: 0..255).
        geometry_paired: Keep True. False draws geometry for A and B
            independently, which destroys the pairing (for demonstrations).
            (``paired_geometry``, its old name, still works, with a warning.)
        normalize_mean, normalize_std: Per-channel ``(x - mean) / std`` on the device (one
            value: every channel), in the units of the values handed back: 0-255 for
            uint8, the floats' on a quantized file; a mean outside the values' range,
            where the loader knows it, is refused.
        out_dtype: Output dtype; default float32 when normalizing, else unchanged.
        channels: ``auto``, ``first`` (C,H,W) or ``last`` (H,W,C).
        dense: Per-pixel fields that follow the geometry, by name: ``{'label': 'mask'}``, or
            a :class:`~ffcv_pairs.augment.dense.DenseField` (``mask``, ``disparity`` or
            ``flow``, and the ``fill`` of pixels from outside the image); see
            :mod:`~ffcv_pairs.augment.dense`. Undeclared fields shaped like the images
            are refused under geometric ops.
        user_ops: Ops of the user's own (:class:`~ffcv_pairs.augment.user_ops.PairOp`, or
            mappings of its options), in order, after the built-in ops.
        swap: Probability that a sample's A and B change places (needs A and B of one
            shape and dtype).
        swap_label: How a swap changes the label: ``(label, swapped) -> label`` on the batch
            (``swapped``: bool ``(n,)``), or its import path ``"module.function"``; None:
            the label is kept.
        torchvision, albumentations: ``[{ClassName: {argument: value}}, ...]`` of that library
            (YAML's :meth:`from_torchvision`): fills the fields left at their defaults.
    """

    hflip: float = 0.0
    vflip: float = 0.0
    rot90: bool = False
    crop: tuple[int, int] | None = None
    crop_padding: int = 0
    resized_crop: tuple[int, int] | None = None
    crop_scale: tuple[float, float] | None = None
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    center: bool = False
    translate: tuple[int, int] = (0, 0)
    pad_mode: PadMode = "constant"
    fill: float = 0.0
    brightness: float = 0.0
    contrast: float = 0.0
    noise_std: float = 0.0
    brightness_paired: bool = True
    contrast_paired: bool = True
    noise_paired: bool = False
    geometry_paired: bool = True
    value_range: tuple[float, float] | None = None
    normalize_mean: tuple[float, ...] | None = None
    normalize_std: tuple[float, ...] | None = None
    out_dtype: OutDtype | None = None
    channels: Literal["auto", "first", "last"] = "auto"
    dense: dict[str, DenseField | DenseKind] | None = None
    user_ops: tuple[PairOp, ...] = ()
    swap: float = 0.0
    swap_label: str | Callable[..., Any] | None = None
    paired_geometry: InitVar[bool | None] = None  # geometry_paired's old name
    torchvision: InitVar[list[Any] | None] = None
    albumentations: InitVar[list[Any] | None] = None

    def __post_init__(self, paired_geometry: bool | None, *specs: list[Any] | None) -> None:
        accept_old_names(self, paired_geometry)
        for library, spec in zip(TABLES, specs):  # the torchvision and albumentations blocks
            if spec is not None:
                fill_in(self, spec_options(library, spec))
        check_geometry(self)
        check_photometric_and_output(self)
        check_photo_options(self)
        check_warp_options(self)
        object.__setattr__(self, "dense", check_dense(self.dense) or None)
        check_policy_options(self)
        object.__setattr__(self, "user_ops", pair_ops(self.user_ops))
        check_swap(self)

    def __repr__(self) -> str:
        # fields() lists the inherited options (photometric, policy, warp) first: show them last
        names = [f.name for f in fields(self)]
        k = len(fields(PhotoOptions)) + len(fields(PolicyOptions)) + len(fields(WarpOptions))
        shown_ = ", ".join(f"{n}={getattr(self, n)!r}" for n in names[k:] + names[:k])
        return f"{type(self).__name__}({shown_})"

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_torchvision(
        cls, pipeline: Any, *, value_max: float = 255.0, **overrides: Any
    ) -> PairAugment:
        """A torchvision v2 pipeline's options, ``overrides`` over them (``value_max``: what
        its ``[0, 1]`` floats scale to; 255 for uint8). See :mod:`.translate`."""
        return from_library(cls, "torchvision", pipeline, overrides, value_max)

    @classmethod
    def from_albumentations(
        cls, pipeline: Any, *, value_max: float = 255.0, **overrides: Any
    ) -> PairAugment:
        """An Albumentations pipeline's options, as :meth:`from_torchvision`."""
        return from_library(cls, "albumentations", pipeline, overrides, value_max)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairAugment:
        known = {f.name for f in fields(cls)} | {"paired_geometry", *TABLES}  # + InitVars
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown augment option(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> PairAugment:
        """Load from a YAML file holding the options (optionally under ``augment:``)."""
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of augment options")
        return cls.from_dict(data.get("augment", data))

    # -- what the loader asks ------------------------------------------------------------
    @property
    def out_size(self) -> tuple[int, int] | None:
        """The output ``(height, width)`` of the crop or resized crop; None: the image's."""
        return self.resized_crop if self.resized_crop is not None else self.crop

    @property
    def resizes(self) -> bool:
        """A random resized crop (bilinear) rather than a plain crop."""
        return self.resized_crop is not None

    @property
    def scale_range(self) -> tuple[float, float]:
        """The resized crop's area fractions (torchvision's default when unset)."""
        return self.crop_scale if self.crop_scale is not None else (0.08, 1.0)

    @property
    def has_geometry(self) -> bool:
        return bool(
            self.hflip
            or self.vflip
            or self.rot90
            or self.out_size is not None
            or any(self.translate)
            or self.warps
        )

    @property
    def dense_fields(self) -> dict[str, DenseField]:
        """``dense`` as checked: a :class:`~ffcv_pairs.augment.dense.DenseField` per name."""
        return check_dense(self.dense)

    @property
    def has_photometric(self) -> bool:
        return bool(self.brightness or self.contrast or self.noise_std)

    def field_axes(self, schema: PairSchema) -> dict[str, ImageAxes]:
        """The :class:`ImageAxes` of each image field, checked against this config."""
        out = {
            name: image_axes(schema.spec(name), self.channels, name) for name in schema.IMAGE_FIELDS
        }
        a, b = (out[n] for n in schema.IMAGE_FIELDS)
        if (
            self.has_geometry
            and self.geometry_paired
            and (a.height, a.width) != (b.height, b.width)
        ):
            raise ValueError(
                f"paired geometric augmentation needs A and B of the same size, got "
                f"{(a.height, a.width)} and {(b.height, b.width)}"
            )
        if self.value_range is not None and all(
            np.dtype(schema.spec(n).dtype).kind in "iu" for n in schema.IMAGE_FIELDS
        ):
            raise ValueError(
                f"augment value_range={self.value_range} is for floating-point images; A and "
                f"B are {schema.spec(schema.IMAGE_FIELDS[0]).dtype} (clamped to their dtype)"
            )
        if self.swap and (schema.a.shape, schema.a.dtype) != (schema.b.shape, schema.b.dtype):
            raise ValueError(
                f"augment swap={self.swap} needs A and B of one shape and dtype, got "
                f"{schema.a.shape} {schema.a.dtype} and {schema.b.shape} {schema.b.dtype}"
            )
        for name, axes in out.items():
            check_fill(self, name, schema.spec(name).dtype)
            oh, ow = self.output_size(axes)
            check_warp_axes(self, name, axes, (oh, ow))
            if self.crop is not None and not self.warps:
                room = (axes.height + 2 * self.crop_padding, axes.width + 2 * self.crop_padding)
                if oh > room[0] or ow > room[1]:
                    raise ValueError(
                        f"augment crop={self.crop} is larger than {name}'s image "
                        f"{(axes.height, axes.width)} plus 2*crop_padding={2 * self.crop_padding}"
                    )
            if self.rot90 and oh != ow:
                raise ValueError(f"augment rot90 needs a square output, got {(oh, ow)}")
            small = self.crop_padding >= min(axes.height, axes.width)
            if self.pad_mode == "reflect" and small and not self.warps:  # a warp reflects any
                raise ValueError(
                    f"augment crop_padding={self.crop_padding} must be smaller than "
                    f"{name}'s image size for pad_mode='reflect'"
                )
            if self.normalize_mean is not None:
                for key in ("normalize_mean", "normalize_std"):
                    if len(getattr(self, key)) not in (1, axes.num_channels):
                        raise ValueError(
                            f"augment {key} has {len(getattr(self, key))} values but {name} "
                            f"has {axes.num_channels} channel(s) (shape {schema.spec(name).shape}"
                            f"); give one per channel, or one for every channel"
                        )
        return out

    def layouts(self, schema: PairSchema) -> dict[str, ImageAxes]:
        """The old name of :meth:`field_axes` (warns: "layout" is the page layout only)."""
        warnings.warn("PairAugment.layouts() is now field_axes()", FutureWarning, stacklevel=2)
        return self.field_axes(schema)

    def output_size(self, axes: ImageAxes) -> tuple[int, int]:
        """The output ``(height, width)`` of images stored as ``axes``."""
        if self.warps:
            return output_size(self, axes.height, axes.width)
        return self.out_size if self.out_size is not None else (axes.height, axes.width)

    def output_shape(self, axes: ImageAxes) -> tuple[int, ...]:
        return axes.shape(*self.output_size(axes))

    def geometry_config(self, axes: ImageAxes) -> GeometryConfig:
        """What the geometry kernels read (see :mod:`ffcv_pairs.kernels.geometry`)."""
        oh, ow = self.out_size if self.out_size is not None else (axes.height, axes.width)
        scale = self.scale_range if self.resizes else (1.0, 1.0)
        return GeometryConfig(
            hflip=float(self.hflip),
            vflip=float(self.vflip),
            rot90=bool(self.rot90),
            out_h=int(oh),
            out_w=int(ow),
            pad=int(self.crop_padding),
            scale_lo=float(scale[0]),
            scale_hi=float(scale[1]),
            ratio_lo=float(self.crop_ratio[0]),
            ratio_hi=float(self.crop_ratio[1]),
            trans_y=int(self.translate[0]),
            trans_x=int(self.translate[1]),
            pad_mode=PAD_MODES[self.pad_mode],
            crop=self.out_size is not None,
            resize=self.resizes,
            paired=bool(self.geometry_paired),
            identity=not self.has_geometry,
            center=bool(self.center),
        )

    def photometric_config(self) -> PhotometricConfig:
        """What the photometric kernel reads."""
        return PhotometricConfig(
            brightness=float(self.brightness),
            brightness_paired=bool(self.brightness_paired),
            contrast=float(self.contrast),
            contrast_paired=bool(self.contrast_paired),
            noise_std=float(self.noise_std),
            noise_paired=bool(self.noise_paired),
            low=float(self.float_range[0]),
            high=float(self.float_range[1]),
        )

    @property
    def float_range(self) -> tuple[float, float]:
        """What photometric ops clamp floating-point images to."""
        return self.value_range if self.value_range is not None else (0.0, 1.0)

    def resolved_out_dtype(self, stored: str) -> str:
        if self.out_dtype is not None:
            return self.out_dtype
        return "float32" if self.normalize_mean is not None else stored
