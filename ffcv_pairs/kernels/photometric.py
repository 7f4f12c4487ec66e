"""Brightness, contrast and gaussian noise: their definition, draws and image means.

**Definition** (per image; torchvision's ``adjust_brightness`` then
``adjust_contrast``, with one rounding at the end):

* brightness ``b`` in ``[1 - brightness, 1 + brightness]``: ``x1 = min(b * x, 255)``
  for uint8 (torchvision clamps), ``clamp(b * x, low, high)`` for floats, with
  ``(low, high)`` the augmentation's ``value_range`` (default ``(0, 1)``, torchvision's
  range for float images);
* contrast ``c`` in ``[1 - contrast, 1 + contrast]`` around the image's mean ``m`` of
  ``x1``: for 3 channels the mean of the grayscale image ``0.2989 R + 0.587 G + 0.114 B``
  (torchvision's ``rgb_to_grayscale``), otherwise the mean of all values:
  ``x2 = c * x1 + (1 - c) * m``;
* noise: ``x3 = x2 + noise_std * z`` with ``z`` from :mod:`~ffcv_pairs.kernels.noise`;
* uint8: ``clamp(floor(x3 + 1/2), 0, 255)`` (float32 arithmetic, so within 1 of that
  computed exactly, and almost always equal); floats: ``clamp(x3, low, high)``.

Without noise that is torchvision's float result too (it also clamps after
contrast, which changes nothing once the end is clamped). A float image with
values outside ``(low, high)`` is refused rather than clamped (:func:`values_outside` counts
them for the per-sample ops; see
:class:`~ffcv_pairs.augment.ops.Photometric`).

torchvision instead rounds toward zero after each op and takes the mean of the
grayscale image rounded to uint8, so its uint8 results can sit one level lower.
The uint8 kernel (one pass, vectorised) is :func:`~ffcv_pairs.kernels.pixels.finish_image`;
:func:`photometric` is the float one.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba as nb
import numpy as np

from .bytesums import clamped_sums
from .hashing import OP_BRIGHTNESS, OP_CONTRAST, OP_NOISE, sample_key, uniform
from .noise import noise_block

__all__ = [
    "LUMA",
    "ChannelPlanes",
    "PhotometricConfig",
    "PixelDraw",
    "draw_pixels",
    "image_mean",
    "photometric",
    "stored_mean",
    "values_outside",
]

LUMA = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights


class PhotometricConfig(NamedTuple):
    """The photometric ops of one pipeline; ``*_paired``: the same draw for A and B."""

    brightness: float
    brightness_paired: bool
    contrast: float
    contrast_paired: bool
    noise_std: float
    noise_paired: bool
    low: float  # float images: the range they are clamped to (value_range)
    high: float


class ChannelPlanes(NamedTuple):
    """Where the channels of one (output) image are: ``planes`` planes of ``plane_size``
    elements, each pixel ``pixel`` interleaved channels (CHW: ``(C, 1)``; HWC: ``(1, C)``)."""

    planes: int
    pixel: int
    plane_size: int


class ChannelSums(NamedTuple):
    """Integer sums of a uint8 image per channel (3 channels), or its total in ``s0``
    (any other count), as the stats record's ``s0..s2``."""

    s0: int
    s1: int
    s2: int


class PixelDraw(NamedTuple):
    """One image's photometric draw: factors, and the key of its noise stream."""

    bright: float
    contrast: float
    noise_std: float
    noise_key: np.uint64


