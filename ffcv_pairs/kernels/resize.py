"""Random resized crop (bilinear), with the shared flips, quarter turns and translation."""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .geometry import geometry_params, inverse

__all__ = ["resized_crop"]


@nb.njit(cache=True, parallel=True, nogil=True)
def resized_crop(ids, src, dst, pixel, geo, clock, tag, is_int):  # pragma: no cover - JIT
    """Random resized crop (bilinear, align_corners=False) + flips + rot90 + translate.

    ``src``/``dst``: ``(batch, planes, H, W*pixel)`` and ``(batch, planes, oh, ow*pixel)``,
    uint8 (``is_int``: rounded half up, clipped) or float32. Samples outside the image take the
    nearest edge pixel.
    """
    height, width = src.shape[2], src.shape[3] // pixel
    oh, ow = dst.shape[2], dst.shape[3] // pixel
    for i in nb.prange(len(ids)):
        place = geometry_params(geo, clock, ids[i], tag, height, width)
        for y in range(oh):
            for x in range(ow):
                ry, rx = inverse(y, x, oh, ow, place)
                fy = min(max(place.y0 + (ry + 0.5) * place.rh / oh - 0.5, 0.0), height - 1.0)
                fx = min(max(place.x0 + (rx + 0.5) * place.rw / ow - 0.5, 0.0), width - 1.0)
                iy, ix = np.int64(math.floor(fy)), np.int64(math.floor(fx))
                iy1, ix1 = min(iy + 1, height - 1), min(ix + 1, width - 1)
                wy, wx = fy - iy, fx - ix
                for p in range(src.shape[1]):
                    for c in range(pixel):
                        v00 = np.float64(src[i, p, iy, ix * pixel + c])
                        v01 = np.float64(src[i, p, iy, ix1 * pixel + c])
                        v10 = np.float64(src[i, p, iy1, ix * pixel + c])
                        v11 = np.float64(src[i, p, iy1, ix1 * pixel + c])
                        v = (1.0 - wy) * ((1.0 - wx) * v00 + wx * v01) + wy * (
                            (1.0 - wx) * v10 + wx * v11
                        )
                        if is_int:
                            v = min(max(math.floor(v + 0.5), 0.0), 255.0)
                        dst[i, p, y, x * pixel + c] = v
