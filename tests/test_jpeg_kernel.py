"""The JPEG decode kernel (ffcv_pairs/kernels/jpeg.py): libjpeg-turbo through FFCV's
extension, called from numba and cached like every kernel; checked against OpenCV's
decoder on seeded smooth images (the two differ by the IDCT: upstream's is the fast one)."""

from __future__ import annotations

import subprocess
import sys

import cv2
import numpy as np
import pytest

from ffcv_pairs.format.schema import ArraySpec, Jpeg, jpeg_axes
from ffcv_pairs.kernels.geometry import scaled_size
from ffcv_pairs.kernels.jpeg import CHW, HWC, SCALES, decode_image, decode_rgb
from ffcv_pairs.write.encode import encode_jpeg


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth RGB image with some texture (JPEG's kind of content), seeded."""
    rng = np.random.default_rng(seed)
    base = cv2.resize(rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8), (w, h))
    noise = rng.normal(0, 6, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode(rgb: np.ndarray, quality: int = 90) -> np.ndarray:
    image = rgb if rgb.ndim == 2 else cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.reshape(-1)


def decoded(jpeg: np.ndarray, h: int, w: int, denom: int = 1, pad: int = 0) -> tuple:
    """(status, pixels) of the kernel, the JPEG placed ``pad`` bytes into a larger buffer."""
    src = np.concatenate([np.full(pad, 7, np.uint8), jpeg, np.full(9, 7, np.uint8)])
    sh, sw = scaled_size(h, w, denom)
    dst = np.zeros((sh, sw, 3), np.uint8)
    return decode_rgb(src, pad, len(jpeg), dst, h, w, denom), dst


@pytest.mark.parametrize(("h", "w"), [(64, 64), (61, 45), (224, 224)])
def test_full_size_decode_matches_opencv_within_the_idct_difference(h, w) -> None:
    rgb = photo(h, w)
    jpeg = encode(rgb)
    status, out = decoded(jpeg, h, w, pad=13)
    assert status == 0
    want = cv2.cvtColor(cv2.imdecode(jpeg, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    diff = np.abs(out.astype(int) - want)
    assert diff.max() <= 8 and diff.mean() < 1.5, (diff.max(), diff.mean())
    assert np.abs(out.astype(int) - rgb).mean() < 8  # and close to the (noisy) original


@pytest.mark.parametrize("denom", SCALES[1:])
def test_reduced_decodes_have_the_ceil_size_and_match_opencv(denom) -> None:
    h, w = 223, 221
    jpeg = encode(photo(h, w, seed=denom))
    status, out = decoded(jpeg, h, w, denom)
    assert status == 0
    assert out.shape[:2] == (-(-h // denom), -(-w // denom))
    flag = {
        2: cv2.IMREAD_REDUCED_COLOR_2,
        4: cv2.IMREAD_REDUCED_COLOR_4,
        8: cv2.IMREAD_REDUCED_COLOR_8,
    }
    want = cv2.cvtColor(cv2.imdecode(jpeg, flag[denom]), cv2.COLOR_BGR2RGB)
    assert want.shape == out.shape
    diff = np.abs(out.astype(int) - want)
    assert diff.max() <= 8 and diff.mean() < 1.5, (diff.max(), diff.mean())


def test_a_grayscale_jpeg_decodes_to_three_equal_channels() -> None:
    gray = photo(40, 48)[..., 0]
    jpeg = encode(gray)
    status, out = decoded(jpeg, 40, 48)
    assert status == 0
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()
    want = cv2.imdecode(jpeg, cv2.IMREAD_GRAYSCALE)
    assert np.abs(out[..., 0].astype(int) - want).max() <= 8


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated", "garbage", "header only"],
)
def test_corrupt_or_truncated_bytes_return_minus_one(damage) -> None:
    jpeg = encode(photo(32, 32))
    bad = {
        "empty": jpeg[:0],
        "truncated": jpeg[: len(jpeg) // 2],
        "garbage": np.random.default_rng(1).integers(0, 256, 500, dtype=np.uint8),
        "header only": jpeg[:2],
    }[damage]
    status, _ = decoded(bad, 32, 32)
    assert status == -1


def test_the_kernel_is_cached_on_disk(tmp_path) -> None:
    """A fresh process loads ``decode_rgb`` from numba's cache (a ctypes call would not)."""
    code = (
        "import numpy as np\n"
        "from ffcv_pairs.kernels.jpeg import decode_rgb\n"
        "decode_rgb(np.zeros(4, np.uint8), 0, 4, np.zeros((2, 2, 3), np.uint8), 2, 2, 1)\n"
        "sig = decode_rgb.signatures[0]\n"
        "print(decode_rgb.stats.cache_hits[sig], decode_rgb.stats.cache_misses[sig])\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    hits, misses = (int(x) for x in runs[1].stdout.split())
    assert (hits, misses) == (1, 0), [r.stdout + r.stderr for r in runs]
    assert "cannot cache" not in runs[0].stderr + runs[1].stderr


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b) ** 2)
    return float(10 * np.log10(255**2 / mse))


@pytest.mark.parametrize(
    "shape", [(3, 40, 56), (40, 56, 3), (1, 40, 56), (40, 56, 1), (40, 56)], ids=str
)
@pytest.mark.parametrize("quality", [75, 90, 95])
def test_round_trip_within_jpeg_tolerance_in_every_layout(shape, quality) -> None:
    """Encode as the writer does, decode as the loader does: the stored layout comes back,
    within what the quality promises (PSNR against the original, and a bound on the mean)."""
    rgb = photo(40, 56, seed=quality)
    gray = rgb[..., 1]
    axes = jpeg_axes(shape)
    image = {
        (3, 40, 56): np.moveaxis(rgb, -1, 0),
        (40, 56, 3): rgb,
        (1, 40, 56): gray[None],
        (40, 56, 1): gray[..., None],
        (40, 56): gray,
    }[shape].copy()
    jpeg = encode_jpeg(image, axes, quality)
    assert len(jpeg) < image.nbytes
    out = np.zeros(shape, np.uint8)
    src = np.concatenate([np.zeros(5, np.uint8), jpeg])
    first = CHW if axes == "chw" else HWC
    channels = 1 if len(shape) == 2 else shape[0 if axes == "chw" else 2]
    view = out.reshape(40, 56, 1) if len(shape) == 2 else out
    assert decode_image(src, 5, len(jpeg), view, first, channels) == 0
    least = {75: 27.0, 90: 29.0, 95: 30.0}[quality]  # RGB here: 28.8, 30.8, 31.5 (OpenCV)
    assert psnr(out, image) > least, psnr(out, image)
    # the layout is right: each channel of the output matches its own channel of the input
    if channels == 3:
        axis = 0 if axes == "chw" else 2
        for c in range(3):
            mine = np.take(out, c, axis=axis).astype(int)
            others = [np.take(image, k, axis=axis) for k in range(3)]
            errors = [np.abs(mine - o).mean() for o in others]
            assert int(np.argmin(errors)) == c, errors


@pytest.mark.parametrize(
    ("shape", "dtype", "needle"),
    [
        ((3, 8, 8), "float32", "JPEG stores uint8 images, got float32"),
        ((2, 8, 8), "uint8", r"with C = 1 or 3, got \[2, 8, 8\]"),
        ((8, 8, 4), "uint8", r"got \[8, 8, 4\]"),
        ((2, 3, 8, 8), "uint8", r"got \[2, 3, 8, 8\]"),
        ((64,), "uint8", r"got \[64\]"),
    ],
)
def test_what_jpeg_cannot_hold_is_refused(shape, dtype, needle) -> None:
    """The spec refuses it; the writer adds the file's name (tests/test_jpeg_storage.py)."""
    with pytest.raises(ValueError, match=needle):
        ArraySpec(shape, dtype, jpeg=Jpeg(90))


def test_a_jpeg_of_another_size_is_refused_not_decoded_at_another_scale() -> None:
    """imdecode takes the size from the JPEG's header and never checks it against the box:
    decode_image compares the frame header with the output's size first."""
    from ffcv_pairs.kernels.jpeg import header_size

    image = np.random.default_rng(0).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    jpeg = encode_jpeg(image, "hwc", 90)
    assert header_size(jpeg, 0, len(jpeg)) == (16, 24)
    out = np.empty((16, 24, 3), dtype=np.uint8)
    assert decode_image(jpeg, 0, len(jpeg), out, HWC, 3) == 0
    small = np.empty((8, 12, 3), dtype=np.uint8)  # a 1/2 decode would fit: refused
    assert decode_image(jpeg, 0, len(jpeg), small, HWC, 3) == -1
    assert header_size(jpeg[:20], 0, 20) == (-1, -1)  # cut before the frame header
    assert header_size(jpeg, 1, len(jpeg) - 1) == (-1, -1)  # not at a start-of-image