@nb.njit(cache=True, nogil=True)
def draw_pixels(cfg, clock, sample_id, tag):  # pragma: no cover - JIT
    """The :class:`PixelDraw` of ``sample_id`` for field ``tag`` (0: A, 1: B) in epoch ``clock[1]``.

    A paired op keys its draw with tag 0 for both fields.
    """
    seed, epoch = clock[0], clock[1]
    kb = sample_key(seed, epoch, sample_id, OP_BRIGHTNESS, 0 if cfg.brightness_paired else tag)
    kc = sample_key(seed, epoch, sample_id, OP_CONTRAST, 0 if cfg.contrast_paired else tag)
    kn = sample_key(seed, epoch, sample_id, OP_NOISE, 0 if cfg.noise_paired else tag)
    b = 1.0 + cfg.brightness * (2.0 * uniform(kb, 0) - 1.0) if cfg.brightness > 0 else 1.0
    c = 1.0 + cfg.contrast * (2.0 * uniform(kc, 0) - 1.0) if cfg.contrast > 0 else 1.0
    return PixelDraw(b, c, cfg.noise_std, kn)


@nb.njit(cache=True, nogil=True)
def _threshold(bright):  # pragma: no cover - JIT
    """The smallest uint8 value ``v`` that ``min(bright * v, 255)`` clamps (256: none)."""
    if bright * 255.0 <= 255.0:
        return 256
    t = np.int64(math.floor(255.0 / bright)) + 1
    while t > 0 and bright * (t - 1) > 255.0:
        t -= 1
    while t <= 255 and bright * t <= 255.0:
        t += 1
    return t


@nb.njit(cache=True, nogil=True)
def _channel_sums(x, chans, channel, t):  # pragma: no cover - JIT
    """Over one channel of the uint8 image ``x``: ``(sum of the values below t, count of
    the values >= t)``."""
    if chans.pixel == 1:
        return clamped_sums(x[channel * chans.plane_size : (channel + 1) * chans.plane_size], t)
    low, high = np.int64(0), np.int64(0)
    for j in range(channel, chans.plane_size, chans.pixel):
        v = np.int64(x[j])
        low += v if v < t else 0
        high += 1 if v >= t else 0
    return low, high


@nb.njit(cache=True, nogil=True)
def _float_sum(x, chans, channel):  # pragma: no cover - JIT
    """The sum over one channel of the float image ``x``."""
    if chans.pixel == 1:
        seg = x[channel * chans.plane_size : (channel + 1) * chans.plane_size]
        return np.sum(seg.astype(np.float64))
    total = 0.0
    for j in range(channel, chans.plane_size, chans.pixel):
        total += np.float64(x[j])
    return total


@nb.njit(cache=True, nogil=True)
def image_mean(x, chans, bright, integer):  # pragma: no cover - JIT
    """The contrast mean ``m`` of one image ``x`` (1-d) after brightness ``bright``
    (``integer``: uint8, where brightness clamps at 255).

    For uint8 every value is summed exactly as an integer; with ``high`` the count of
    values that clamp, a channel's sum after brightness is ``bright * low + 255 * high``.
    """
    channels = chans.planes * chans.pixel
    pixels = chans.planes * chans.plane_size // channels
    if not integer:
        total = 0.0
        for k in range(channels):
            total += (LUMA[k] if channels == 3 else 1.0) * (bright * _float_sum(x, chans, k))
        return total / (pixels if channels == 3 else pixels * channels)
    t = _threshold(bright)
    if channels == 3:
        l0, h0 = _channel_sums(x, chans, 0, t)
        l1, h1 = _channel_sums(x, chans, 1, t)
        l2, h2 = _channel_sums(x, chans, 2, t)
        return _clamped_mean(ChannelSums(l0, l1, l2), ChannelSums(h0, h1, h2), chans, bright)
    lows, highs = np.int64(0), np.int64(0)
    for k in range(channels):
        low, high = _channel_sums(x, chans, k, t)
        lows, highs = lows + low, highs + high
    none = np.int64(0)
    return _clamped_mean(
        ChannelSums(lows, none, none), ChannelSums(highs, none, none), chans, bright
    )


