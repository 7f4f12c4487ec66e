"""The policies' ops (``PairAugment(policy=...)``) at fixed magnitudes, against torchvision
v2's definitions written out here (its ``_AUGMENTATION_SPACE`` tables and the inverse affine
matrix of ``F.affine``/``F.rotate``) and computed by libraries that are not ours: PIL
(``Image.transform`` AFFINE with NEAREST for shear, translate and rotate; ``ImageEnhance``
and ``ImageOps`` for the tones) and kornia (saturation, contrast on floats). The apply is
steps of one round run with the op and magnitude the test picks; the rows' pixel map is ours
(``index_map``), the reference's matrix the test's own.

Bounds:
* geometry: equal wherever the source position is not within 1e-3 of a pixel edge, where
  ``grid_sample`` (ours) rounds half to even and PIL floors, and where PIL's nearest affine
  path, in 16.16 fixed point, is off by up to ``width * 2**-16``; at most 2% of pixels sit
  there (quarter turns of a non-square image put every pixel on an edge: tested on a square
  against ``torch.rot90``, torchvision's own path for them);
* uint8 tones within 1 (ours rounds half up once; torchvision and PIL truncate), equalize,
  posterize and solarize exactly; float32 within 2e-5 (kornia: 1e-3, its 0.299 grey weight).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageOps

from ffcv_pairs.augment.policies import magnitude_table, round_applies
from ffcv_pairs.kernels.policy import POLICY_OPS, nearest_affine

kornia = pytest.importorskip("kornia")

RNG = np.random.default_rng(72)
RGB8 = RNG.integers(0, 256, (3, 21, 26), dtype=np.uint8)
RGBF = RNG.random((3, 21, 26)).astype(np.float32)
U8, F32 = (0.0, 255.0, 1.0), (0.0, 1.0, 0.0)
GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


def apply(image: np.ndarray, name: str, magnitude: float, fill: float = 0.0) -> np.ndarray:
    """Our policy's steps running op ``name`` at ``magnitude`` on a copy of CHW ``image``:
    each apply with the row its draw gives when every sample chose that op."""
    op = POLICY_OPS.index(name)
    _, h, w = image.shape
    tail = U8 if image.dtype == np.uint8 else F32

    def choose(u, j):
        return np.array([op]), np.array([magnitude])

    view = image.copy()[:, :, :, None]
    for draw, fn in round_applies(choose, 0, fill, (h, w), tail, len(image)).values():
        row = np.concatenate([draw(np.zeros((1, 3)))[0], tail])
        fn(view, row, 0)
    return view[:, :, :, 0]


def tv_inverse(center, angle, translate, shear) -> list[float]:
    """torchvision's ``_get_inverse_affine_matrix`` (scale 1), from its documented
    definition ``M^-1 = C * RSS^-1 * C^-1 * T^-1``, inverting ``RSS`` numerically."""
    rot, sx, sy = (math.radians(v) for v in (angle, *shear))
    rss = np.array(
        [
            [math.cos(rot - sy) / math.cos(sy), -math.cos(rot - sy) * math.tan(sx) / math.cos(sy)],
            [math.sin(rot - sy) / math.cos(sy), -math.sin(rot - sy) * math.tan(sx) / math.cos(sy)],
        ]
    )
    rss[0, 1] -= math.sin(rot)
    rss[1, 1] += math.cos(rot)
    forward = np.eye(3)
    forward[:2, :2] = rss
    c, t = np.eye(3), np.eye(3)
    c[:2, 2], t[:2, 2] = center, translate
    inverse = np.linalg.inv(t @ c @ forward @ np.linalg.inv(c))
    return list(inverse[:2].ravel())


def pil_geometry(image: np.ndarray, name: str, magnitude: float, fill: float) -> tuple:
    """torchvision's op on PIL (its PIL backend: the centre of an op without ``center`` is
    ``(w / 2, h / 2)``; the shears pass ``center=[0, 0]``), with the positions each output
    pixel reads (PIL: its centre ``(x + .5, y + .5)`` through the matrix, floored)."""
    _, h, w = image.shape
    shear_deg = math.degrees(math.atan(magnitude))
    args = {
        "ShearX": ((0, 0), 0.0, (0, 0), (shear_deg, 0.0)),
        "ShearY": ((0, 0), 0.0, (0, 0), (0.0, shear_deg)),
        "TranslateX": ((w / 2, h / 2), 0.0, (int(magnitude), 0), (0.0, 0.0)),
        "TranslateY": ((w / 2, h / 2), 0.0, (0, int(magnitude)), (0.0, 0.0)),
        "Rotate": ((w / 2, h / 2), -magnitude, (0, 0), (0.0, 0.0)),  # F.rotate negates
    }[name]
    m = tv_inverse(*args)
    mode = "L" if image.dtype == np.uint8 else "F"
    paint = int(fill) if mode == "L" else fill
    out = np.stack(
        [
            np.asarray(
                Image.fromarray(plane, mode).transform(
                    (w, h), Image.Transform.AFFINE, m, Image.Resampling.NEAREST, fillcolor=paint
                )
            )
            for plane in image
        ]
    )
    y, x = np.mgrid[0:h, 0:w] + 0.5
    sx, sy = m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]
    edge = lambda v: np.abs(v - np.round(v)) < 1e-3  # noqa: E731
    return out, edge(sx) | edge(sy)


@pytest.mark.parametrize("image", [RGB8, RGBF], ids=["uint8", "float32"])
@pytest.mark.parametrize("name", GEOMETRIC)
@pytest.mark.parametrize("magnitude", [0.0, 0.33, -0.99, 7.9, -31.0, 45.0, -135.0, 57.0])
def test_geometry_is_pils_affine_nearest(image, name: str, magnitude: float) -> None:
    if name.startswith("Shear") and abs(magnitude) > 1:
        magnitude = magnitude / 100
    fill = 17.0 if image.dtype == np.uint8 else 0.25
    ours = apply(image, name, magnitude, fill)
    ref, ties = pil_geometry(image, name, magnitude, fill)
    assert ties.mean() <= 0.02, ties.mean()
    differ = (ours != ref).any(axis=0)
    assert not (differ & ~ties).any(), f"{(differ & ~ties).sum()} pixels differ off the edges"
    if abs(magnitude) >= (0.3 if name.startswith("Shear") else 1.0):
        assert (ours == fill).any() and not np.array_equal(ours, image)


def test_rotate_by_quarter_turns_is_rot90_on_a_square() -> None:
    """torchvision's fast path for 90, 180 and 270 degrees is ``torch.rot90``: the same."""
    square = RGB8[:, :21, :21]
    for k, angle in ((1, 90.0), (2, 180.0), (2, -180.0), (3, -90.0)):
        ref = torch.rot90(torch.from_numpy(square), k, dims=(-2, -1)).numpy()
        np.testing.assert_array_equal(apply(square, "Rotate", angle), ref)


