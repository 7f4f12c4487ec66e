"""JPEG encoding of one image field, with the encoder FFCV's ``RGBImageField`` uses
(OpenCV's ``imencode``): no new dependency.

Only uint8 images with 1 or 3 channels are JPEG material: ``(C, H, W)`` or ``(H, W, C)``
with ``C`` in (1, 3), or ``(H, W)``. Anything else is refused, naming the field, its
shape and dtype. Three channels are taken as RGB (the decoder gives RGB back, as
upstream's does); one channel is encoded as a grayscale JPEG.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..format.schema import ArraySpec

__all__ = ["JPEG_QUALITY", "JpegLayout", "encode_jpeg", "jpeg_layout"]

#: Default quality, as upstream's ``RGBImageField``.
JPEG_QUALITY = 90

JpegLayout = Literal["chw", "hwc", "hw"]


def jpeg_layout(spec: ArraySpec, where: str) -> JpegLayout:
    """How an image of ``spec`` maps to a JPEG's rows, columns and channels.

    Raises:
        ValueError: naming ``where``, for anything but uint8 with 1 or 3 channels.
    """
    shape = spec.shape
    if spec.dtype != "uint8":
        raise ValueError(
            f"{where}: JPEG stores uint8 images, got {spec.describe()} (quantize floats to "
            f"uint8 first: --quantize uint8 --range LO,HI)"
        )
    if len(shape) == 2:
        return "hw"
    # The channel axis as augment.axes.image_axes finds it ("auto": the first or last axis,
    # strictly smaller than the other two), so writer and loader read one shape alike.
    if len(shape) == 3 and shape[0] in (1, 3) and shape[0] < min(shape[1:]):
        return "chw"
    if len(shape) == 3 and shape[2] in (1, 3) and shape[2] < min(shape[:2]):
        return "hwc"
    raise ValueError(
        f"{where}: JPEG stores images of shape (C, H, W), (H, W, C) or (H, W) with C = 1 or 3, "
        f"got {list(shape)}"
    )


def encode_jpeg(image: np.ndarray, layout: JpegLayout, quality: int = JPEG_QUALITY) -> np.ndarray:
    """The JPEG bytes (uint8, 1-d) of one uint8 image laid out as ``layout``."""
    import cv2

    if layout == "chw":
        image = np.moveaxis(image, 0, -1)
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[..., 0]
    if image.ndim == 3:
        image = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(image), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"OpenCV could not encode an image of shape {image.shape} as JPEG")
    return buf.reshape(-1)
