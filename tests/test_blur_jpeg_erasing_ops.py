"""Gaussian blur, JPEG artefacts and random erasing at fixed parameters, against references
that are not ours: kornia 0.9's ``gaussian_blur2d`` (reflect borders, the kernel size given),
Albumentations 2.0.8's ``GaussianBlur`` (the kernel size derived from sigma), PIL's JPEG
encoder and decoder, Albumentations' ``ImageCompression``, and numpy's
``pad(mode='reflect')`` for kernels wider than the image.
Each op's apply function is called directly with a parameter row (the draws are tested in
test_blur_jpeg_erasing_draws.py).

Bounds: blur uint8 within 1 of the float reference rounded (ours rounds the float32 result
half up once, torchvision half to even: they differ by at most 1 where the float lands on a
half); float32 within 1e-5 (both float32 sums, in another order). JPEG: equal to PIL's bytes,
bound 0: both are libjpeg-turbo (the system's 2.1 here, PIL's bundled 3.x) with the same
settings (quality tables, 4:2:0 chroma for RGB, the accurate integer DCT both ways, fancy
upsampling), and libjpeg-turbo's SIMD paths are exact twins of its C code, so the same
settings give the same bytes.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from drawn_ops import apply_in_layout
from PIL import Image

kornia = pytest.importorskip("kornia")

from ffcv_pairs.kernels import blur, erasing, jpeg_artefacts  # noqa: E402
from ffcv_pairs.kernels.hashing import mix64, normal, uniform  # noqa: E402

RNG = np.random.default_rng(4564)
U8 = (0.0, 255.0, 1.0)  # the rows' tail: low, high, rounds
F32 = (0.0, 1.0, 0.0)


def smooth(channels: int, height: int = 29, width: int = 35) -> np.ndarray:
    """A uint8 CHW image with edges and texture (JPEG and blur both have work to do)."""
    y, x = np.mgrid[0:height, 0:width]
    planes = [120 + 90 * np.sin(x / (4 + c)) * np.cos(y / 3) for c in range(channels)]
    noisy = np.stack(planes) + RNG.integers(-25, 26, (channels, height, width))
    return np.clip(noisy, 0, 255).astype(np.uint8)


run = apply_in_layout


def kornia_blur(image: np.ndarray, sigma: float, size: int) -> np.ndarray:
    """kornia's blur of the CHW ``image``'s values (uint8 taken as floats 0..255)."""
    t = torch.from_numpy(image.astype(np.float32))[None]
    out = kornia.filters.gaussian_blur2d(t, (size, size), (sigma, sigma), border_type="reflect")
    return out[0].numpy().astype(np.float64)


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("sigma, size", [(0.3, 3), (1.0, 7), (2.0, 13), (1.5, 5)])
def test_blur_is_kornias_with_reflect_borders(channels: int, sigma: float, size: int) -> None:
    image = smooth(channels)
    ref = kornia_blur(image, sigma, size)
    for axes in ("chw", "hwc", "hw") if channels == 1 else ("chw", "hwc"):
        ours = run(blur.gaussian_blur, image, (1, sigma, size), U8, axes)
        assert np.abs(ours - np.round(ref)).max() <= 1, axes
        assert np.abs(ours - ref).max() <= 0.5 + 1e-3, axes  # rounded half up, once
    floats = image.astype(np.float32) / 255
    ours = run(blur.gaussian_blur, floats, (1, sigma, size), F32)
    assert np.abs(ours - kornia_blur(floats, sigma, size)).max() <= 1e-5


def test_blur_wider_than_the_image_mirrors_again_as_numpy() -> None:
    """A kernel wider than the image (torch refuses such a reflect pad): the image mirrored
    about its edges as often as needed, ``np.pad(mode='reflect')``, then the 2-d kernel."""
    image = RNG.random((2, 5, 4)).astype(np.float32)
    sigma, size = 3.0, 13
    x = np.arange(size) - size // 2
    k = np.exp(-(x**2) / (2 * sigma**2))
    k /= k.sum()
    padded = np.pad(image.astype(np.float64), ((0, 0), (6, 6), (6, 6)), mode="reflect")
    ref = np.zeros(image.shape)
    for dy in range(size):
        for dx in range(size):
            ref += k[dy] * k[dx] * padded[:, dy : dy + 5, dx : dx + 4]
    ours = run(blur.gaussian_blur, image, (1, sigma, size), F32)
    assert np.abs(ours - ref).max() <= 1e-5
    one = run(blur.gaussian_blur, image[:, :1], (1, sigma, size), F32)  # one row: along it only
    assert np.abs(one - _along_the_row(image[:, :1], k)).max() <= 1e-5


def _along_the_row(image: np.ndarray, k: np.ndarray) -> np.ndarray:
    padded = np.pad(image.astype(np.float64), ((0, 0), (0, 0), (6, 6)), mode="reflect")
    return sum(k[d] * padded[:, :, d : d + image.shape[2]] for d in range(len(k)))


@pytest.mark.parametrize("sigma", [0.4, 1.1, 2.0])
def test_blur_kernel_rule_is_albumentations(sigma: float) -> None:
    """``blur_kernel=None``: size ``int(3.5 * sigma) * 2 + 1``, as Albumentations'
    ``GaussianBlur(blur_limit=0)`` (OpenCV's fixed-point uint8 blur: within 1)."""
    A = pytest.importorskip("albumentations")
    image = smooth(3)
    hwc = np.ascontiguousarray(image.transpose(1, 2, 0))
    ref = A.GaussianBlur(blur_limit=0, sigma_limit=(sigma, sigma), p=1)(image=hwc)["image"]
    size = int(3.5 * sigma) * 2 + 1
    ours = run(blur.gaussian_blur, image, (1, sigma, size), U8, "hwc")
    assert np.abs(ours.astype(int) - ref.transpose(2, 0, 1)).max() <= 1


def pil_jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    """PIL's encode and decode of a CHW uint8 image (1 channel: 'L', 3: 'RGB'), as CHW."""
    hwc = image[0] if len(image) == 1 else image.transpose(1, 2, 0)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(hwc)).save(buf, format="JPEG", quality=quality)
    out = np.asarray(Image.open(io.BytesIO(buf.getvalue())))
    return out[None] if out.ndim == 2 else out.transpose(2, 0, 1)