def pil_channels(image: np.ndarray, op) -> np.ndarray:
    return np.stack([np.asarray(op(Image.fromarray(plane))) for plane in image])


def close(ours: np.ndarray, ref: np.ndarray, bound: float) -> None:
    err = np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max()
    assert err <= bound, f"max error {err} > {bound}"


@pytest.mark.parametrize("magnitude", [-0.99, -0.3, 0.0, 0.6, 0.99])
def test_factors_are_one_plus_the_magnitude(magnitude: float) -> None:
    """Brightness, Color and Sharpness: PIL's ImageEnhance at ``1 + magnitude`` (uint8;
    Color per pixel on the RGB image); Contrast and floats: kornia's torchvision forms."""
    f = 1.0 + magnitude
    rgb = Image.fromarray(RGB8.transpose(1, 2, 0))
    enhance = {
        "Brightness": ImageEnhance.Brightness,
        "Color": ImageEnhance.Color,
        "Sharpness": ImageEnhance.Sharpness,
    }
    for name, cls in enhance.items():
        if name == "Sharpness":
            ref = pil_channels(RGB8, lambda im: ImageEnhance.Sharpness(im).enhance(f))
        else:
            ref = np.asarray(cls(rgb).enhance(f)).transpose(2, 0, 1)
        close(apply(RGB8, name, magnitude), ref, 1.0 if name != "Color" else 2.0)
    x = torch.from_numpy(RGBF)[None]
    refs = {
        "Brightness": kornia.enhance.adjust_brightness_accumulative(x, f),
        "Color": kornia.enhance.adjust_saturation_with_gray_subtraction(x, f),
        "Contrast": kornia.enhance.adjust_contrast_with_mean_subtraction(x, f),
        "Sharpness": kornia.enhance.sharpness(x, f),
    }
    for name, ref in refs.items():
        close(apply(RGBF, name, magnitude), ref[0].numpy(), 1e-3 if name != "Sharpness" else 1e-5)
    x8 = torch.from_numpy(RGB8.astype(np.float32) / 255)[None]
    ref = kornia.enhance.adjust_contrast_with_mean_subtraction(x8, f)[0].numpy() * 255
    close(apply(RGB8, "Contrast", magnitude), ref, 1.0)


def test_color_keeps_one_channel_as_torchvision() -> None:
    plane = RGB8[:1]
    np.testing.assert_array_equal(apply(plane, "Color", 0.7), plane)
    assert not np.array_equal(apply(plane, "Contrast", 0.7), plane)


