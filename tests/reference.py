"""Plain-Python/numpy reference implementations of every augmentation, from their definitions.

Nothing here calls the package's kernels: the random draws are re-derived from
the counter-based hash's definition (splitmix64's finaliser over ``(seed, epoch,
sample, op, field)``, see ``kernels/hashing.py``), the geometry from
torchvision's ``RandomResizedCrop.get_params`` as the docs state it, the noise
from its stated stream and quantile table, and the pixel ops in float64.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from types import SimpleNamespace

import numpy as np

from ffcv_pairs.augment.config import ImageAxes, PairAugment

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
OP_GEOMETRY, OP_BRIGHTNESS, OP_CONTRAST, OP_NOISE = 1, 2, 3, 4
LUMA = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale


# -- the hash ---------------------------------------------------------------------------
def mix64(x: int) -> int:
    x &= M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def sample_key(seed: int, epoch: int, sid: int, op: int, tag: int) -> int:
    seed, epoch, sid = int(seed), int(epoch), int(sid)
    k = mix64(seed ^ GOLDEN)
    k = mix64(k ^ epoch)
    k = mix64(k ^ sid)
    return mix64(k ^ (op << 8) ^ tag)


def uniform(key: int, k: int) -> float:
    return (mix64(key + (k + 1) * GOLDEN) >> 11) * 2.0**-53


def randint(key: int, k: int, lo: int, hi: int) -> int:
    return lo + math.floor(uniform(key, k) * (hi - lo + 1))


# -- geometry ---------------------------------------------------------------------------
def _resized_region(aug: PairAugment, key: int, h: int, w: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params, attempt a drawing uniforms 10+4a .. 13+4a."""
    lo, hi = aug.scale_range
    log_lo, log_hi = math.log(aug.crop_ratio[0]), math.log(aug.crop_ratio[1])
    for a in range(10):
        target = h * w * (lo + uniform(key, 10 + 4 * a) * (hi - lo))
        aspect = math.exp(log_lo + uniform(key, 11 + 4 * a) * (log_hi - log_lo))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            return randint(key, 12 + 4 * a, 0, h - ch), randint(key, 13 + 4 * a, 0, w - cw), ch, cw
    ratio = w / h
    if ratio < aug.crop_ratio[0]:
        cw, ch = w, round(w / aug.crop_ratio[0])
    elif ratio > aug.crop_ratio[1]:
        ch, cw = h, round(h * aug.crop_ratio[1])
    else:
        ch, cw = h, w
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def params(aug: PairAugment, layout: ImageAxes, seed: int, epoch: int, sid: int, tag: int):
    """One sample's draw: flips, quarter turns and the region ``(y0, x0, rh, rw)``."""
    key = sample_key(seed, epoch, sid, OP_GEOMETRY, 0 if aug.geometry_paired else tag)
    h, w = layout.height, layout.width
    oh, ow = aug.out_size if aug.out_size is not None else (h, w)
    y0, x0, rh, rw = 0, 0, h, w
    if aug.center and aug.resizes:  # the largest central region of the output's ratio
        rh, rw = (h, round(h * ow / oh)) if w * oh >= h * ow else (round(w * oh / ow), w)
        y0, x0 = (h - rh) // 2, (w - rw) // 2
    elif aug.center:
        y0, x0, rh, rw = (h - oh) // 2, (w - ow) // 2, oh, ow
    elif aug.resizes:
        y0, x0, rh, rw = _resized_region(aug, key, h, w)
    elif aug.crop is not None:
        pad = aug.crop_padding
        y0, x0 = randint(key, 3, -pad, h + pad - oh), randint(key, 4, -pad, w + pad - ow)
        rh, rw = oh, ow
    if aug.translate[0] > 0:
        y0 += randint(key, 5, -aug.translate[0], aug.translate[0])
    if aug.translate[1] > 0:
        x0 += randint(key, 6, -aug.translate[1], aug.translate[1])
    return SimpleNamespace(
        hflip=int(uniform(key, 0) < aug.hflip),
        vflip=int(uniform(key, 1) < aug.vflip),
        rot=randint(key, 2, 0, 3) if aug.rot90 else 0,
        y0=y0,
        x0=x0,
        rh=rh,
        rw=rw,
    )


def to_hwc(img: np.ndarray, layout: ImageAxes) -> np.ndarray:
    if layout.channels == "first":
        return np.moveaxis(img, 0, -1)
    if layout.channels == "none":
        return img[..., None]
    return img


def from_hwc(img: np.ndarray, layout: ImageAxes) -> np.ndarray:
    if layout.channels == "first":
        return np.ascontiguousarray(np.moveaxis(img, -1, 0))
    if layout.channels == "none":
        return img[..., 0]
    return img


def region(img: np.ndarray, y0: int, x0: int, h: int, w: int, mode: str, fill) -> np.ndarray:
    """Rows y0..y0+h, cols x0..x0+w of an HWC image, padding per ``mode`` outside it."""
    H, W = img.shape[:2]
    pad = max(0, -y0, -x0, y0 + h - H, x0 + w - W)
    if pad:
        if mode == "reflect":  # reflect repeatedly for pads larger than the image
            out = img
            while pad > 0:
                step = min(pad, min(out.shape[0], out.shape[1]) - 1)
                out = np.pad(out, ((step, step), (step, step), (0, 0)), mode="reflect")
                pad -= step
                y0, x0 = y0 + step, x0 + step
            return out[y0 : y0 + h, x0 : x0 + w]
        kw = {"constant_values": fill} if mode == "constant" else {}
        img = np.pad(img, ((pad, pad), (pad, pad), (0, 0)), mode=mode, **kw)
        y0, x0 = y0 + pad, x0 + pad
    return img[y0 : y0 + h, x0 : x0 + w]


