"""The matrix geometry's ops at fixed parameters against kornia 0.9 (not ours): each op's
matrix (augment/warp_draws) applied by the sampler (kernels/warp) equals kornia's warp of the
same op built by kornia's own functions. uint8 results within 1 of kornia's float result
rounded half up (a blend that lands on a half may round either way after float error), and
equal in more than 98% of pixels; float32 within 1e-4 (float32 against float64 arithmetic).
The elastic displacement's smoothing against kornia's gaussian blur with reflection; the
quarter turns, flips, transpose and d4 byte for byte against numpy."""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest
import torch
from kornia.filters import gaussian_blur2d
from kornia.geometry.transform import (
    elastic_transform2d,
    get_affine_matrix2d,
    get_perspective_transform,
    resize,
    rotate,
    warp_affine,
    warp_perspective,
)

from ffcv_pairs.augment.warp_draws import (
    affine_map,
    matrices,
    perspective_map,
    resize_map,
    rotation_map,
)
from ffcv_pairs.kernels.displacement import elastic_field, gaussian_taps
from ffcv_pairs.kernels.geometry import PAD_CONSTANT, PAD_EDGE, PAD_REFLECT
from ffcv_pairs.kernels.warp import warp_bilinear, warp_bilinear_serial
from ffcv_pairs.kernels.warp_nearest import warp_nearest

H, W = 23, 31


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    """One smooth-ish uint8 CHW image (3, H, W): noise plus ramps."""
    rng = np.random.default_rng(4)
    y, x = np.mgrid[0:H, 0:W]
    base = np.stack([8 * x, 10 * y, 4 * (x + y)]) + rng.integers(0, 60, (3, H, W))
    return np.clip(base, 0, 255).astype(np.uint8)


def ours(img: np.ndarray, m: np.ndarray, size=(H, W), mode=PAD_CONSTANT, fill=0.0, disp=None):
    """``img`` (C, H, W) of uint8 or float32 through the sampler with matrix ``m``."""
    c = img.shape[0]
    src = np.ascontiguousarray(img).reshape(1, c, img.shape[1], img.shape[2], 1)
    out = np.empty((1, c, *size, 1), img.dtype)
    disp = np.zeros((0, *size, 2)) if disp is None else disp
    warp_bilinear(src, out, m.reshape(1, 3, 3), disp, mode, fill, img.dtype == np.uint8)
    return out[0, :, :, :, 0]