@pytest.mark.parametrize("bits", [2.0, 4.0, 8.0])
def test_posterize_is_pils(bits: float) -> None:
    ref = pil_channels(RGB8, lambda im: ImageOps.posterize(im, int(bits)))
    np.testing.assert_array_equal(apply(RGB8, "Posterize", bits), ref)


@pytest.mark.parametrize("magnitude", [1.0, 0.5, 0.3, 0.0])
def test_solarize_threshold_is_magnitude_times_the_largest_value(magnitude: float) -> None:
    ref = pil_channels(RGB8, lambda im: ImageOps.solarize(im, 255 * magnitude))
    np.testing.assert_array_equal(apply(RGB8, "Solarize", magnitude), ref)
    ours = apply(RGBF, "Solarize", magnitude)
    np.testing.assert_array_equal(ours, np.where(magnitude <= RGBF, 1 - RGBF, RGBF))


def test_autocontrast_equalize_identity() -> None:
    image = (RGB8 // 3 + 40).astype(np.uint8)
    close(apply(image, "AutoContrast", 0.0), pil_channels(image, ImageOps.autocontrast), 1.0)
    ref = pil_channels(image, ImageOps.equalize)
    np.testing.assert_array_equal(apply(image, "Equalize", 0.0), ref)
    np.testing.assert_array_equal(apply(image, "Identity", 0.0), image)


def definitions(name: str, bins: int, h: int, w: int) -> dict[str, np.ndarray]:
    """torchvision v2's ``_AUGMENTATION_SPACE`` of each policy, written out in float64."""
    wide = name == "trivial_augment_wide"
    lin = lambda hi: np.linspace(0.0, hi, bins)  # noqa: E731
    factor = lin(0.99 if wide else 0.9)
    space = {
        "ShearX": lin(0.99 if wide else 0.3),
        "ShearY": lin(0.99 if wide else 0.3),
        "TranslateX": lin(32.0 if wide else 150 / 331 * w),
        "TranslateY": lin(32.0 if wide else 150 / 331 * h),
        "Rotate": lin(135.0 if wide else 30.0),
        "Brightness": factor,
        "Color": factor,
        "Contrast": factor,
        "Sharpness": factor,
        "Posterize": 8 - np.round(np.arange(bins) / ((bins - 1) / (6 if wide else 4))),
        "Solarize": np.linspace(1.0, 0.0, bins),
    }
    return {op: space.get(op, np.zeros(bins)) for op in POLICY_OPS}


@pytest.mark.parametrize("name", ["trivial_augment_wide", "rand_augment"])
@pytest.mark.parametrize("bins", [31, 2, 10])
def test_magnitude_tables_are_torchvisions(name: str, bins: int) -> None:
    """Float32 values of the same line (torch's linspace rounds each one once)."""
    table = magnitude_table(name, bins, 37, 50)
    for k, (op, ref) in enumerate(definitions(name, bins, 37, 50).items()):
        np.testing.assert_allclose(table[k], ref, rtol=1e-6, atol=1e-6, err_msg=op)


@pytest.mark.parametrize("layout", [(3, 1), (1, 3), (2, 2)])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_nearest_affine_is_its_definition_a_pixel_at_a_time(layout, dtype) -> None:
    """The row-at-a-time sampler against its docstring transcribed a pixel at a time:
    shears and shifts by halves (ties, rounded to even), rotations, maps that leave the
    image (the fill), planes and interleaved pixels."""
    rng = np.random.default_rng([*layout, np.dtype(dtype).itemsize])
    planes, px = layout
    for trial in range(12):
        h, w = (int(v) for v in rng.integers(1, 19, 2))
        image = rng.integers(0, 256, (planes, h, w, px)).astype(dtype)
        if trial % 2:
            t = rng.uniform(-3.2, 3.2)
            c, s = math.cos(t), math.sin(t)
            m = np.array([c, -s, rng.uniform(-4, w + 4), s, c, rng.uniform(-4, h + 4)])
        else:  # halves: every source point is a tie
            m = np.array([1.0, rng.integers(-2, 3) / 2, rng.integers(-6, 6) + 0.5, 0.0, 1.0, 0.5])
        fill = 9.0
        want = np.empty_like(image)
        for y in range(h):
            for x in range(w):
                sx = np.rint(m[0] * x + m[1] * y + m[2])
                sy = np.rint(m[3] * x + m[4] * y + m[5])
                inside = 0 <= sx <= w - 1 and 0 <= sy <= h - 1
                want[:, y, x] = image[:, int(sy), int(sx)] if inside else fill
        got = image.copy()
        nearest_affine(got, m, fill)
        np.testing.assert_array_equal(got, want)
