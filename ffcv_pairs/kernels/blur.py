"""Gaussian blur of one image (torchvision's ``gaussian_blur``), an ``apply(image, params,
tag)`` run by the drawn-op driver (:mod:`.drawn_driver`); conventions as in :mod:`.tones`.

The kernel of size ``k`` (odd) is ``exp(-x**2 / (2 * sigma**2))`` for ``x`` in ``-(k - 1) / 2
.. (k - 1) / 2``, normalised to sum 1; it is applied along the rows, then along the columns
(separable: the same as torchvision's 2-d kernel, their outer product), each channel apart;
the two taps of one weight are added before they are weighted.
Pixels beyond the border are the image mirrored about its edge pixel, which is not repeated
(torch's and OpenCV's ``reflect``/``BORDER_REFLECT_101``), repeatedly where the kernel is wider
than the image. Arithmetic in float32, as torchvision's; uint8 results rounded half up.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = ["gaussian_blur", "gaussian_weights", "mirror"]


@nb.njit(cache=True, nogil=True)
def gaussian_weights(sigma, size):  # pragma: no cover - JIT
    """The normalised 1-d kernel of ``size`` taps, as float32."""
    r = size // 2
    w = np.empty(size, np.float64)
    for k in range(size):
        x = (k - r) / sigma
        w[k] = math.exp(-0.5 * x * x)
    return (w / w.sum()).astype(np.float32)


@nb.njit(cache=True, nogil=True)
def mirror(i, n):  # pragma: no cover - JIT
    """Index ``i`` of a line of ``n`` pixels mirrored about its ends (``-1`` is ``1``, ``n``
    is ``n - 2``), for any ``i``."""
    if n == 1:
        return 0
    period = 2 * n - 2
    i = i % period
    return i if i < n else period - i


@nb.njit(cache=True, nogil=True)
def _along_rows(plane, rows, w, pixel):  # pragma: no cover - JIT
    """``rows[y]``: row ``y`` of ``plane`` (``(height, width * pixel)``) filtered by ``w``,
    whose taps lie ``pixel`` values apart."""
    height, row = plane.shape
    width, size = row // pixel, len(w)
    r = size // 2
    padded = np.empty((width + 2 * r) * pixel, np.float32)
    inner = padded[r * pixel : r * pixel + row]
    for y in range(height):
        src = plane[y]
        for j in range(row):  # from 0: numba's wraparound check of an offset index stops LLVM
            inner[j] = src[j]
        for x in range(-r, 0):  # the mirrored borders
            for q in range(pixel):
                padded[(x + r) * pixel + q] = plane[y, mirror(x, width) * pixel + q]
                far = width + r + x
                padded[(far + r) * pixel + q] = plane[y, mirror(far, width) * pixel + q]
        out, centre = rows[y], padded[r * pixel : r * pixel + row]
        for j in range(row):
            out[j] = w[r] * centre[j]
        for k in range(r):  # slices: LLVM vectorises them (an offset index: 3x slower)
            near = padded[k * pixel : k * pixel + row]
            far = padded[(size - 1 - k) * pixel : (size - 1 - k) * pixel + row]
            wk = w[k]
            for j in range(row):
                out[j] += wk * (near[j] + far[j])


@nb.njit(cache=True, nogil=True)
def _along_columns(rows, plane, w, low, high, rounds):  # pragma: no cover - JIT
    """``plane``: the columns of ``rows`` filtered by ``w``, finished."""
    height, row = rows.shape
    size = len(w)
    r = size // 2
    acc = np.empty(row, np.float32)
    half = np.float32(0.5)
    for y in range(height):
        centre, out = rows[y], plane[y]
        for j in range(row):
            acc[j] = w[r] * centre[j]
        for k in range(r):
            near, far = rows[mirror(y + k - r, height)], rows[mirror(y + r - k, height)]
            wk = w[k]
            for j in range(row):
                acc[j] += wk * (near[j] + far[j])
        if rounds:  # np.floor stays a float32 vector op (math.floor: an int64 a value)
            for j in range(row):
                out[j] = min(max(np.floor(acc[j] + half), low), high)
        else:
            for j in range(row):
                out[j] = min(max(acc[j], low), high)


@nb.njit(cache=True, nogil=True)
def gaussian_blur(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, sigma, size, low, high, rounds)``. See the module docstring."""
    if params[0] == 0.0:
        return
    w = gaussian_weights(params[1], int(params[2]))
    low, high, rounds = np.float32(params[-3]), np.float32(params[-2]), params[-1] != 0.0
    planes, height, width, pixel = image.shape
    rows = np.empty((height, width * pixel), np.float32)
    for p in range(planes):
        plane = image[p].reshape(height, width * pixel)
        _along_rows(plane, rows, w, pixel)
        _along_columns(rows, plane, w, low, high, rounds)
