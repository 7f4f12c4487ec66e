"""JPEG decoding inside kernels: libjpeg-turbo, through the ``imdecode`` that FFCV's
extension (``ffcv/_libffcv*.so``) exports. No new native dependency.

Upstream calls it through ctypes, which numba will not cache ("uses dynamic
globals"). Here it is an external symbol (``types.ExternalFunction``): the extension
is loaded into LLVM's process-wide symbol table when this module is imported, before
any kernel that calls it is compiled or loaded, so those kernels cache like every
other (the extension is found without importing ``ffcv``).

What ``imdecode`` does (ffcv 1.0.2, ``libffcv/libffcv.cpp``), and how it is used here:

* It decodes a whole JPEG to packed RGB, 3 bytes a pixel, even a grayscale one (whose
  three channels then agree), with the fast integer IDCT.
* It decodes at the largest of turbojpeg's scale factors whose output fits the box
  ``ceil(box_h * num / denom) x ceil(box_w * num / denom)``, taking the image's size
  from the JPEG's header. It never checks the box against that size, so a wrong
  box decodes silently at another scale: :func:`decode_rgb` passes the stored size.
* It returns 0, or -1 for any error *or warning* (truncated or corrupt data); the
  output is then undefined. A 0 does not prove the bytes intact (most single bit
  flips decode to other pixels): the file's checksums do that.
* Its own crop and flip are never used: they re-encode the image per call, work only
  at 8- or 16-pixel block boundaries, and leave the last block column in place for a
  width that is not a multiple of the block.

Under a resized crop whose region spans at least 2, 4 or 8 times the output in both
sides, :func:`unpack_pairs` may decode at that reduction (turbojpeg's DCT scaling: each
reduced pixel is about the mean of a ``d x d`` block, so fewer pixels are decoded and the
resize then reads a pre-filtered image); the fused kernel maps the same draw onto the
reduced image (:func:`~ffcv_pairs.kernels.geometry.reduction` decides in both).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numba as nb
import numpy as np
from numba import types

from .decode import BatchRefs as _Refs
from .geometry import REDUCTIONS, geometry_params, reduction, scaled_size

__all__ = [
    "CHW",
    "FORM_BYTES",
    "FORM_CHANNELS",
    "FORM_CHANNELS_FIRST",
    "FORM_DOWNSCALE",
    "FORM_HEIGHT",
    "FORM_JPEG",
    "FORM_WIDTH",
    "HWC",
    "SCALES",
    "decode_image",
    "decode_rgb",
    "decode_scaled",
    "extension_path",
    "header_size",
    "unpack_pairs",
    "unpack_pairs_serial",
]

#: Where an image's channels are, as :func:`decode_image` takes it: last (also for a 2-d
#: image, one channel) or first.
HWC, CHW = 0, 1

#: The reductions a decode can take (turbojpeg also has k/8 and upscales: never used).
SCALES = (1, *sorted(REDUCTIONS))


def extension_path() -> Path:
    """FFCV's compiled extension, found without importing ``ffcv``.

    Raises:
        ImportError: ffcv is not installed, or its extension is missing.
    """
    spec = importlib.util.find_spec("ffcv")
    if spec is None or spec.origin is None:
        raise ImportError("ffcv is not installed: JPEG decoding uses its extension")
    found = sorted(Path(spec.origin).parent.glob("_libffcv*.so"))
    if not found:
        raise ImportError(f"ffcv's extension _libffcv*.so is missing in {Path(spec.origin).parent}")
    return found[0]


llvm.load_library_permanently(str(extension_path()))

_u32 = types.uint32
#: int imdecode(src, size, height, width, dst, box_h, box_w, off_x, off_y, num, denom,
#: enable_crop, hflip): the C ``bool``s are passed as bytes (0 or 1).
_imdecode: Any = types.ExternalFunction(
    "imdecode",
    types.int32(
        types.voidptr,
        types.uint64,
        _u32,
        _u32,
        types.voidptr,
        _u32,
        _u32,
        _u32,
        _u32,
        _u32,
        _u32,
        types.uint8,
        types.uint8,
    ),
)


@nb.njit(cache=True, nogil=True)
def decode_rgb(src, start, size, dst, height, width, denom):  # pragma: no cover - JIT
    """Decode the JPEG at ``src[start:start + size]`` into ``dst`` at 1/``denom`` scale.

    Args:
        src: uint8 bytes holding the JPEG (the file's mapping, or any array).
        start, size: Where the JPEG is in ``src``; the caller checks the range.
        dst: C-contiguous uint8 array of at least ``scaled_size(height, width, denom)``
            x 3 bytes: packed RGB rows, ``ceil(width / denom) * 3`` bytes each.
        height, width: The image's stored size (the truth; see the module docstring).
        denom: One of :data:`SCALES`.

    Returns:
        0, or -1 when the JPEG is corrupt or truncated (``dst`` then holds garbage).
    """
    return _imdecode(
        src[start:].ctypes.data,
        np.uint64(size),
        np.uint32(height),
        np.uint32(width),
        dst.ctypes.data,
        np.uint32(height),
        np.uint32(width),
        np.uint32(0),
        np.uint32(0),
        np.uint32(1),
        np.uint32(denom),
        np.uint8(0),
        np.uint8(0),
    )


@nb.njit(cache=True, nogil=True)
def header_size(src, start, size):  # pragma: no cover - JIT
    """``(height, width)`` from the JPEG's frame header (SOF0-SOF15 but DHT, JPG, DAC);
    ``(-1, -1)`` when the bytes hold none before the scan starts, or end first."""
    end = start + size
    at = start + 2  # after the start-of-image marker
    if size < 4 or src[start] != 0xFF or src[start + 1] != 0xD8:
        return -1, -1
    while at + 4 <= end:
        if src[at] != 0xFF:
            return -1, -1
        marker = src[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        length = (np.int64(src[at + 2]) << 8) | np.int64(src[at + 3])
        frame = 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC)
        if frame:
            if at + 9 > end:
                return -1, -1
            h = (np.int64(src[at + 5]) << 8) | np.int64(src[at + 6])
            w = (np.int64(src[at + 7]) << 8) | np.int64(src[at + 8])
            return h, w
        if marker == 0xDA or length < 2:  # start of scan before any frame header
            return -1, -1
        at += 2 + length
    return -1, -1


@nb.njit(cache=True, nogil=True)
def decode_image(src, start, size, out, channels_first, channels):  # pragma: no cover - JIT
    """Decode one stored image at full size into ``out`` in its stored layout.

    Args:
        src, start, size: Where the JPEG is (see :func:`decode_rgb`).
        out: C-contiguous uint8 ``(H, W, C)`` or ``(C, H, W)`` array (an ``(H, W)`` image
            as ``(H, W, 1)``).
        channels_first, channels: As :func:`decode_scaled`.

    Returns:
        As :func:`decode_scaled`.
    """
    if channels_first == CHW:
        height, width = out.shape[1], out.shape[2]
    else:
        height, width = out.shape[0], out.shape[1]
    flat = out.reshape(-1)
    return decode_scaled(src, start, size, flat, height, width, channels_first, channels, 1)


@nb.njit(cache=True, nogil=True)
def decode_scaled(
    src, start, size, out, height, width, channels_first, channels, denom
):  # pragma: no cover - JIT
    """Decode one stored ``height x width`` image at 1/``denom`` scale into the flat uint8
    ``out``, in its stored layout at the size
    :func:`~ffcv_pairs.kernels.geometry.scaled_size` gives.

    Args:
        src, start, size: Where the JPEG is (see :func:`decode_rgb`).
        out: C-contiguous uint8, at least the reduced image's bytes.
        height, width: The stored size.
        channels_first: :data:`CHW` or :data:`HWC`.
        channels: 1 or 3 (one channel takes the first of the decoded three, which agree).
            Packed RGB (three channels last) is decoded in place; any other layout through
            a scratch of three bytes a pixel.
        denom: One of :data:`SCALES`.

    Returns:
        0, or -1 for a corrupt or truncated JPEG, or one whose frame header gives another
        size than ``height x width`` (``imdecode`` would decode it at another scale,
        silently; ``out`` may then hold garbage).
    """
    h, w = header_size(src, start, size)
    if h != height or w != width:
        return -1
    sh, sw = scaled_size(height, width, denom)
    plane = sh * sw
    in_place = channels == 3 and channels_first == HWC
    rgb = out if in_place else np.empty(plane * 3, dtype=np.uint8)
    status = decode_rgb(src, start, size, rgb, height, width, denom)
    if status != 0 or in_place:
        return status
    if channels_first == CHW:
        for c in range(channels):
            for p in range(plane):
                out[c * plane + p] = rgb[p * 3 + c]
    else:
        for p in range(plane):
            out[p] = rgb[p * 3]
    return status


#: Columns of a field's row in :func:`unpack_pairs`'s ``forms``.
(
    FORM_JPEG,
    FORM_CHANNELS_FIRST,
    FORM_CHANNELS,
    FORM_BYTES,
    FORM_HEIGHT,
    FORM_WIDTH,
    FORM_DOWNSCALE,
) = range(7)


@nb.njit(cache=True, nogil=True)
def _unpack_sample(i, batch, mm, sizes, out, forms, geo, clock):  # pragma: no cover - JIT
    """Sample ``i`` of :func:`unpack_pairs`: 0, or 1 + the field whose JPEG is corrupt."""
    row, offset = batch.rows[i], 0
    for t in range(2):
        start = batch.ptr_a[row] if t == 0 else batch.ptr_b[row]
        nbytes = forms[t, FORM_BYTES]
        dst = out[i, offset : offset + nbytes]
        if forms[t, FORM_JPEG] == 0:
            for k in range(nbytes):  # not a slice assignment: see load/order.py
                dst[k] = mm[start + k]
        else:
            first, channels = forms[t, FORM_CHANNELS_FIRST], forms[t, FORM_CHANNELS]
            h, w = forms[t, FORM_HEIGHT], forms[t, FORM_WIDTH]
            denom = np.int64(1)
            if forms[t, FORM_DOWNSCALE]:  # the draw the fused kernel makes (see there)
                place = geometry_params(geo, clock, batch.ids[i], t, h, w)
                denom = reduction(geo, place)
            size = sizes[batch.ids[i], t]
            if decode_scaled(mm, start, size, dst, h, w, first, channels, denom) != 0:
                return t + 1
        offset += nbytes
    return 0


@nb.njit(cache=True, parallel=True, nogil=True)
def unpack_pairs(batch, mm, sizes, out, forms, geo, clock):  # pragma: no cover - JIT
    """A and B of every sample of ``batch`` (a ``kernels.decode.BatchRefs``), decoded where
    a field is JPEG and copied where it is raw, into row ``i`` of ``out``: A's bytes, then B's.

    Args:
        mm: The file's bytes (the mapping, or the process cache's slots).
        sizes: ``(num_samples, 2)``: the stored bytes of A and B, by sample id.
        out: uint8 ``(batch, bytes of A + bytes of B)``.
        forms: int64 ``(2, 7)``, a row per field (columns ``FORM_*``): JPEG or not,
            :data:`CHW` or :data:`HWC`, channels, bytes at full size, height, width, and
            whether to decode at the sample's :func:`~ffcv_pairs.kernels.geometry.reduction`
            (then the reduced image fills the start of the field's bytes).
        geo, clock: The resized crop's :class:`~ffcv_pairs.kernels.geometry.GeometryConfig`
            and the loader's ``[seed, epoch]`` (read only for ``FORM_DOWNSCALE``).

    Returns:
        int64 ``(batch,)``: 0, or 1 + the field whose JPEG is corrupt or truncated.
    """
    status = np.zeros(len(batch.ids), dtype=np.int64)
    ids, rows, ptr_a, ptr_b = batch.ids, batch.rows, batch.ptr_a, batch.ptr_b
    for i in nb.prange(len(ids)):
        refs = _Refs(ids, rows, ptr_a, ptr_b)
        status[i] = _unpack_sample(i, refs, mm, sizes, out, forms, geo, clock)
    return status


@nb.njit(cache=True, nogil=True)
def unpack_pairs_serial(batch, mm, sizes, out, forms, geo, clock):  # pragma: no cover - JIT
    """:func:`unpack_pairs` on one thread."""
    status = np.zeros(len(batch.ids), dtype=np.int64)
    for i in range(len(batch.ids)):
        status[i] = _unpack_sample(i, batch, mm, sizes, out, forms, geo, clock)
    return status
