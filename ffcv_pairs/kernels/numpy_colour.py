"""A numpy stand-in of the colour jitter: the bytes of :func:`~.colour.color_jitter` (and so of
saturation and hue alone, and of a policy's Brightness, Color and Contrast), with nothing to
compile.

The jitter's apply costs about 3 s of one core on an empty kernel cache, compiled before the
first batch of every pipeline that jitters colour (open-cd's, say). The drawn-op steps
(:func:`~ffcv_pairs.augment.photo_ops.apply_photo_steps`) run this on each image while it
compiles in the background. It takes the kernel's steps, an array at a time: the image to
float32 ``t`` once, each part in float32 in the drawn order (no fused multiply-add: the
kernel is compiled without ``fastmath``), the contrast mean from float64 sums in the
kernel's order (64 running sums, each over the values of its index modulo 64, in order:
:func:`numpy.add.accumulate` is a running sum), and one store, rounded half up and cut by
the cast as the kernel's store cuts it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["color_jitter_stand_in", "serves_color_jitter"]

_R, _G, _B = 0.2989, 0.587, 0.114  # as kernels/colour
_LANES = 64
_F = np.float32


def serves_color_jitter(shape: tuple[int, ...]) -> bool:
    """Whether :func:`color_jitter_stand_in` takes images of ``shape`` ``(planes, height,
    width, pixel)``: planes (CHW, 2-d) or one plane of interleaved channels (HWC), the
    layouts the loader hands the ops."""
    return shape[0] == 1 or shape[3] == 1


def _mean(work: np.ndarray) -> float:
    """The contrast mean of the work array ``(channels, n)``, summed as the kernel sums."""
    channels, n = work.shape
    padded = np.zeros((channels, -(-n // _LANES) * _LANES))  # + 0.0: the same sums
    padded[:, :n] = work
    lanes = np.add.accumulate(padded.reshape(channels, -1, _LANES), axis=1)[:, -1]
    total = 0.0
    for c in range(channels):
        part = 0.0
        for k in range(_LANES):
            part += float(lanes[c, k])
        total += (_R, _G, _B)[c] * part if channels == 3 else part
    return total / n if channels == 3 else total / (n * channels)


def _clamp(v: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(v, _F(0.0)), _F(1.0))


def _scale(work: np.ndarray, factor: float, mean: float) -> None:
    work[...] = _clamp(_F(factor) * work + _F((1.0 - factor) * mean))


def _saturate(work: np.ndarray, factor: float) -> None:
    r, g, b = work
    gray = _F(1.0 - factor) * (_F(_R) * r + _F(_G) * g + _F(_B) * b)
    work[...] = _clamp(_F(factor) * work + gray)


def _hue(work: np.ndarray, shift: float) -> None:
    x, y, z = work
    v, low = np.maximum(x, np.maximum(y, z)), np.minimum(x, np.minimum(y, z))
    spread = v - low
    num = np.where(v == x, y - z, np.where(v == y, z - x, x - y))
    base = np.where(v == x, _F(0.0), np.where(v == y, _F(2.0), _F(4.0)))
    h = base + num / np.where(spread > _F(0.0), spread, _F(1.0)) + _F(6.0 * shift)
    for c, n in enumerate((5.0, 3.0, 1.0)):  # R, G, B
        k = h + _F(n)
        k = k - _F(6.0) * np.floor(k * _F(1.0 / 6.0))
        work[c] = v - spread * _clamp(np.minimum(k, _F(4.0) - k))


def color_jitter_stand_in(image: np.ndarray, params: np.ndarray, tag: int) -> None:
    """:func:`~.colour.color_jitter` in numpy: its arguments (``image`` one sample
    ``(planes, height, width, pixel)``, see :func:`serves_color_jitter`), its bytes."""
    on = params[8:12]
    if not on.any():
        return
    low, high, rounds = params[-3], params[-2], params[-1] != 0.0
    planes, height, width, pixel = image.shape
    n = height * width
    channels = image.reshape(planes, n, pixel).transpose(0, 2, 1).reshape(planes * pixel, n)
    work = (channels.astype(_F) - _F(low)) * _F(1.0 / (high - low))
    mean = 0.0
    for k in range(4):
        part = int(params[k])
        if on[part] == 0.0:
            continue
        factor = params[4 + part]
        if part == 1:
            mean = _mean(work)  # of the image as the parts before it leave it
        if part <= 1:
            _scale(work, factor, mean if part == 1 else 0.0)
        elif part == 2:
            _saturate(work, factor)
        else:
            _hue(work, factor)
    value = np.minimum(np.maximum(_F(low) + _F(high - low) * work, _F(low)), _F(high))
    value = value + _F(0.5 if rounds else 0.0)
    shaped = value.reshape(planes, pixel, height, width).transpose(0, 2, 3, 1)
    image[...] = shaped.astype(image.dtype)
