"""The colour jitter's paths give the bytes of its general definition (kernels/colour.py):
the uint8 path (a store and parts without the clamps no value can reach) equals the general
path of the same values, floored; the contrast with no part before it (the image loaded
twice) equals the contrast after a part that changes nothing (a whole-image array); the hue's
last step, run past the block into padding, equals :func:`hue_pixel` on every pixel. Images
span blocks and end in a part block, in both layouts (the RGB-interleaved loops and the
planar ones)."""

from __future__ import annotations

import numpy as np
import pytest
from drawn_ops import apply_in_layout

from ffcv_pairs.kernels import colour, hue_lanes

RNG = np.random.default_rng(46)
BIG8 = RNG.integers(0, 256, (3, 41, 37), dtype=np.uint8)  # 1517 pixels: 2 blocks, 13 past 16
SMALL8 = RNG.integers(0, 256, (3, 3, 5), dtype=np.uint8)
U8 = (0.0, 255.0, 1.0)
ORDERS = [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1), (1, 3, 0, 2)]


def _row(order: tuple, factors: tuple, on: tuple) -> tuple:
    return (*order, *factors, *on)


@pytest.mark.parametrize("axes", ["chw", "hwc"])
@pytest.mark.parametrize("order", ORDERS)
def test_uint8_store_is_the_general_store_floored(axes: str, order: tuple) -> None:
    """uint8 ``[0, 255]`` stores ``255 t + 1/2`` cut by an int32 cast, and its parts skip the
    bounds no value can pass (factors on either side of 1, and 0 and 1); a float32 image of
    the same values (rounds on) goes the general way, clamped, ``+ 1/2`` kept as a float."""
    for image in (BIG8, SMALL8):
        for factors in ((1.2, 0.6, 1.5, -0.05), (0.8, 1.5, 0.5, 0.5), (0.0, 0.0, 2.0, 0.1),
                        (1.0, 1.0, 1.0, 0.0)):  # fmt: skip
            head = _row(order, factors, (1, 1, 1, 1))
            ours = apply_in_layout(colour.color_jitter, image, head, U8, axes)
            general = apply_in_layout(colour.color_jitter, image.astype(np.float32), head, U8, axes)
            assert general.min() >= 0.5 and general.max() <= 255.5
            assert ours.tobytes() == np.floor(general).astype(np.uint8).tobytes()


@pytest.mark.parametrize("axes", ["chw", "hwc"])
@pytest.mark.parametrize("on", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_contrast_first_is_contrast_after_a_part_that_changes_nothing(axes, on) -> None:
    """Brightness 1 before contrast keeps every value: the same bytes whether it is on (the
    whole-image array) or off (the image loaded twice), saturation and hue ``on`` after."""
    for image in (BIG8, SMALL8):
        factors = (1.0, 0.55, 1.4, 0.2)
        first = apply_in_layout(
            colour.color_jitter, image, _row((0, 1, 2, 3), factors, (0, 1, *on)), U8, axes
        )
        after = apply_in_layout(
            colour.color_jitter, image, _row((0, 1, 2, 3), factors, (1, 1, *on)), U8, axes
        )
        assert first.tobytes() == after.tobytes()


@pytest.mark.parametrize("axes", ["chw", "hwc"])
@pytest.mark.parametrize("shape", [(3, 41, 37), (3, 3, 5), (3, 32, 32)])
def test_hue_is_hue_pixel_on_every_pixel(axes: str, shape: tuple) -> None:
    """float32 ``[0, 1]`` keeps the hue's values as they are: each is :func:`hue_pixel`'s,
    the pixels of the last, padded step of each block included."""
    image = RNG.random(shape).astype(np.float32)
    shift = -0.15
    ours = apply_in_layout(
        colour.color_jitter, image, _row((0, 1, 2, 3), (1, 1, 1, shift), (0, 0, 0, 1)),
        (0.0, 1.0, 0.0), axes,
    )  # fmt: skip
    turn = np.float32(6.0 * shift)
    flat = image.reshape(3, -1)
    want = np.array([hue_lanes.hue_pixel(*px, turn) for px in flat.T], np.float32).T
    np.testing.assert_array_equal(ours.reshape(3, -1), want)