def tensor(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(img.astype(np.float64))[None]


def close(got: np.ndarray, ref: torch.Tensor) -> None:
    ref_np = ref[0].numpy()
    if got.dtype == np.uint8:
        diff = np.abs(
            got.astype(np.int64) - np.clip(np.floor(ref_np + 0.5), 0, 255).astype(np.int64)
        )
        assert diff.max() <= 1, (diff.max(), np.argwhere(diff > 1)[:5])
        assert (diff == 0).mean() > 0.98, (diff == 0).mean()  # rounding differs at ties only
    else:
        np.testing.assert_allclose(got, ref_np, atol=1e-4)


def dtypes(img: np.ndarray) -> list[np.ndarray]:
    return [img, (img / 255).astype(np.float32)]


@pytest.mark.parametrize("degrees", [0.0, 17.5, -63.0, 90.0, 180.0])
def test_rotate_is_kornias_rotate(image: np.ndarray, degrees: float) -> None:
    for img in dtypes(image):
        m = rotation_map(np.array([degrees]), (W - 1) / 2, (H - 1) / 2)[0]
        ref = rotate(tensor(img), torch.tensor([degrees], dtype=torch.float64), align_corners=True)
        close(ours(img, m), ref)


AFFINES = [
    (25.0, (3.0, -2.0), 1.2, (10.0, 0.0)),
    (-40.0, (0.0, 4.0), 0.7, (-15.0, 20.0)),
    (0.0, (-5.0, 0.0), 1.0, (0.0, -30.0)),
]


@pytest.mark.parametrize("degrees, shift, scale, shear", AFFINES)
def test_affine_is_kornias_affine_matrix(image, degrees, shift, scale, shear) -> None:
    """torchvision's affine (clockwise angle, shift, scale, shear about the centre), as
    kornia's ``get_affine_matrix2d`` composes it (its documented torchvision convention)."""
    centre = ((W - 1) / 2, (H - 1) / 2)
    m = affine_map(
        np.array([degrees]),
        (np.array([shift[0]]), np.array([shift[1]])),
        np.array([scale]),
        (np.array([shear[0]]), np.array([shear[1]])),
        centre,
    )[0]
    forward = get_affine_matrix2d(
        torch.tensor([shift], dtype=torch.float64),
        torch.tensor([centre], dtype=torch.float64),
        torch.tensor([[scale, scale]], dtype=torch.float64),
        torch.tensor([degrees], dtype=torch.float64),
        torch.tensor([math.radians(shear[0])], dtype=torch.float64),
        torch.tensor([math.radians(shear[1])], dtype=torch.float64),
    )
    for img in dtypes(image):
        ref = warp_affine(tensor(img), forward[:, :2], (H, W), align_corners=True)
        close(ours(img, m), ref)


def test_perspective_is_kornias_homography_on_pixel_corners(image: np.ndarray) -> None:
    """torchvision's perspective: the homography of the corners, applied to pixel corners
    (centres at ``i + 1/2``)."""
    start = np.array([[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]], np.float64)
    end = np.array([[3, 2], [W - 5, 1], [W - 2, H - 4], [1, H - 2]], np.float64)
    m = perspective_map(start[None], end[None])[0]
    p = get_perspective_transform(torch.from_numpy(start)[None], torch.from_numpy(end)[None])
    shift = torch.tensor([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]], dtype=torch.float64)
    back = torch.tensor([[1, 0, -0.5], [0, 1, -0.5], [0, 0, 1]], dtype=torch.float64)
    for img in dtypes(image):
        ref = warp_perspective(tensor(img), back @ p @ shift, (H, W), align_corners=True)
        close(ours(img, m), ref)


@pytest.mark.parametrize("size", [(46, 62), (30, 40), (17, 20), (12, 31)])
def test_resize_is_kornias_bilinear_resize(image: np.ndarray, size: tuple[int, int]) -> None:
    """Half-pixel centres, no antialiasing (torchvision's tensor resize without it, OpenCV's
    INTER_LINEAR): at most a 2x downscale, where a bilinear resize reads every pixel. The
    edge under ``edge`` padding is the clamp F.interpolate does."""
    m = resize_map(1, H, W, *size)[0]
    for img in dtypes(image):
        ref = resize(tensor(img), size, interpolation="bilinear", align_corners=False)
        close(ours(img, m, size, PAD_EDGE), ref)


def test_constant_fill_blends_at_the_edge_as_kornias_fill_mode(image: np.ndarray) -> None:
    m = rotation_map(np.array([33.0]), (W - 1) / 2, (H - 1) / 2)[0]
    forward = torch.from_numpy(np.linalg.inv(m))[None]
    for img, fill in zip(dtypes(image), (200.0, 0.75)):
        ref = warp_affine(
            tensor(img),
            forward[:, :2],
            (H, W),
            align_corners=True,
            padding_mode="fill",
            fill_value=torch.full((3,), fill, dtype=torch.float64),
        )
        close(ours(img, m, fill=fill), ref)


def test_edge_padding_is_kornias_border_mode(image: np.ndarray) -> None:
    m = (
        rotation_map(np.array([-21.0]), (W - 1) / 2, (H - 1) / 2)[0]
        @ matrices(1, 1.3, 0, 4, 0, 1.3, -6)[0]
    )
    forward = torch.from_numpy(np.linalg.inv(m))[None]
    for img in dtypes(image):
        ref = warp_affine(
            tensor(img), forward[:, :2], (H, W), align_corners=True, padding_mode="border"
        )
        close(ours(img, m, mode=PAD_EDGE), ref)


