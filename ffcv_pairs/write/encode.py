"""JPEG encoding of one image field, with the encoder FFCV's ``RGBImageField`` uses
(OpenCV's ``imencode``): no new dependency.

Only uint8 images with 1 or 3 channels are JPEG material: ``(C, H, W)`` or ``(H, W, C)``
with ``C`` in (1, 3), or ``(H, W)`` (:func:`~ffcv_pairs.format.schema.jpeg_axes`; the
writer refuses anything else, naming the file). Three channels are taken as RGB (the
decoder gives RGB back, as upstream's does); one channel is encoded as a grayscale JPEG.
"""

from __future__ import annotations

import numpy as np

from ..format.schema import JpegAxes

__all__ = ["JPEG_QUALITY", "encode_jpeg"]

#: Default quality, as upstream's ``RGBImageField``.
JPEG_QUALITY = 90


def encode_jpeg(image: np.ndarray, axes: JpegAxes, quality: int = JPEG_QUALITY) -> np.ndarray:
    """The JPEG bytes (uint8, 1-d) of one uint8 image laid out as ``axes``."""
    import cv2

    if axes == "chw":
        image = np.moveaxis(image, 0, -1)
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[..., 0]
    if image.ndim == 3:
        image = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(image), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"OpenCV could not encode an image of shape {image.shape} as JPEG")
    return buf.reshape(-1)
