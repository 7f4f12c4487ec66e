"""The sampler's fast paths against its definition (the module docstring of kernels/warp),
byte for byte: the row-at-a-time bilinear kernel against a plain Python per-pixel
transcription on random affine, perspective and displaced matrices (every padding mode,
planes and interleaved pixels, uint8 and float32); the whole-pixel copy against the
general blend of the same matrix nudged by far less than its fixed point resolves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ffcv_pairs.kernels.geometry import PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, border
from ffcv_pairs.kernels.numpy_warp import warp_stand_in
from ffcv_pairs.kernels.warp import warp_bilinear, warp_bilinear_serial

MODES = [PAD_CONSTANT, PAD_REFLECT, PAD_EDGE]
ONE = 1 << 20


def reference(src, m, disp, size, mode, fill):
    """One sample ``src`` (planes, h, w, pixel) warped as the docstring defines it, a pixel
    at a time in Python."""
    planes, h, w, px = src.shape
    out = np.zeros((planes, *size, px), src.dtype)
    uint8 = src.dtype == np.uint8
    for y in range(size[0]):
        for x in range(size[1]):
            fx, fy = float(x), float(y)
            if disp is not None:
                fx, fy = fx + disp[y, x, 0], fy + disp[y, x, 1]
            q = m[2, 1] * fy + m[2, 2] + m[2, 0] * fx
            if not q > 0.0:
                out[:, y, x] = fill
                continue
            sx = (m[0, 1] * fy + m[0, 2] + m[0, 0] * fx) / q
            sy = (m[1, 1] * fy + m[1, 2] + m[1, 0] * fx) / q
            if not (abs(sx) < 1e9 and abs(sy) < 1e9):
                out[:, y, x] = fill
                continue
            gx, gy = math.floor(sx * ONE + 0.5), math.floor(sy * ONE + 0.5)
            x0, y0, ax, ay = gx >> 20, gy >> 20, gx & (ONE - 1), gy & (ONE - 1)
            cols = [border(x0, w, mode), border(x0 + 1, w, mode)]
            rows = [border(y0, h, mode), border(y0 + 1, h, mode)]
            for k in range(planes):
                for c in range(px):
                    v = [[fill if r < 0 or j < 0 else src[k, r, j, c] for j in cols] for r in rows]
                    if uint8:  # weights: the fractions cut to 11 bits, in 2048ths
                        wx, wy = ax >> 9, ay >> 9
                        top = (2048 - wx) * int(v[0][0]) + wx * int(v[0][1])
                        low = (2048 - wx) * int(v[1][0]) + wx * int(v[1][1])
                        out[k, y, x, c] = ((2048 - wy) * top + wy * low + (1 << 21)) >> 22
                    else:
                        fa, fb = ax / ONE, ay / ONE
                        top = (1.0 - fa) * float(v[0][0]) + fa * float(v[0][1])
                        low = (1.0 - fa) * float(v[1][0]) + fa * float(v[1][1])
                        out[k, y, x, c] = (1.0 - fb) * top + fb * low
    return out


def random_matrices(rng, n, kind, h, w):
    m = np.tile(np.eye(3), (n, 1, 1))
    m[:, :2, :2] += rng.normal(0, 0.4, (n, 2, 2))
    m[:, 0, 2], m[:, 1, 2] = rng.uniform(-0.3, 1.1, n) * w, rng.uniform(-0.3, 1.1, n) * h
    if kind == "perspective":
        m[:, 2, :2] = rng.normal(0, 0.02, (n, 2))
    if kind == "axis":  # scales (flips among them) and shifts, each axis apart
        m[:, 0, 1], m[:, 1, 0] = 0.0, -0.0
        m[:, 0, 0] *= rng.choice([-1.0, 1.0], n)
        m[:, 1, 1] *= rng.choice([-1.0, 1.0], n)
    return m


@pytest.mark.parametrize("kind", ["affine", "axis", "perspective", "displaced"])
@pytest.mark.parametrize("layout", [(3, 1), (1, 3), (1, 1)])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [(11, 13), (3, 5), (4, 26)])  # rows of 8 + 5, < 8, 3 x 8 + 2
def test_rows_are_the_definition(kind, layout, mode, size) -> None:
    rng = np.random.default_rng([len(kind), *layout, mode, *size])
    n, (h, w) = 3, (9, 12)
    planes, px = layout
    src = rng.integers(0, 256, (n, planes, h, w, px)).astype(np.uint8)
    m = random_matrices(rng, n, kind, h, w)
    disp = rng.normal(0, 1.5, (n, *size, 2)) if kind == "displaced" else np.zeros((0, *size, 2))
    for img, fill in ((src, 17.0), ((src / 255).astype(np.float32), 0.25)):
        out = np.empty((n, planes, *size, px), img.dtype)
        warp_bilinear_serial(img, out, m, disp, mode, fill, img.dtype == np.uint8)
        for i in range(n):
            ref = reference(img[i], m[i], disp[i] if len(disp) else None, size, mode, fill)
            np.testing.assert_array_equal(out[i], ref)


@pytest.mark.parametrize("planes", [2, 3, 4])
@pytest.mark.parametrize("mode", MODES)
def test_rgb_rows_of_an_affine_matrix_are_the_definition(planes, mode) -> None:
    """uint8 images of 2 to 4 planes under an affine matrix, rows of 16 pixels and more: both
    kernels blend them from one word per source pixel (``kernels/warp_quads``), sixteen pixels
    a step (the last step overlapping the one before), the pixels with a tap outside by the
    edge path; against the definition."""
    rng = np.random.default_rng([planes, mode])
    n, (h, w) = 4, (13, 21)
    src = rng.integers(0, 256, (n, planes, h, w, 1)).astype(np.uint8)
    m = random_matrices(rng, n, "affine", h, w)
    turn = rng.uniform(-np.pi, np.pi)  # sample 0: a rotation about the centre, as rotate= does
    c, t = np.cos(turn), np.sin(turn)
    m[0, :2] = [[c, -t, (w - 1) / 2 - c * 8 + t * 3], [t, c, (h - 1) / 2 - t * 8 - c * 3]]
    for size in ((5, 16), (7, 35)):
        none = np.zeros((0, *size, 2))
        for warp in (warp_bilinear, warp_bilinear_serial):
            out = np.zeros((n, planes, *size, 1), np.uint8)
            warp(src, out, m, none, mode, 9.0, True)
            for i in range(n):
                ref = reference(src[i], m[i], None, size, mode, 9.0)
                np.testing.assert_array_equal(out[i], ref, err_msg=f"{warp.__name__} {size} {i}")


def whole_moves(rng, n, h, w, size):
    """Flips, quarter turns, transposes and whole shifts, some far outside the image."""
    lin = np.array(
        [
            [[1, 0], [0, 1]],
            [[-1, 0], [0, 1]],
            [[1, 0], [0, -1]],
            [[0, 1], [1, 0]],
            [[0, -1], [1, 0]],
            [[0, 1], [-1, 0]],
            [[-1, 0], [0, -1]],
            [[0, -1], [-1, 0]],
        ]
    )
    m = np.tile(np.eye(3), (n, 1, 1))
    m[:, :2, :2] = lin[rng.integers(0, len(lin), n)]
    m[:, 0, 2] = rng.integers(-size[1] - 3, w + size[1] + 3, n)
    m[:, 1, 2] = rng.integers(-size[0] - 3, h + size[0] + 3, n)
    m[0, :2, :2], m[0, :2, 2] = np.eye(2), (-(size[1] - w) // 2, -(size[0] - h) // 2)  # a pad
    return m


@pytest.mark.parametrize("layout", [(3, 1), (1, 3)])
@pytest.mark.parametrize("mode", MODES)
def test_whole_pixel_moves_copy_what_the_blend_gives(layout, mode) -> None:
    """A uint8 sample whose matrix moves whole pixels is copied, not blended: the same bytes
    as the blend of the matrix nudged by 1e-9 pixel (not whole, the same fixed point)."""
    rng = np.random.default_rng([mode, *layout])
    n, (h, w), size = 40, (7, 10), (12, 9)
    src = rng.integers(0, 256, (n, layout[0], h, w, layout[1])).astype(np.uint8)
    m = whole_moves(rng, n, h, w, size)
    nudged = m.copy()
    nudged[:, :2, 2] += 1e-9
    none = np.zeros((0, *size, 2))
    for fill in (0.0, 200.0):
        got, want = (np.empty((n, layout[0], *size, layout[1]), np.uint8) for _ in range(2))
        warp_bilinear(src, got, m, none, mode, fill, True)
        warp_bilinear(src, want, nudged, none, mode, fill, True)
        np.testing.assert_array_equal(got, want)
        ref = reference(src[0], m[0], None, size, mode, fill)
        np.testing.assert_array_equal(got[0], ref)


@pytest.mark.parametrize("kind", ["affine", "perspective", "displaced", "whole", "far"])
@pytest.mark.parametrize("layout", [(3, 1), (1, 3), (2, 2)])
@pytest.mark.parametrize("mode", MODES)
def test_the_numpy_stand_in_writes_the_kernels_bytes(kind, layout, mode) -> None:
    """:func:`warp_stand_in` (what serves while the warp compiles) against the serial kernel,
    byte for byte: random matrices of each kind, a point behind the horizon or absurdly far
    (the fill), images of one row, one column or one pixel, fills with a fraction (cut by
    the store), uint8 and float32."""
    rng = np.random.default_rng([len(kind), *layout, mode])
    planes, px = layout
    for h, w in ((9, 12), (1, 7), (6, 1), (1, 1), (2, 2)):
        n, size = 4, (int(rng.integers(1, 14)), int(rng.integers(1, 30)))
        src = rng.integers(0, 256, (n, planes, h, w, px)).astype(np.uint8)
        m = (
            whole_moves(rng, n, h, w, size)
            if kind == "whole"
            else random_matrices(rng, n, kind, h, w)
        )
        if kind == "far":
            m[:, 0, 2] = [2e9, -3e9, 0.0, 1e9][:n]
            m[2, 1, 1] = 5e8  # far at the bottom rows only
        if kind == "perspective":
            m[0, 2, :2] = (0.3, 0.2)  # most of it behind the horizon
        disp = rng.normal(0, 1.5, (n, *size, 2)) if kind == "displaced" else np.zeros((0, *size, 2))
        for img, fill in ((src, 127.5), (src, 0.0), ((src / 7).astype(np.float32), 0.3)):
            got, want = (np.zeros((n, planes, *size, px), img.dtype) for _ in range(2))
            warp_stand_in(img, got, m, disp, mode, fill, img.dtype == np.uint8)
            warp_bilinear_serial(img, want, m, disp, mode, fill, img.dtype == np.uint8)
            assert got.tobytes() == want.tobytes(), (kind, h, w, img.dtype, fill)


def test_every_path_takes_the_definitions_order_of_operations() -> None:
    """A matrix where ``(m00 x + m01 y) + m02`` and ``(m01 y + m02) + m00 x`` differ in the
    last bit at output pixel (2, 6), on either side of a tie: the definition's order gives
    4.5 - 2**-21 pixel, exactly 4.5 in fixed point, the other one a fixed point less. The
    affine row path, the general path (a displacement of zeros), the numpy stand-in and the
    nearest sampler all read the definition's point: a blend of 0 and 255 at 1/2 is 128
    (127 a point less), and the nearest pixel is column 5 (4 a point less)."""
    from ffcv_pairs.kernels.warp_nearest import warp_nearest_serial

    c = -15.100000476837158
    m = np.array([[[2.4, 2.6, c], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    assert (2.6 * 2 + c) + 2.4 * 6 != (2.4 * 6 + 2.6 * 2) + c
    src = np.zeros((1, 1, 8, 30, 1), np.uint8)
    src[0, 0, :, 5:] = 255  # a step between columns 4 and 5
    size = (4, 8)
    none = np.zeros((0, *size, 2))
    ref = reference(src[0], m[0], None, size, PAD_CONSTANT, 0.0)
    assert ref[0, 2, 6, 0] == 128
    for disp in (none, np.zeros((1, *size, 2))):
        for warp in (warp_bilinear_serial, warp_stand_in):
            out = np.empty((1, 1, *size, 1), np.uint8)
            warp(src, out, m, disp, PAD_CONSTANT, 0.0, True)
            np.testing.assert_array_equal(out[0], ref)
    near = np.empty((1, 1, *size, 1), np.uint8)
    warp_nearest_serial(src, near, m, none, PAD_CONSTANT, np.zeros(1, np.uint8))
    assert near[0, 0, 2, 6, 0] == 255
