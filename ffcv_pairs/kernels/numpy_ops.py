"""Numpy stand-ins: the same bytes as some kernels, with nothing to compile.

On an empty kernel cache the first batch used to wait for numba: a fraction of a second
for the copy of an unaugmented batch, about 12 s for the fused kernel of a flip, a padded
crop, brightness and contrast. :class:`~ffcv_pairs.kernels.stand_in.ParallelSoon` serves
those first batches from here while the kernel compiles in the background. Everything is
the kernels' own definition, step by step:

* the counter-based draws in Python integers and floats (:func:`mix64`, :func:`uniform`,
  IEEE doubles like the kernels': the same values);
* the geometry as an index map of each output byte into the stored image (the kernels'
  :func:`~ffcv_pairs.kernels.geometry.inverse` and ``border``; -1 for the fill);
* the contrast mean from integer sums (as :func:`~ffcv_pairs.kernels.photometric.image_mean`
  and ``stored_mean``);
* the uint8 result as :func:`~ffcv_pairs.kernels.pixels._photometric_chunk` computes it:
  ``min(k * x + offset, cap)`` in float32, where numba contracts each multiply-add into one
  fused multiply-add when the CPU has one. :func:`_fma32` rounds once, as the instruction
  does (the sum in float64 rounded to odd, then to float32).

:func:`fused_stand_in` says which pipelines it serves: a uint8 output, no noise, no resized
crop (any other pipeline waits for its kernel as before).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .geometry import PAD_CONSTANT, PAD_EDGE
from .hashing import GOLDEN, OP_BRIGHTNESS, OP_CONTRAST, OP_GEOMETRY
from .photometric import LUMA
from .pixels import OUT_UINT8

__all__ = [
    "border_indices",
    "copy_stand_in",
    "fused_stand_in",
    "mix64",
    "sample_key",
    "uniform",
]

_M64 = (1 << 64) - 1
_GOLDEN = int(GOLDEN)


def mix64(x: int) -> int:
    """:func:`~ffcv_pairs.kernels.hashing.mix64` on a Python integer."""
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def sample_key(seed: int, epoch: int, sample_id: int, op: int, tag: int) -> int:
    """:func:`~ffcv_pairs.kernels.hashing.sample_key`."""
    k = mix64((seed & _M64) ^ _GOLDEN)
    k = mix64(k ^ (epoch & _M64))
    k = mix64(k ^ (sample_id & _M64))
    return mix64(k ^ ((op << 8) & _M64) ^ tag)


def uniform(key: int, k: int) -> float:
    """:func:`~ffcv_pairs.kernels.hashing.uniform`."""
    return float(mix64(key + (k + 1) * _GOLDEN) >> 11) * (1.0 / 9007199254740992.0)


def _randint(key: int, k: int, lo: int, hi: int) -> int:
    return lo + math.floor(uniform(key, k) * float(hi - lo + 1))


def copy_stand_in(rows, ptr_a, ptr_b, mm, out_a, out_b) -> None:
    """:func:`~ffcv_pairs.kernels.decode.copy_pairs`: each sample's stored A and B whole."""
    na, nb = out_a.shape[1], out_b.shape[1]
    pa, pb = ptr_a[rows].tolist(), ptr_b[rows].tolist()
    for i in range(len(pa)):
        out_a[i] = mm[pa[i] : pa[i] + na]
        out_b[i] = mm[pb[i] : pb[i] + nb]


def _placement(geo, seed, epoch, sid, tag, height, width) -> tuple[int, ...]:
    """:func:`~ffcv_pairs.kernels.geometry.geometry_params` without a resized crop:
    ``(hflip, vflip, rot, y0, x0)``."""
    key = sample_key(seed, epoch, sid, OP_GEOMETRY, 0 if geo.paired else tag)
    hflip = 1 if uniform(key, 0) < geo.hflip else 0
    vflip = 1 if uniform(key, 1) < geo.vflip else 0
    rot = _randint(key, 2, 0, 3) if geo.rot90 else 0
    y0, x0 = 0, 0
    if geo.crop and geo.center:
        y0, x0 = (height - geo.out_h) // 2, (width - geo.out_w) // 2
    elif geo.crop:
        y0 = _randint(key, 3, -geo.pad, height + geo.pad - geo.out_h)
        x0 = _randint(key, 4, -geo.pad, width + geo.pad - geo.out_w)
    if geo.trans_y > 0:
        y0 += _randint(key, 5, -geo.trans_y, geo.trans_y)
    if geo.trans_x > 0:
        x0 += _randint(key, 6, -geo.trans_x, geo.trans_x)
    return hflip, vflip, rot, y0, x0