def test_reflect_padding_is_numpys_reflect_then_the_warp(image: np.ndarray) -> None:
    """``reflect`` mirrors about the edge pixel (numpy's ``reflect``, the crops' padding): the
    image padded by numpy, then warped by kornia with the matrix shifted by the pad."""
    pad = 40
    m = (
        rotation_map(np.array([50.0]), (W - 1) / 2, (H - 1) / 2)[0]
        @ matrices(1, 1.5, 0, -3, 0, 1.5, -5)[0]
    )
    into_padded = matrices(1, 1, 0, pad, 0, 1, pad)[0] @ m
    forward = torch.from_numpy(np.linalg.inv(into_padded))[None]
    for img in dtypes(image):
        padded = np.pad(img, ((0, 0), (pad, pad), (pad, pad)), mode="reflect")
        ref = warp_affine(tensor(padded), forward[:, :2], (H, W), align_corners=True)
        close(ours(img, m, mode=PAD_REFLECT), ref)


def test_elastic_displacement_is_kornias_elastic_warp(image: np.ndarray) -> None:
    """The sampler with a displacement field (pixels) equals kornia's ``elastic_transform2d``
    of the same field in its normalised units (kernel size 1: no smoothing of its own)."""
    rng = np.random.default_rng(1)
    disp = rng.uniform(-2.5, 2.5, (1, H, W, 2))
    norm = np.stack([disp[0, ..., 0] * 2 / (W - 1), disp[0, ..., 1] * 2 / (H - 1)])[None]
    m = np.eye(3)
    for img in dtypes(image):
        ref = elastic_transform2d(
            tensor(img), torch.from_numpy(norm), (1, 1), (1.0, 1.0), (1.0, 1.0), align_corners=True
        )
        close(ours(img, m, disp=disp), ref)


@pytest.mark.parametrize("sigma", [0.0, 1.0, 2.5])
def test_elastic_field_is_smoothed_uniform_noise_times_torchvisions_gain(sigma: float) -> None:
    """The field of one sample: its uniforms (from the hash, as documented) smoothed by
    kornia's gaussian blur with reflection over ``int(8 sigma + 1)`` taps (odd), times the
    gains."""
    from ffcv_pairs.kernels.hashing import sample_key, uniform

    oh, ow, alpha = 20, 26, 30.0
    clock, ids = np.array([3, 1], np.int64), np.array([11], np.int64)
    gains = np.array([alpha * ow / (2 * oh), alpha * oh / (2 * ow)])
    out = np.empty((1, oh, ow, 2))
    elastic_field(ids, clock, 57, 0, 1.0, sigma, gains, out)
    key = sample_key(3, 1, 11, 57, 0)
    u = np.array([uniform(key, 1 + k) for k in range(2 * oh * ow)]).reshape(2, oh, ow)
    noise = torch.from_numpy(2 * u - 1)[None]
    if sigma > 0:
        size = int(8 * sigma + 1) | 1
        noise = gaussian_blur2d(noise, (size, size), (sigma, sigma), border_type="reflect")
    ref = noise[0].numpy().transpose(1, 2, 0) * gains
    np.testing.assert_allclose(out[0], ref, atol=1e-9)
    assert len(gaussian_taps(sigma)) == (1 if sigma == 0 else int(8 * sigma + 1) | 1)


def test_elastic_not_drawn_is_no_displacement() -> None:
    out = np.ones((4, 5, 6, 2))
    elastic_field(np.arange(4, dtype=np.int64), np.array([0, 0]), 57, 0, 0.0, 1.0, np.ones(2), out)
    assert not out.any()


def _turned(img: np.ndarray, m: np.ndarray) -> np.ndarray:
    return ours(img, m, (img.shape[1], img.shape[2]))


