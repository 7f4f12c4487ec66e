"""One uint8 image -> its photometric result in the output's dtype, in one vectorised pass.

The photometric definition is in :mod:`~ffcv_pairs.kernels.photometric`; after
it, optional normalisation ``(q - mean[c]) / std[c]`` (``q``: the photometric
uint8 result) and the output dtype: uint8, float32, or the bits of float16 or
bfloat16 (round to nearest even) in a uint16 array. The image is processed in
chunks of :data:`CHUNK` pixels that stay in L1: the noise of a chunk is drawn
into a buffer, then two loops with no branch inside (photometric, then output)
run as SIMD.
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from .floatbits import bfloat16_bits, float16_bits
from .noise import noise_block
from .photometric import draw_pixels, image_mean

__all__ = [
    "CHUNK",
    "OUT_BFLOAT16",
    "OUT_FLOAT16",
    "OUT_FLOAT32",
    "OUT_UINT8",
    "OutputSpec",
    "PixelWork",
    "finish_image",
    "new_pixel_work",
    "photometric_uint8",
]

OUT_UINT8, OUT_FLOAT32, OUT_FLOAT16, OUT_BFLOAT16 = 0, 1, 2, 3
CHUNK = 1024  # pixels per chunk


class OutputSpec(NamedTuple):
    """What an image becomes: ``kind`` (``OUT_*``); ``norm`` float32 ``(2, channels)``: mean
    and 1/std (0 and 1: no normalisation); ``table``: the noise table."""

    kind: int
    norm: np.ndarray
    table: np.ndarray


class PixelWork(NamedTuple):
    """One thread's chunk buffers (float32, ``CHUNK * pixel`` each)."""

    q: np.ndarray
    noise: np.ndarray
    shift: np.ndarray
    scale: np.ndarray


@nb.njit(cache=True, nogil=True)
def new_pixel_work(lay):  # pragma: no cover - JIT
    """A :class:`PixelWork` for images of :class:`~ffcv_pairs.kernels.photometric.ChannelLayout`
    ``lay``."""
    n = CHUNK * lay.pixel
    return PixelWork(
        np.empty(n, np.float32),
        np.zeros(n, np.float32),
        np.empty(n, np.float32),
        np.empty(n, np.float32),
    )


@nb.njit(cache=True, nogil=True)
def _photometric_chunk(xs, q, noise, draw, offset):  # pragma: no cover - JIT
    """``q[j]``: the uint8 photometric result of ``xs[j]``, as float32."""
    b, c = np.float32(draw.bright), np.float32(draw.contrast)
    top, zero = np.float32(255.0), np.float32(0.0)
    if draw.noise_std > 0:
        for j in range(xs.shape[0]):
            v = min(b * np.float32(xs[j]), top) * c + offset + noise[j]
            q[j] = np.float32(np.int32(min(max(v, zero), top)))
    else:
        for j in range(xs.shape[0]):
            v = min(b * np.float32(xs[j]), top) * c + offset
            q[j] = np.float32(np.int32(min(max(v, zero), top)))


@nb.njit(cache=True, nogil=True)
def _output_chunk(q, out, shift, scale, kind):  # pragma: no cover - JIT
    """``out[j]`` from ``q[j]``: as uint8, or ``(q - shift) * scale`` as float32/16, bfloat16."""
    n = q.shape[0]
    if kind == OUT_UINT8:
        for j in range(n):
            out[j] = np.uint8(q[j])
    elif kind == OUT_FLOAT32:
        for j in range(n):
            out[j] = (q[j] - shift[j]) * scale[j]
    elif kind == OUT_FLOAT16:
        for j in range(n):
            out[j] = float16_bits((q[j] - shift[j]) * scale[j])
    else:
        for j in range(n):
            out[j] = bfloat16_bits((q[j] - shift[j]) * scale[j])


@nb.njit(cache=True, nogil=True)
def finish_image(x, dst, lay, draw, mean, spec, work):  # pragma: no cover - JIT
    """``dst`` (1-d, the output's dtype) from the uint8 image ``x`` (1-d, same length).

    Args:
        lay: :class:`~ffcv_pairs.kernels.photometric.ChannelLayout` of the image.
        draw: Its :class:`~ffcv_pairs.kernels.photometric.PixelDraw` (factors 1, no noise:
            no photometric op).
        mean: Its contrast mean (see :func:`~ffcv_pairs.kernels.photometric.image_mean`).
        spec: :class:`OutputSpec`.
        work: :class:`PixelWork`.
    """
    chunk = work.q.shape[0]
    offset = np.float32((1.0 - draw.contrast) * mean + 0.5)
    noisy, std = draw.noise_std > 0, np.float32(draw.noise_std)
    for k in range(lay.planes):
        for j in range(chunk):  # this plane's normalisation, element by element
            ch = k if lay.pixel == 1 else j % lay.pixel
            work.shift[j], work.scale[j] = spec.norm[0, ch], spec.norm[1, ch]
        base = k * lay.plane_size
        for j0 in range(0, lay.plane_size, chunk):
            n = min(chunk, lay.plane_size - j0)
            if noisy:
                noise_block(draw.noise_key, base + j0, work.noise[:n], std, spec.table)
            q = work.q[:n]
            _photometric_chunk(x[base + j0 : base + j0 + n], q, work.noise[:n], draw, offset)
            out = dst[base + j0 : base + j0 + n]
            _output_chunk(q, out, work.shift[:n], work.scale[:n], spec.kind)


@nb.njit(cache=True, parallel=True, nogil=True)
def photometric_uint8(ids, x, cfg, clock, tag, lay, table):  # pragma: no cover - JIT
    """In place, uint8 images ``x`` ``(batch, elements)``: the photometric ops as a separate
    CPU op (when A and B have different dtypes; otherwise the decoder fuses them)."""
    norm = np.zeros((2, lay.planes * lay.pixel), np.float32)
    norm[1] = 1.0
    for i in nb.prange(len(ids)):
        spec = OutputSpec(OUT_UINT8, norm, table)
        d = draw_pixels(cfg, clock, ids[i], tag)
        m = image_mean(x[i], lay, d.bright, True) if cfg.contrast > 0 else 0.0
        finish_image(x[i], x[i], lay, d, m, spec, new_pixel_work(lay))