def flips_rot(img: np.ndarray, prm) -> np.ndarray:
    if prm.hflip:
        img = img[:, ::-1]
    if prm.vflip:
        img = img[::-1]
    return np.rot90(img, int(prm.rot), axes=(0, 1))


def geometry(img: np.ndarray, layout: ImageAxes, aug: PairAugment, prm) -> np.ndarray:
    """Plain crop/pad/translate + flips + rot90 of one stored image."""
    hwc = to_hwc(img, layout)
    fill = np.array(aug.fill, dtype=img.dtype)
    out = flips_rot(region(hwc, prm.y0, prm.x0, prm.rh, prm.rw, aug.pad_mode, fill), prm)
    return from_hwc(np.ascontiguousarray(out), layout)


def bilinear(img: np.ndarray, y0: float, x0: float, rh: float, rw: float, out_hw) -> np.ndarray:
    """The region resized to ``out_hw`` (HWC, float64): half-pixel centres, samples clamped to
    the image (``align_corners=False``), bilinear between the four pixels around each."""
    H, W = img.shape[:2]
    oh, ow = out_hw
    fy = np.clip(y0 + (np.arange(oh) + 0.5) * rh / oh - 0.5, 0.0, H - 1.0)
    fx = np.clip(x0 + (np.arange(ow) + 0.5) * rw / ow - 0.5, 0.0, W - 1.0)
    iy, ix = np.floor(fy).astype(int), np.floor(fx).astype(int)
    iy1, ix1 = np.minimum(iy + 1, H - 1), np.minimum(ix + 1, W - 1)
    wy, wx = (fy - iy)[:, None, None], (fx - ix)[None, :, None]
    x = img.astype(np.float64)
    top = (1 - wx) * x[iy][:, ix] + wx * x[iy][:, ix1]
    bottom = (1 - wx) * x[iy1][:, ix] + wx * x[iy1][:, ix1]
    return (1 - wy) * top + wy * bottom


def resized(img: np.ndarray, layout: ImageAxes, aug: PairAugment, prm) -> np.ndarray:
    """Resized crop + flips + rot90, float64 (uint8: not yet rounded)."""
    hwc = bilinear(to_hwc(img, layout), prm.y0, prm.x0, prm.rh, prm.rw, aug.out_size)
    return from_hwc(np.ascontiguousarray(flips_rot(hwc, prm)), layout)


def round_uint8(v: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(v + 0.5), 0, 255)


# -- photometric ------------------------------------------------------------------------
def normal_table() -> np.ndarray:
    """2**16 equally likely quantiles of the standard normal, scaled to unit variance."""
    d = NormalDist()
    z = np.array([d.inv_cdf((k + 0.5) / 65536) for k in range(65536)])
    return z / np.sqrt(np.mean(z * z))


_TABLE: list[np.ndarray] = []


def noise(key: int, n: int) -> np.ndarray:
    """z_0 .. z_{n-1}: value j is the 16-bit field j % 4 of mix64(key + (j // 4 + 1) * GOLDEN)."""
    if not _TABLE:
        _TABLE.append(normal_table())
    fields = [(mix64(key + (j // 4 + 1) * GOLDEN) >> (16 * (j % 4))) & 0xFFFF for j in range(n)]
    return _TABLE[0][np.array(fields, dtype=np.int64)]


def photometric(
    img: np.ndarray, layout: ImageAxes, aug: PairAugment, draw: tuple[int, int, int, int]
) -> np.ndarray:
    """Brightness, contrast (around the grayscale mean for 3 channels), noise; float64.

    ``draw``: ``(seed, epoch, sid, tag)``. uint8 inputs clamp after brightness; the result is
    not yet rounded. Float inputs clamp to ``aug.value_range`` (default ``(0, 1)``, as
    torchvision) after brightness and at the end.
    """
    seed, epoch, sid, tag = draw

    def key(op: int, paired: bool) -> int:
        return sample_key(seed, epoch, sid, op, 0 if paired else tag)

    b = 1 + aug.brightness * (2 * uniform(key(OP_BRIGHTNESS, aug.brightness_paired), 0) - 1)
    c = 1 + aug.contrast * (2 * uniform(key(OP_CONTRAST, aug.contrast_paired), 0) - 1)
    x = img.astype(np.float64)
    lo, hi = aug.value_range if aug.value_range is not None else (0.0, 1.0)
    x1 = np.minimum(b * x, 255.0) if img.dtype == np.uint8 else np.clip(b * x, lo, hi)
    hwc = to_hwc(x1, layout)
    if hwc.shape[-1] == 3:
        m = float(np.mean(hwc @ np.array(LUMA)))
    else:
        m = float(np.mean(hwc))
    x2 = c * x1 + (1 - c) * m
    z = noise(key(OP_NOISE, aug.noise_paired), x.size).reshape(x.shape)
    x3 = x2 + aug.noise_std * z
    return x3 if img.dtype == np.uint8 else np.clip(x3, lo, hi)


def normalize(q: np.ndarray, layout: ImageAxes, aug: PairAugment) -> np.ndarray:
    """``(q - mean[c]) / std[c]`` per channel, float64."""
    mean, std = np.array(aug.normalize_mean), np.array(aug.normalize_std)
    return from_hwc((to_hwc(q.astype(np.float64), layout) - mean) / std, layout)