def border_indices(i: np.ndarray, n: int, mode: int) -> np.ndarray:
    """:func:`~ffcv_pairs.kernels.geometry.border` of an index array."""
    inside = (i >= 0) & (i < n)
    if mode == PAD_CONSTANT:
        return np.where(inside, i, -1)
    if mode == PAD_EDGE:
        return np.where(inside, i, np.where(i < 0, 0, n - 1))
    if n == 1:
        return np.zeros_like(i)
    j = np.abs(i)
    j = np.where(j >= n, 2 * n - 2 - j, j)
    period = 2 * n - 2
    k = np.abs(j) % period
    k = np.where(k >= n, period - k, k)
    return np.where(inside, i, np.where((j >= 0) & (j < n), j, k))


def _index_map(geo, image, place) -> np.ndarray:
    """For each byte of the moved image (planes, rows, columns, pixel bytes), the byte of
    the stored image it copies, or -1 (the fill): :func:`~ffcv_pairs.kernels.planes.move_plane`."""
    hflip, vflip, rot, y0, x0 = place
    oh, ow, p = geo.out_h, geo.out_w, image.pixel_bytes
    y, x = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    if rot == 1:
        y, x = x, ow - 1 - y
    elif rot == 2:
        y, x = oh - 1 - y, ow - 1 - x
    elif rot == 3:
        y, x = oh - 1 - x, y
    if vflip:
        y = oh - 1 - y
    if hflip:
        x = ow - 1 - x
    sy = border_indices(y0 + y, image.height, geo.pad_mode)
    sx = border_indices(x0 + x, image.width, geo.pad_mode)
    pixel = np.where((sy < 0) | (sx < 0), -1, (sy * image.width + sx) * p)
    plane = image.height * image.width * p
    k = np.arange(image.planes)[:, None, None, None] * plane
    b = np.arange(p)[None, None, None, :]
    px = pixel[None, :, :, None]
    return np.where(px < 0, -1, k + px + b).reshape(-1)


def _threshold(bright: float) -> int:
    """:func:`~ffcv_pairs.kernels.photometric._threshold`."""
    if bright * 255.0 <= 255.0:
        return 256
    t = math.floor(255.0 / bright) + 1
    while t > 0 and bright * (t - 1) > 255.0:
        t -= 1
    while t <= 255 and bright * t <= 255.0:
        t += 1
    return t


def _clamped_mean(lows, highs, planes, pixel, plane_size, bright) -> float:
    channels = planes * pixel
    pixels = planes * plane_size // channels
    if channels == 3:
        total = 0.0
        for k in range(3):
            total += LUMA[k] * (bright * float(lows[k]) + 255.0 * float(highs[k]))
        return total / pixels
    return (bright * float(lows[0]) + 255.0 * float(highs[0])) / (pixels * channels)


def _image_mean(x, planes, pixel, plane_size, bright) -> float:
    """:func:`~ffcv_pairs.kernels.photometric.image_mean` of a uint8 image."""
    t = _threshold(bright)
    lows, highs = [], []
    for k in range(planes * pixel):
        if pixel == 1:
            seg = x[k * plane_size : (k + 1) * plane_size]
        else:
            seg = x[k:plane_size:pixel]
        seg = seg.astype(np.int64)
        below = seg < t
        lows.append(int(seg[below].sum()))
        highs.append(int(len(seg) - np.count_nonzero(below)))
    if planes * pixel != 3:
        lows, highs = [sum(lows), 0, 0], [sum(highs), 0, 0]
    return _clamped_mean(lows, highs, planes, pixel, plane_size, bright)


def _stored_mean(rec, planes, pixel, plane_size, bright) -> float:
    """:func:`~ffcv_pairs.kernels.photometric.stored_mean`."""
    if int(rec[0]) >= _threshold(bright):
        return -1.0
    sums = [int(rec[1]), int(rec[2]), int(rec[3])]
    if planes * pixel != 3:
        sums = [sum(sums), 0, 0]
    return _clamped_mean(sums, [0, 0, 0], planes, pixel, plane_size, bright)


