"""The per-sample photometric ops at fixed parameters, against implementations that are not
ours: kornia 0.9 (float definitions, torchvision's), PIL (uint8 ImageOps and ImageEnhance)
and Albumentations 2.0.8. Each op's apply function is called directly with a parameter row
(the draws are tested in test_photo_draws.py).

Bounds: uint8 results are within 1 of the reference (ours rounds half up once at the end;
torchvision and PIL truncate or round at each step), except where equality is stated;
float32 results within 2e-5 (float32 references against our float64 arithmetic), 1e-3
for kornia's grayscale weights (0.299 where torchvision has 0.2989: 1e-4 of a value).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from drawn_ops import apply_in_layout
from PIL import Image, ImageEnhance, ImageOps

kornia = pytest.importorskip("kornia")

from ffcv_pairs.kernels import colour, sharpness, tones  # noqa: E402

RNG = np.random.default_rng(45)
RGB8 = RNG.integers(0, 256, (3, 19, 23), dtype=np.uint8)  # CHW
RGB8[:, :4, :4] = 77  # grey pixels: no hue
RGBF = RNG.random((3, 19, 23)).astype(np.float32)
BIG8 = RNG.integers(0, 256, (3, 41, 37), dtype=np.uint8)  # 1517 pixels: the jitter's blocks
#: Every (R, G, B) of 6 levels: ties of the largest and of the smallest, black, white, grey.
TIES = np.array(list(itertools.product((0, 1, 77, 128, 254, 255), repeat=3)), np.uint8)
TIES = np.ascontiguousarray(TIES.T.reshape(3, 12, 18))
U8 = (0.0, 255.0, 1.0)  # the rows' tail: low, high, rounds
F32 = (0.0, 1.0, 0.0)


run = apply_in_layout


def kt(image: np.ndarray) -> torch.Tensor:
    scale = 255.0 if image.dtype == np.uint8 else 1.0
    return torch.from_numpy(image.astype(np.float32) / scale)[None]


def kn(t: torch.Tensor, dtype: type) -> np.ndarray:
    out = t[0].numpy().astype(np.float64)
    return out * 255.0 if dtype == np.uint8 else out


def close(ours: np.ndarray, ref: np.ndarray, bound: float | None = None) -> None:
    if bound is None:
        bound = 1.0 if ours.dtype == np.uint8 else 2e-5
    err = np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max()
    assert err <= bound, f"max error {err} > {bound}"


def jitter(order: tuple, factors: tuple, on: tuple) -> tuple:
    return (*order, *factors, *on)


@pytest.mark.parametrize("image", [RGB8, RGBF], ids=["uint8", "float32"])
@pytest.mark.parametrize("s", [0.0, 0.4, 1.7])
def test_saturation_is_kornias_gray_subtraction(image: np.ndarray, s: float) -> None:
    tail = U8 if image.dtype == np.uint8 else F32
    for axes in ("chw", "hwc"):
        ours = run(
            colour.color_jitter, image, jitter((0, 1, 2, 3), (1, 1, s, 0), (0, 0, 1, 0)), tail, axes
        )
        ref = kornia.enhance.adjust_saturation_with_gray_subtraction(kt(image), s)
        close(ours, kn(ref, image.dtype), None if image.dtype == np.uint8 else 1e-3)


@pytest.mark.parametrize("image", [RGB8, RGBF], ids=["uint8", "float32"])
@pytest.mark.parametrize("h", [-0.4, 0.1, 0.25, 0.5])
def test_hue_is_kornias_adjust_hue(image: np.ndarray, h: float) -> None:
    tail = U8 if image.dtype == np.uint8 else F32
    ours = run(colour.color_jitter, image, jitter((0, 1, 2, 3), (1, 1, 1, h), (0, 0, 0, 1)), tail)
    ref = kornia.enhance.adjust_hue(kt(image), h * 2 * math.pi)  # kornia's hue is in radians
    close(ours, kn(ref, image.dtype), None if image.dtype == np.uint8 else 1e-4)


@pytest.mark.parametrize("h", [-0.5, -0.3, 0.1, 0.5])
def test_hue_on_ties_and_extremes_is_kornias(h: float) -> None:
    """Pixels whose largest (or smallest) value two or three channels share, black, white
    and greys, shifted both ways by up to half a turn: the branch-free hue's closed form, its
    wrap modulo 6 sixths and its greys (no hue) are torchvision's."""
    for axes in ("chw", "hwc"):
        ours = run(
            colour.color_jitter, TIES, jitter((0, 1, 2, 3), (1, 1, 1, h), (0, 0, 0, 1)), U8, axes
        )
        close(ours, kn(kornia.enhance.adjust_hue(kt(TIES), h * 2 * math.pi), np.uint8))