@nb.njit(cache=True, nogil=True, inline="always")
def _clamped_mean(lows, highs, chans, bright):  # pragma: no cover - JIT
    """The contrast mean of a uint8 image from its integer sums (:class:`ChannelSums`,
    3 channels: luma weights), ``lows`` the sum of the values below the clamp and
    ``highs`` the count at or above it (each becomes 255)."""
    channels = chans.planes * chans.pixel
    pixels = chans.planes * chans.plane_size // channels
    if channels == 3:
        total = 0.0
        for k in range(3):
            total += LUMA[k] * (bright * lows[k] + 255.0 * highs[k])
        return total / pixels
    return (bright * lows.s0 + 255.0 * highs.s0) / (pixels * channels)


@nb.njit(cache=True, nogil=True)
def stored_mean(rec, chans, bright):  # pragma: no cover - JIT
    """:func:`image_mean` of a uint8 image from its stored statistics ``rec``
    (``[max, s0, s1, s2]``, :mod:`~ffcv_pairs.format.stats`, summed in ``chans``'s channel
    order when it has 3 channels), the same float64 value; -1 when a value would clamp
    (the sums then do not give the mean)."""
    if np.int64(rec[0]) >= _threshold(bright):
        return -1.0
    sums = ChannelSums(np.int64(rec[1]), np.int64(rec[2]), np.int64(rec[3]))
    none = np.int64(0)
    if chans.planes * chans.pixel != 3:  # the total sits in s0 (s1 = s2 = 0)
        sums = ChannelSums(sums.s0 + sums.s1 + sums.s2, none, none)
    return _clamped_mean(sums, ChannelSums(none, none, none), chans, bright)


@nb.njit(cache=True, parallel=True, nogil=True)
def photometric(ids, x, cfg, clock, tag, chans, table, outside):  # pragma: no cover - JIT
    """In place, float32 images ``x`` ``(batch, elements)``: the module's definition, clamped
    to ``[cfg.low, cfg.high]`` after brightness and at the end.

    ``chans``: :class:`ChannelPlanes`; ``table``: :func:`~ffcv_pairs.kernels.noise.normal_table`;
    ``outside[i]``: set to image ``i``'s ``[count of input values outside the range, their
    min, their max]`` (the caller refuses such data rather than clamp it silently).
    """
    n = x.shape[1]
    lo, hi = np.float32(cfg.low), np.float32(cfg.high)
    for i in nb.prange(len(ids)):
        d = draw_pixels(cfg, clock, ids[i], tag)
        img = x[i]
        bad, low, high = 0, np.inf, -np.inf
        for j in range(n):
            v = img[j]
            if v < lo or v > hi:
                bad += 1
                low, high = min(low, v), max(high, v)
            img[j] = min(max(np.float32(d.bright * v), lo), hi)
        outside[i, 0], outside[i, 1], outside[i, 2] = bad, low, high
        m = image_mean(img, chans, 1.0, False) if cfg.contrast > 0 else 0.0
        noise = np.zeros(n, np.float32)
        if cfg.noise_std > 0:
            noise_block(d.noise_key, 0, noise, np.float32(d.noise_std), table)
        for j in range(n):
            v = d.contrast * img[j] + (1.0 - d.contrast) * m + noise[j]
            img[j] = min(max(v, lo), hi)


@nb.njit(cache=True, parallel=True, nogil=True)
def values_outside(x, low, high, outside):  # pragma: no cover - JIT
    """``outside[i]``: ``[count, min, max]`` of the values of float32 image ``x[i]`` (``x``:
    ``(batch, elements)``) outside ``[low, high]``; ``[0, inf, -inf]`` when there are none.
    The count is one vectorised pass; the extremes, a second, only for an image with any."""
    lo, hi = np.float32(low), np.float32(high)
    for i in nb.prange(x.shape[0]):
        img = x[i]
        bad = 0
        for j in range(img.size):
            bad += (img[j] < lo) | (img[j] > hi)
        least, most = np.inf, -np.inf
        if bad:
            for j in range(img.size):
                if img[j] < lo or img[j] > hi:
                    least, most = min(least, img[j]), max(most, img[j])
        outside[i, 0], outside[i, 1], outside[i, 2] = bad, least, most