@pytest.mark.parametrize("quality", [1, 10, 50, 75, 95, 100])
@pytest.mark.parametrize("size", [(29, 35), (16, 16), (7, 3)])
def test_jpeg_is_pils_bytes(quality: int, size: tuple[int, int]) -> None:
    rgb, gray = smooth(3, *size), smooth(1, *size)
    ref = pil_jpeg(rgb, quality)
    assert quality == 100 or not np.array_equal(ref, rgb)
    for axes in ("chw", "hwc"):
        np.testing.assert_array_equal(
            run(jpeg_artefacts.jpeg_artefacts, rgb, (1, quality), U8, axes), ref
        )
    for axes in ("chw", "hw"):
        np.testing.assert_array_equal(
            run(jpeg_artefacts.jpeg_artefacts, gray, (1, quality), U8, axes),
            pil_jpeg(gray, quality),
        )


def test_jpeg_is_albumentations_image_compression_bytes_read_as_bgr() -> None:
    """Albumentations' ``ImageCompression`` at one quality, byte for byte, once its quirk is
    undone: it hands the RGB array to OpenCV, which encodes it as BGR (so its luma weighs R as
    blue). Ours on the channels reversed, reversed back, is its output; ours on RGB is PIL's
    and torchvision's."""
    A = pytest.importorskip("albumentations")
    rgb = smooth(3, 33, 27)
    hwc = np.ascontiguousarray(rgb.transpose(1, 2, 0))
    for quality in (30, 80):
        ref = A.ImageCompression(quality_range=(quality, quality), p=1)(image=hwc)["image"]
        bgr = np.ascontiguousarray(rgb[::-1])
        ours = run(jpeg_artefacts.jpeg_artefacts, bgr, (1, quality), U8)[::-1]
        np.testing.assert_array_equal(ours, ref.transpose(2, 0, 1))