def kornia_jitter(image: np.ndarray, order: tuple, factors: tuple, on: tuple) -> torch.Tensor:
    """kornia's torchvision-style parts that are ``on``, composed in ``order``."""
    b, c, s, h = factors
    parts = [
        lambda x: kornia.enhance.adjust_brightness_accumulative(x, b),
        lambda x: kornia.enhance.adjust_contrast_with_mean_subtraction(x, c),
        lambda x: kornia.enhance.adjust_saturation_with_gray_subtraction(x, s),
        lambda x: kornia.enhance.adjust_hue(x, h * 2 * math.pi),
    ]
    ref = kt(image)
    for k in order:
        ref = parts[k](ref) if on[k] else ref
    return ref


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (2, 3, 0, 1)])
@pytest.mark.parametrize("on", [(1, 1, 1, 1), (1, 0, 1, 1), (0, 1, 0, 0)])
def test_color_jitter_over_several_blocks_is_kornias(order: tuple, on: tuple) -> None:
    """An image of more pixels than one block of the kernel (and a part block): the contrast's
    mean is of the whole image, as the parts before it leave it, in either layout."""
    factors = (0.7, 1.6, 0.4, 0.2)
    ref = kn(kornia_jitter(BIG8, order, factors, on), np.uint8)
    for axes in ("chw", "hwc"):
        close(run(colour.color_jitter, BIG8, jitter(order, factors, on), U8, axes), ref)


@pytest.mark.parametrize("image", [RGB8, RGBF], ids=["uint8", "float32"])
@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)])
def test_color_jitter_is_torchvisions_parts_in_the_given_order(image, order) -> None:
    """kornia's torchvision-style parts composed in ``order`` (the mean of contrast taken on
    the image as the earlier parts left it)."""
    factors = (1.3, 0.6, 1.5, -0.15)
    ref = kornia_jitter(image, order, factors, (1, 1, 1, 1))
    tail = U8 if image.dtype == np.uint8 else F32
    ours = run(colour.color_jitter, image, jitter(order, factors, (1, 1, 1, 1)), tail)
    close(ours, kn(ref, image.dtype), None if image.dtype == np.uint8 else 2e-3)


@pytest.mark.parametrize("image", [RGB8, RGBF], ids=["uint8", "float32"])
@pytest.mark.parametrize("g", [0.45, 1.0, 2.2])
def test_gamma_is_kornias_adjust_gamma(image: np.ndarray, g: float) -> None:
    tail = U8 if image.dtype == np.uint8 else F32
    for axes in ("chw", "hwc", "hw"):
        plane = image if axes != "hw" else image[:1]
        ours = run(tones.gamma, plane, (1, g), tail, axes)
        close(ours, kn(kornia.enhance.adjust_gamma(kt(plane), g), image.dtype))


@pytest.mark.parametrize("image", [RGB8, RGBF], ids=["uint8", "float32"])
def test_grayscale_is_kornias_rgb_to_grayscale(image: np.ndarray) -> None:
    tail = U8 if image.dtype == np.uint8 else F32
    for axes in ("chw", "hwc"):
        ours = run(colour.grayscale, image, (1,), tail, axes)
        ref = kn(kornia.color.rgb_to_grayscale(kt(image)), image.dtype)
        close(ours, np.repeat(ref, 3, axis=0), None if image.dtype == np.uint8 else 1e-3)


def pil_channels(image: np.ndarray, op) -> np.ndarray:
    """PIL's ``op`` on each channel of a uint8 CHW image, as its own 'L' image."""
    return np.stack([np.asarray(op(Image.fromarray(plane))) for plane in image])