def test_integer_moves_are_numpys_byte_for_byte() -> None:
    """Flips, quarter turns and the transpose as matrices move whole pixels: numpy's flip,
    rot90 (counter-clockwise as displayed) and transpose, exactly."""
    from ffcv_pairs.augment.warp_draws import _TRANSPOSE, _turns

    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (2, 9, 9), dtype=np.uint8)
    n = 9
    cases = {
        "hflip": (matrices(1, -1, 0, n - 1, 0, 1, 0)[0], img[:, :, ::-1]),
        "vflip": (matrices(1, 1, 0, 0, 0, -1, n - 1)[0], img[:, ::-1]),
        "transpose": (_TRANSPOSE, img.transpose(0, 2, 1)),
    }
    for k in range(4):
        cases[f"turn {k}"] = (_turns(1, np.array([k]), n, n)[0], np.rot90(img, k, axes=(1, 2)))
    for name, (m, expected) in cases.items():
        np.testing.assert_array_equal(_turned(img, m), expected, err_msg=name)


def test_nearest_copies_the_pixel_bilinear_centres_on() -> None:
    """A mask of any dtype, as bytes: the pixel nearest to the sample point, or the fill."""
    y, x = np.mgrid[0:H, 0:W]
    index = (y * W + x).astype(np.int32)
    m = rotation_map(np.array([90.0]), (W - 1) / 2, (W - 1) / 2)[0]  # about a square's centre
    src = index.view(np.uint8).reshape(1, 1, H, W, 4)
    out = np.empty((1, 1, W, W, 4), np.uint8)
    fill = np.array([-1], np.int32).view(np.uint8)
    warp_nearest(src, out, m[None], np.zeros((0, W, W, 2)), PAD_CONSTANT, fill)
    got = out.view(np.int32).reshape(W, W)
    sq = np.full((W, W), -1, np.int32)
    sq[:H] = index
    np.testing.assert_array_equal(got, np.rot90(sq, 1))


def test_thread_counts_give_the_same_bytes(image: np.ndarray) -> None:
    m = np.stack([rotation_map(np.array([a]), 15, 11)[0] for a in np.linspace(-80, 80, 16)])
    src = np.repeat(image[None, :, :, :, None], 16, axis=0)
    outs = []
    before = nb.get_num_threads()
    for threads in (1, 2):
        nb.set_num_threads(threads)
        out = np.empty_like(src)
        warp_bilinear(src, out, m, np.zeros((0, H, W, 2)), PAD_REFLECT, 0.0, True)
        outs.append(out)
    nb.set_num_threads(before)
    np.testing.assert_array_equal(outs[0], outs[1])
    serial = np.empty_like(src)  # the twin that serves while the parallel kernel compiles
    warp_bilinear_serial(src, serial, m, np.zeros((0, H, W, 2)), PAD_REFLECT, 0.0, True)
    np.testing.assert_array_equal(serial, outs[0])


def test_elastic_field_sums_each_value_in_tap_order() -> None:
    """The field bit for bit: the noise smoothed along rows, then columns, each value summed
    as ``0 + taps[0] * v[0] + taps[1] * v[1] + ...`` in tap order (reflect at the edges), in
    Python floats: the kernel's vectorised loops keep every value's sum."""
    from ffcv_pairs.kernels.geometry import PAD_REFLECT, border
    from ffcv_pairs.kernels.hashing import sample_key, uniform

    oh, ow, sigma = 9, 23, 1.5
    gains = np.array([1.25, -0.75])
    out = np.empty((1, oh, ow, 2))
    elastic_field(
        np.array([4], np.int64), np.array([2, 7], np.int64), 57, 0, 1.0, sigma, gains, out
    )
    key, taps = np.uint64(sample_key(2, 7, 4, 57, 0)), gaussian_taps(sigma)
    r = len(taps) // 2
    for c in range(2):
        noise = [
            [2.0 * uniform(key, 1 + (c * oh + y) * ow + x) - 1.0 for x in range(ow)]
            for y in range(oh)
        ]
        rows = [[0.0] * ow for _ in range(oh)]
        for y in range(oh):
            for x in range(ow):
                for k, t in enumerate(taps):
                    rows[y][x] += t * noise[y][border(x + k - r, ow, PAD_REFLECT)]
        for y in range(oh):
            for x in range(ow):
                acc = 0.0
                for k, t in enumerate(taps):
                    acc += t * rows[border(y + k - r, oh, PAD_REFLECT)][x]
                assert out[0, y, x, c] == acc * gains[c], (c, y, x)