def test_jpeg_floats_go_through_bytes_over_the_value_range() -> None:
    """``b = round_half_up(255 * t)``, clamped, PIL's round trip, then ``low + span * b / 255``."""
    low, high = -1.0, 3.0
    image = (RNG.random((3, 20, 24)) * 4.4 - 1.2).astype(np.float32)  # some outside the range
    t = np.clip((image.astype(np.float64) - low) / (high - low), 0, 1)
    codes = np.floor(255 * t + 0.5).astype(np.uint8)
    ref = low + (high - low) * pil_jpeg(codes, 60) / 255.0
    ours = run(jpeg_artefacts.jpeg_artefacts, image, (1, 60), (low, high, 0.0))
    assert np.abs(ours - ref).max() <= 1e-6


ROW = (1, 3, 5, 6, 9)  # apply, top, left, h, w


@pytest.mark.parametrize("dtype, tail, value", [("uint8", U8, 17), ("float32", F32, 0.25)])
def test_erasing_fills_exactly_the_box(dtype: str, tail: tuple, value: float) -> None:
    image = smooth(3, 19, 23).astype(dtype)
    ref = image.copy()
    ref[:, 3:9, 5:14] = value  # torchvision's erase: img[..., i:i + h, j:j + w] = v
    for axes in ("chw", "hwc"):
        row = (*ROW, erasing.CONSTANT, value, 0, 0, 0, 0, 1, 1, 1)
        np.testing.assert_array_equal(run(erasing.erase, image, row, tail, axes), ref)
    nothing = (0, *ROW[1:], erasing.CONSTANT, value, 0, 0, 0, 0, 1, 1, 1)
    np.testing.assert_array_equal(run(erasing.erase, image, nothing, tail), image)


def test_erasing_noise_is_the_hashs_normal_and_the_same_in_any_layout() -> None:
    """NORMAL: ``mean[c] + std[c] * normal(mix64(seed), k)``, ``k`` the value's place in the
    box, channel first; layouts agree; the values are standard normal (KS)."""
    image = np.zeros((2, 40, 50), np.float32)
    mean, std, seed = (0.5, -1.0), (2.0, 0.5), 12345
    row = (1, 2, 3, 30, 40, erasing.NORMAL, 0, seed, *mean, *std)
    wide = (-1e9, 1e9, 0.0)
    chw = run(erasing.erase, image, row, wide)
    np.testing.assert_array_equal(run(erasing.erase, image, row, wide, "hwc"), chw)
    key = mix64(np.uint64(seed))
    k = 30 * 40 + 7 * 40 + 11  # channel 1, row 7, column 11 of the box
    assert chw[1, 9, 14] == np.float32(mean[1] + std[1] * normal(key, k))
    z = (chw[:, 2:32, 3:43].astype(np.float64) - np.array(mean)[:, None, None]) / np.array(std)[
        :, None, None
    ]
    from scipy import stats

    assert stats.kstest(z.ravel(), "norm").pvalue > 1e-5
    assert (chw[:, :2] == 0).all() and (chw[:, 32:] == 0).all() and (chw[:, :, :3] == 0).all()


def test_erasing_uniform_bytes_are_each_of_the_256_alike() -> None:
    from test_distributions import chi2_p

    image = np.zeros((3, 100, 100), np.uint8)
    row = (1, 0, 0, 99, 99, erasing.UNIFORM, 0, 77, 0, 0, 0, 1, 1, 1)
    out = run(erasing.erase, image, row, U8)[:, :99, :99]
    assert chi2_p(np.bincount(out.ravel(), minlength=256), np.full(256, 1 / 256)) > 1e-5
    assert out[0, 5, 6] == int(256 * uniform(mix64(np.uint64(77)), 5 * 99 + 6))