def test_autocontrast_is_pils() -> None:
    image = (RGB8 // 3 + 40).astype(np.uint8)  # each channel inside 40..125: stretched
    image[2] = 9  # a constant channel: kept
    for axes in ("chw", "hwc"):
        ours = run(tones.autocontrast, image, (1,), U8, axes)
        close(ours, pil_channels(image, ImageOps.autocontrast))
    out = run(tones.autocontrast, RGBF * 0.5 + 0.2, (1,), F32)
    lo, hi = (RGBF * 0.5 + 0.2).min(axis=(1, 2)), (RGBF * 0.5 + 0.2).max(axis=(1, 2))
    ref = kn(kornia.enhance.normalize_min_max(kt(RGBF * 0.5 + 0.2)), np.float32)
    close(out, ref, 1e-5)
    assert (hi > lo).all()


def test_equalize_is_pils_exactly() -> None:
    """Integer definitions both: equal, not within 1."""
    image = np.clip(RNG.normal(90, 20, (3, 40, 37)), 0, 255).astype(np.uint8)
    image[1] = 200  # one level: kept
    for axes in ("chw", "hwc", "hw"):
        plane = image if axes != "hw" else image[:1]
        ours = run(tones.equalize, plane, (1,), U8, axes)
        np.testing.assert_array_equal(ours, pil_channels(plane, ImageOps.equalize))


def test_equalize_floats_are_kornias() -> None:
    image = np.round(RGBF * 255) / 255  # on the 256 levels: kornia's bins are ours
    ours = run(tones.equalize, image.astype(np.float32), (1,), F32)
    close(ours, kn(kornia.enhance.equalize(kt(image.astype(np.float32))), np.float32), 2e-3)


@pytest.mark.parametrize("factor", [0.0, 0.5, 2.0])
def test_sharpness_is_pils_and_kornias(factor: float) -> None:
    for axes in ("chw", "hwc"):
        ours = run(sharpness.sharpness, RGB8, (1, factor), U8, axes)
        ref = pil_channels(RGB8, lambda im: ImageEnhance.Sharpness(im).enhance(factor))
        close(ours, ref)
    ours = run(sharpness.sharpness, RGBF, (1, factor), F32)
    close(ours, kn(kornia.enhance.sharpness(kt(RGBF), factor), np.float32), 1e-5)


@pytest.mark.parametrize("bits", [1, 4, 8])
def test_posterize_is_pils_exactly(bits: int) -> None:
    for axes in ("chw", "hw"):
        plane = RGB8 if axes != "hw" else RGB8[:1]
        ours = run(tones.posterize, plane, (1, bits), U8, axes)
        ref = pil_channels(plane, lambda im, b=bits: ImageOps.posterize(im, b))
        np.testing.assert_array_equal(ours, ref)


def test_posterize_floats_follow_torchvision_v2s_definition() -> None:
    """No library here posterizes floats as torchvision v2 does (kornia goes through 255
    levels): the reference is v2's formula, ``floor(t * 2**bits).clamp(0, 2**bits - 1) /
    2**bits``, written out."""
    ours = run(tones.posterize, RGBF, (1, 3), F32)
    close(ours, np.clip(np.floor(RGBF.astype(np.float64) * 8), 0, 7) / 8, 1e-7)


@pytest.mark.parametrize("threshold", [128, 0, 200])
def test_solarize_is_pils_exactly(threshold: int) -> None:
    ours = run(tones.solarize, RGB8, (1, threshold), U8, "hwc")
    ref = pil_channels(RGB8, lambda im: ImageOps.solarize(im, threshold))
    np.testing.assert_array_equal(ours, ref)
    ours = run(tones.solarize, RGBF, (1, threshold / 255), F32)
    close(ours, kn(kornia.enhance.solarize(kt(RGBF), threshold / 255), np.float32))


def test_invert_is_pils_and_kornias() -> None:
    np.testing.assert_array_equal(
        run(tones.invert, RGB8, (1,), U8), pil_channels(RGB8, ImageOps.invert)
    )
    close(run(tones.invert, RGBF, (1,), F32), kn(kornia.enhance.invert(kt(RGBF)), np.float32))


def test_channel_shuffle_is_albumentations() -> None:
    """(Skipped where albumentations is not installed: ``pip install -e '.[peers]'``.)"""
    fpixel = pytest.importorskip("albumentations.augmentations.pixel.functional")

    image = RNG.integers(0, 256, (4, 9, 7), dtype=np.uint8)  # any channel count
    perm = [2, 0, 3, 1]
    ref = fpixel.channel_shuffle(np.ascontiguousarray(image.transpose(1, 2, 0)), perm)
    for axes in ("chw", "hwc"):
        ours = run(colour.channel_shuffle, image, (1, *perm), U8, axes)
        np.testing.assert_array_equal(ours, ref.transpose(2, 0, 1))


@pytest.mark.parametrize(
    "fn, head",
    [
        (tones.gamma, (0, 2.0)),
        (tones.invert, (0,)),
        (colour.grayscale, (0,)),
        (sharpness.sharpness, (0, 2.0)),
        (colour.channel_shuffle, (0, 2, 1, 0)),
    ],
)
def test_not_applied_keeps_the_image(fn, head) -> None:
    np.testing.assert_array_equal(run(fn, RGB8, head, U8), RGB8)


@pytest.mark.parametrize("threshold", [100.5, -3.0, 300.0])
def test_solarize_between_levels_and_outside_follows_the_definition(threshold: float) -> None:
    """A threshold between two levels, or outside 0..255: ``x >= threshold`` inverted."""
    levels = np.arange(256, dtype=np.uint8).reshape(1, 16, 16)
    ours = run(tones.solarize, levels, (1, threshold), U8)
    np.testing.assert_array_equal(ours, np.where(levels >= threshold, 255 - levels, levels))
