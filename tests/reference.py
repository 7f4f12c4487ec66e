"""Plain-numpy reference implementations of every augmentation, given its parameters."""

from __future__ import annotations

import math

import numpy as np

from ffcv_pairs.augment.config import ImageLayout, PairAugment
from ffcv_pairs.kernels import hashing as H
from ffcv_pairs.kernels.geometry import geometry_params

NP_PAD = {"constant": "constant", "reflect": "reflect", "edge": "edge"}


def to_hwc(img: np.ndarray, layout: ImageLayout) -> np.ndarray:
    if layout.channels == "first":
        return np.moveaxis(img, 0, -1)
    if layout.channels == "none":
        return img[..., None]
    return img


def from_hwc(img: np.ndarray, layout: ImageLayout) -> np.ndarray:
    if layout.channels == "first":
        return np.ascontiguousarray(np.moveaxis(img, -1, 0))
    if layout.channels == "none":
        return img[..., 0]
    return img


def params(aug: PairAugment, layout: ImageLayout, seed: int, epoch: int, sid: int, tag: int):
    clock = np.array([seed, epoch], dtype=np.int64)
    return geometry_params(
        aug.geometry_config(layout), clock, sid, tag, layout.height, layout.width
    )


def region(img: np.ndarray, y0: int, x0: int, h: int, w: int, mode: str, fill) -> np.ndarray:
    """Rows y0..y0+h, cols x0..x0+w of an HWC image, padding per ``mode`` outside it."""
    H, W = img.shape[:2]
    pad = max(0, -y0, -x0, y0 + h - H, x0 + w - W)
    if pad:
        kw = {"constant_values": fill} if mode == "constant" else {}
        if mode == "reflect":
            # Reflect repeatedly for pads larger than the image.
            out = img
            while pad > 0:
                step = min(pad, min(out.shape[0], out.shape[1]) - 1)
                out = np.pad(out, ((step, step), (step, step), (0, 0)), mode="reflect")
                pad -= step
                y0, x0 = y0 + step, x0 + step
            return out[y0 : y0 + h, x0 : x0 + w]
        img = np.pad(img, ((pad, pad), (pad, pad), (0, 0)), mode=NP_PAD[mode], **kw)
        y0, x0 = y0 + pad, x0 + pad
    return img[y0 : y0 + h, x0 : x0 + w]


def flips_rot(img: np.ndarray, prm) -> np.ndarray:
    if prm.hflip:
        img = img[:, ::-1]
    if prm.vflip:
        img = img[::-1]
    return np.rot90(img, int(prm.rot), axes=(0, 1))


def geometry(img: np.ndarray, layout: ImageLayout, aug: PairAugment, prm) -> np.ndarray:
    """Plain crop/pad/translate + flips + rot90 of one stored image."""
    hwc = to_hwc(img, layout)
    y0, x0, rh, rw = int(prm.y0), int(prm.x0), int(prm.rh), int(prm.rw)
    fill = np.array(aug.fill, dtype=img.dtype)
    out = flips_rot(region(hwc, y0, x0, rh, rw, aug.pad_mode, fill), prm)
    return from_hwc(np.ascontiguousarray(out), layout)


def resized(img: np.ndarray, layout: ImageLayout, aug: PairAugment, prm) -> np.ndarray:
    """Bilinear resized crop (align_corners=False, edge clamp) + flips + rot90."""
    hwc = to_hwc(img, layout).astype(np.float64)
    H, W = hwc.shape[:2]
    oh, ow = aug.crop
    y0, x0, rh, rw = prm.y0, prm.x0, prm.rh, prm.rw
    # Output pixel (y, x) after flips/rot came from resized pixel (ry, rx): undo them.
    yy, xx = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    ry, rx = yy.copy(), xx.copy()
    rot = int(prm.rot)
    if rot == 1:
        ry, rx = xx, ow - 1 - yy
    elif rot == 2:
        ry, rx = oh - 1 - yy, ow - 1 - xx
    elif rot == 3:
        ry, rx = oh - 1 - xx, yy
    if prm.vflip:
        ry = oh - 1 - ry
    if prm.hflip:
        rx = ow - 1 - rx
    fy = np.clip(y0 + (ry + 0.5) * rh / oh - 0.5, 0.0, H - 1.0)
    fx = np.clip(x0 + (rx + 0.5) * rw / ow - 0.5, 0.0, W - 1.0)
    iy, ix = np.floor(fy).astype(int), np.floor(fx).astype(int)
    iy1, ix1 = np.minimum(iy + 1, H - 1), np.minimum(ix + 1, W - 1)
    wy, wx = (fy - iy)[..., None], (fx - ix)[..., None]
    v = (1.0 - wy) * ((1.0 - wx) * hwc[iy, ix] + wx * hwc[iy, ix1]) + wy * (
        (1.0 - wx) * hwc[iy1, ix] + wx * hwc[iy1, ix1]
    )
    if img.dtype == np.uint8:
        v = np.clip(np.floor(v + 0.5), 0, 255)
    # float16 is computed through float32, as the op documents.
    work = np.float32 if img.dtype == np.float16 else img.dtype
    return from_hwc(v.astype(work).astype(img.dtype), layout)


def photometric(img: np.ndarray, aug: PairAugment, seed: int, epoch: int, sid: int, tag: int):
    """Brightness, contrast, noise in float64, in the kernel's operation order."""
    x = img.astype(np.float64).reshape(-1)

    def key(op: int, paired: bool) -> int:
        return np.uint64(H.sample_key(seed, epoch, sid, op, 0 if paired else tag))

    kb, kc = key(H.OP_BRIGHTNESS, aug.brightness_paired), key(H.OP_CONTRAST, aug.contrast_paired)
    kn = key(H.OP_NOISE, aug.noise_paired)
    b = 1.0 + aug.brightness * (2.0 * H.uniform(kb, 0) - 1.0) if aug.brightness else 1.0
    c = 1.0 + aug.contrast * (2.0 * H.uniform(kc, 0) - 1.0) if aug.contrast else 1.0
    v = x * b
    if aug.contrast:
        mean = np.cumsum(x)[-1] * b / len(x)
        v = (v - mean) * c + mean
    if aug.noise_std:
        # Scalar libm calls, as the kernel makes them (numpy's SIMD log/cos may differ by an ulp).
        noise = [
            math.sqrt(-2.0 * math.log(1.0 - H.uniform(kn, 2 * k)))
            * math.cos(2.0 * math.pi * H.uniform(kn, 2 * k + 1))
            for k in range(len(x))
        ]
        v = v + aug.noise_std * np.array(noise)
    if img.dtype == np.uint8:
        v = np.clip(np.floor(v + 0.5), 0, 255)
    return (
        v.astype(np.float32 if img.dtype == np.float16 else img.dtype)
        .astype(img.dtype)
        .reshape(img.shape)
    )
