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
CHUNK = 2048  # pixels per chunk (its buffers, 8 KB each per channel, stay in L1)


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
def new_pixel_work(chans):  # pragma: no cover - JIT
    """A :class:`PixelWork` for images of :class:`~ffcv_pairs.kernels.photometric.ChannelPlanes`
    ``chans``."""
    n = CHUNK * chans.pixel
    return PixelWork(
        np.empty(n, np.float32),
        np.zeros(n, np.float32),
        np.empty(n, np.float32),
        np.empty(n, np.float32),
    )


@nb.njit(cache=True, nogil=True, fastmath={"contract"})
def _photometric_chunk(xs, q, noise, draw, offset):  # pragma: no cover - JIT
    """``q[j]``: the uint8 photometric result of ``xs[j]`` (``q`` uint8, or float32 holding
    the integer).

    ``c * min(b * x, 255) + offset`` is computed as ``min(k * x + offset, cap)`` with
    ``k = b * c`` and ``cap = 255 * c + offset`` (equal, since ``c > 0``): one fused
    multiply-add per value. Without noise the cap and the clamp to ``[0, 255]`` are
    taken after truncating (``floor(min(v, cap)) = min(floor(v), floor(cap))``, and
    truncation differs from floor only below 0, which clamps to 0 either way): the clamp
    to the constant ``[0, 255]`` compiles to saturating packs (no min or max), and the cap
    to one byte min (a variable bound clamped as int32 took twice the instructions).
    """
    c = np.float32(draw.contrast)
    k = np.float32(draw.bright) * c
    cap = np.float32(255.0) * c + offset
    if draw.noise_std > 0:
        top = np.float32(255.0)
        for j in range(xs.shape[0]):
            v = k * np.float32(xs[j]) + offset
            v = (v if v < cap else cap) + noise[j]
            i = np.int32(v if v < top else top)
            q[j] = i if i > 0 else 0
    else:
        hi = np.uint8(min(max(cap, np.float32(0.0)), np.float32(255.0)))
        low, high = np.int32(0), np.int32(255)
        for j in range(xs.shape[0]):
            i = np.int32(k * np.float32(xs[j]) + offset)
            i = i if i > low else low
            i = i if i < high else high
            u = np.uint8(i)
            q[j] = u if u < hi else hi


@nb.njit(cache=True, nogil=True)
def _output_plane(q, out, shift, scale, kind):  # pragma: no cover - JIT
    """``out[j] = (q[j] - shift) * scale`` (one channel: scalars) as float32, or the bits
    of float16 or bfloat16; ``q``: uint8, or float32 holding integers."""
    if kind == OUT_FLOAT32:
        for j in range(q.shape[0]):
            out[j] = (np.float32(q[j]) - shift) * scale
    elif kind == OUT_FLOAT16:
        for j in range(q.shape[0]):
            out[j] = float16_bits((np.float32(q[j]) - shift) * scale)
    else:
        for j in range(q.shape[0]):
            out[j] = bfloat16_bits((np.float32(q[j]) - shift) * scale)


@nb.njit(cache=True, nogil=True)
def _output_pixels(q, out, shift, scale, kind):  # pragma: no cover - JIT
    """:func:`_output_plane` with interleaved channels: ``shift``/``scale`` arrays like ``q``."""
    if kind == OUT_FLOAT32:
        for j in range(q.shape[0]):
            out[j] = (np.float32(q[j]) - shift[j]) * scale[j]
    elif kind == OUT_FLOAT16:
        for j in range(q.shape[0]):
            out[j] = float16_bits((np.float32(q[j]) - shift[j]) * scale[j])
    else:
        for j in range(q.shape[0]):
            out[j] = bfloat16_bits((np.float32(q[j]) - shift[j]) * scale[j])


@nb.njit(cache=True, nogil=True)
def _chunk(xs, out, draw, offset, spec, work, channel, float_out):  # pragma: no cover - JIT
    """One chunk: the photometric ops (unless the draw is the identity), then the output;
    ``channel``: the plane's channel, or -1 (interleaved: constants per element in ``work``);
    ``float_out``: see :func:`finish_image`."""
    n = xs.shape[0]
    if float_out is None or spec.kind == OUT_UINT8:
        _photometric_chunk(xs, out, work.noise[:n], draw, offset)
        return
    photo = draw.bright != 1.0 or draw.contrast != 1.0 or draw.noise_std > 0
    if photo:
        _photometric_chunk(xs, work.q[:n], work.noise[:n], draw, offset)
    if channel >= 0:
        shift, scale = spec.norm[0, channel], spec.norm[1, channel]
        if photo:
            _output_plane(work.q[:n], out, shift, scale, spec.kind)
        else:  # the image itself: one pass
            _output_plane(xs, out, shift, scale, spec.kind)
    elif photo:
        _output_pixels(work.q[:n], out, work.shift[:n], work.scale[:n], spec.kind)
    else:
        _output_pixels(xs, out, work.shift[:n], work.scale[:n], spec.kind)