def _fma32(a: np.ndarray, b: np.ndarray, c: np.float32) -> np.ndarray:
    """``a * b + c`` of float32 values rounded once to float32, as a fused multiply-add:
    the product is exact in float64; the sum's rounding error (two-sum) sends an even
    float64 result one step toward it (round to odd), which float32 then rounds right."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = np.float64(c)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    odd = (err != 0) & ((s.view(np.uint64) & np.uint64(1)) == 0)
    if odd.any():
        s[odd] = np.nextafter(s[odd], np.where(err[odd] > 0, np.inf, -np.inf))
    return s.astype(np.float32)


def _fused_contracts() -> bool | None:
    """Whether numba's target has fused multiply-add (then ``k * x + offset`` in a kernel
    with ``fastmath={"contract"}`` is one); None where this numba does not say (a private
    attribute: then no stand-in serves, rather than one that might round otherwise)."""
    from numba.core.registry import cpu_target

    try:
        features = cpu_target.target_context.codegen()._tm_features
    except AttributeError:
        return None
    return "+fma" in str(features).split(",")


def _finish_uint8(x, out, bright, contrast, mean, fma) -> None:
    """:func:`~ffcv_pairs.kernels.pixels.finish_image` to uint8, no noise."""
    offset = np.float32((1.0 - contrast) * mean + 0.5)
    c = np.float32(contrast)
    k = np.float32(bright) * c
    xs = x.astype(np.float32)
    if fma:
        cap = _fma32(np.array([255.0], np.float32), np.array([c]), offset)[0]
        v = _fma32(np.full_like(xs, k), xs, offset)
    else:
        cap = np.float32(np.float32(255.0) * c) + offset
        v = (k * xs) + offset
    hi = np.uint8(min(max(cap, np.float32(0.0)), np.float32(255.0)))
    i = np.clip(v.astype(np.int32), 0, 255).astype(np.uint8)
    out[:] = np.minimum(i, hi)


def fused_stand_in(geo, photo, ops) -> Callable[..., None] | None:
    """A numpy function of :func:`~ffcv_pairs.kernels.fused.fused_pairs`' arguments writing
    its bytes, for a pipeline of these configs; None where it has an op it lacks (a resized
    crop, noise, a float output)."""
    if ops.kind != OUT_UINT8 or photo.noise_std > 0 or geo.resize or ops.downscale.any():
        return None
    maps: dict[tuple, np.ndarray] = {}
    fma = _fused_contracts()
    if fma is None:
        return None

    def fused_stand_in(batch, mm, outs, stored_a, stored_b, geo, photo, ops, *unused: Any):
        seed, epoch = int(ops.clock[0]), int(ops.clock[1])
        stored = (stored_a, stored_b)
        for i in range(len(batch.ids)):
            sid, row = int(batch.ids[i]), int(batch.rows[i])
            place: tuple[int, ...] = ()
            for t in range(2):
                image = stored[t]
                if t == 0 or not geo.paired:
                    place = _placement(geo, seed, epoch, sid, t, image.height, image.width)
                start = int(batch.ptr_a[row] if t == 0 else batch.ptr_b[row])
                p = image.pixel_bytes
                size = image.planes * geo.out_h * geo.out_w * p
                if geo.identity:
                    x = mm[start : start + size]
                else:
                    where = (t, *place)
                    if where not in maps:
                        maps[where] = _index_map(geo, image, place)
                    index = maps[where]
                    src = mm[start : start + image.planes * image.height * image.width * p]
                    x = src[np.maximum(index, 0)]
                    fill = np.tile(ops.fills[t][:p], size // p)
                    x[index < 0] = fill[index < 0]
                no_draw = (1.0, 1.0)
                bright, contrast = _draw(photo, seed, epoch, sid, t) if ops.photometric else no_draw
                chans = (image.planes, p, geo.out_h * geo.out_w * p)
                mean = -1.0 if photo.contrast > 0 else 0.0
                if mean < 0.0 and ops.stats_use[t]:
                    mean = _stored_mean(ops.stats[sid, t], *chans, bright)
                if mean < 0.0:
                    mean = _image_mean(x, *chans, bright)
                _finish_uint8(x, outs[t][i], bright, contrast, mean, fma)

    return fused_stand_in


def _draw(photo, seed, epoch, sid, tag) -> tuple[float, float]:
    """:func:`~ffcv_pairs.kernels.photometric.draw_pixels`' factors."""
    kb = sample_key(seed, epoch, sid, OP_BRIGHTNESS, 0 if photo.brightness_paired else tag)
    kc = sample_key(seed, epoch, sid, OP_CONTRAST, 0 if photo.contrast_paired else tag)
    b = 1.0 + photo.brightness * (2.0 * uniform(kb, 0) - 1.0) if photo.brightness > 0 else 1.0
    c = 1.0 + photo.contrast * (2.0 * uniform(kc, 0) - 1.0) if photo.contrast > 0 else 1.0
    return b, c