@nb.njit(cache=True, nogil=True)
def finish_image(x, dst, chans, draw, mean, spec, work, float_out):  # pragma: no cover - JIT
    """``dst`` (1-d uint8: the output's bytes) from the uint8 image ``x`` (1-d).

    The output's dtype is ``spec.kind``'s, a value at run time: one compiled kernel writes
    every float dtype (each new dtype used to cost the fused kernel's whole compile).
    ``float_out`` is None for a uint8 output, and then the float paths are pruned before
    numba types them (a ``None`` argument's ``is None`` branches are): a uint8 pipeline's
    kernel compiles without them, a third of the fused kernel's compile.

    Args:
        chans: :class:`~ffcv_pairs.kernels.photometric.ChannelPlanes` of the image.
        draw: Its :class:`~ffcv_pairs.kernels.photometric.PixelDraw` (factors 1, no noise:
            no photometric op).
        mean: Its contrast mean (see :func:`~ffcv_pairs.kernels.photometric.image_mean`).
        spec: :class:`OutputSpec`.
        work: :class:`PixelWork`.
    """
    if float_out is None or spec.kind == OUT_UINT8:
        _finish_typed(x, dst, chans, draw, mean, spec, work, float_out)
    elif spec.kind == OUT_FLOAT32:
        _finish_typed(x, dst.view(np.float32), chans, draw, mean, spec, work, float_out)
    else:  # the bits of float16 or bfloat16
        _finish_typed(x, dst.view(np.uint16), chans, draw, mean, spec, work, float_out)


@nb.njit(cache=True, nogil=True)
def _finish_typed(x, dst, chans, draw, mean, spec, work, float_out):  # pragma: no cover - JIT
    """:func:`finish_image` into ``dst`` in the output's dtype (same length as ``x``)."""
    offset = np.float32((1.0 - draw.contrast) * mean + 0.5)
    std = np.float32(draw.noise_std)
    p = chans.pixel
    photo = draw.bright != 1.0 or draw.contrast != 1.0 or draw.noise_std > 0
    # Buffers are needed for noise, and for a photometric result that is then normalised;
    # otherwise a plane is one chunk (a call per chunk costs as much as 4 KB of pixels).
    buffered = draw.noise_std > 0 or (photo and spec.kind != OUT_UINT8) or p > 1
    chunk = work.q.shape[0] if buffered else chans.plane_size
    if p > 1 and spec.kind != OUT_UINT8:  # interleaved channels: constants per element
        for j in range(chunk):
            work.shift[j], work.scale[j] = spec.norm[0, j % p], spec.norm[1, j % p]
    for k in range(chans.planes):
        base = k * chans.plane_size
        for j0 in range(0, chans.plane_size, chunk):
            n = min(chunk, chans.plane_size - j0)
            if draw.noise_std > 0:
                noise_block(draw.noise_key, base + j0, work.noise[:n], std, spec.table)
            xs, out = x[base + j0 : base + j0 + n], dst[base + j0 : base + j0 + n]
            _chunk(xs, out, draw, offset, spec, work, k if p == 1 else -1, float_out)


@nb.njit(cache=True, parallel=True, nogil=True)
def photometric_uint8(ids, x, cfg, clock, tag, chans, table):  # pragma: no cover - JIT
    """In place, uint8 images ``x`` ``(batch, elements)``: the photometric ops as a separate
    CPU op (when A and B have different dtypes; otherwise the decoder fuses them)."""
    norm = np.zeros((2, chans.planes * chans.pixel), np.float32)
    norm[1] = 1.0
    for i in nb.prange(len(ids)):
        spec = OutputSpec(OUT_UINT8, norm, table)
        d = draw_pixels(cfg, clock, ids[i], tag)
        m = image_mean(x[i], chans, d.bright, True) if cfg.contrast > 0 else 0.0
        _finish_typed(x[i], x[i], chans, d, m, spec, new_pixel_work(chans), None)  # uint8
