"""JPEG compression artefacts on one image: libjpeg-turbo's encoder, then its decoder, at a
drawn quality (torchvision v2's ``JPEG``, Albumentations' ``ImageCompression``), an
``apply(image, params, tag)`` run by the drawn-op driver (:mod:`.drawn_driver`); conventions
as in :mod:`.tones`.

libjpeg-turbo's TurboJPEG API (``libturbojpeg.so.0``, which FFCV's extension links, so it is
present wherever ffcv loads; no fallback) is called as external symbols, as
:mod:`.jpeg` calls FFCV's decoder, so the kernels that call it cache like every other:
``tjCompress2`` into a buffer of ``tjBufSize`` bytes (``TJFLAG_NOREALLOC``), ``tjDecompress2``
back, with ``TJFLAG_ACCURATEDCT`` (the integer DCT that PIL, OpenCV and torchvision use by
default; TurboJPEG would take the fast one below quality 96), 4:2:0 chroma for 3 channels
(their default) and a grayscale JPEG for 1. Other channel counts are refused before a
pipeline is built. A float image is mapped to bytes, ``round_half_up(255 * t)`` with ``t =
(x - low) / (high - low)`` clamped to ``[0, 1]``, and back, ``low + (high - low) * b / 255``:
its values come back on 256 levels, as through any JPEG.
"""

from __future__ import annotations

import ctypes.util
import math
from typing import Any

import llvmlite.binding as llvm
import numba as nb
import numpy as np
from numba import types

from .bytemoves import copy_bytes
from .pixel_words import interleave, planes_from_words

__all__ = ["LIBRARY", "jpeg_artefacts"]

#: The TurboJPEG library, as the dynamic loader finds it.
LIBRARY = "libturbojpeg.so.0"
try:
    llvm.load_library_permanently(ctypes.util.find_library("turbojpeg") or LIBRARY)
except RuntimeError as e:  # ffcv's extension needs it too: ffcv would not load either
    raise ImportError(
        f"{LIBRARY} (libjpeg-turbo's TurboJPEG, which ffcv links) is missing: {e}; install "
        f"libturbojpeg (apt: libturbojpeg0-dev), as `make install` does"
    ) from None

_TJPF_RGB, _TJPF_RGBX, _TJPF_GRAY, _TJSAMP_420, _TJSAMP_GRAY = 0, 2, 6, 2, 3
_TJFLAG_NOREALLOC, _TJFLAG_ACCURATEDCT = 1024, 4096
_i32, _ptr = types.int32, types.voidptr
_init_compress: Any = types.ExternalFunction("tjInitCompress", _ptr())
_init_decompress: Any = types.ExternalFunction("tjInitDecompress", _ptr())
_destroy: Any = types.ExternalFunction("tjDestroy", _i32(_ptr))
_buf_size: Any = types.ExternalFunction("tjBufSize", types.uint64(_i32, _i32, _i32))
#: tjCompress2(handle, src, width, pitch, height, pixel format, &jpeg, &size, subsampling,
#: quality, flags)
_compress: Any = types.ExternalFunction(
    "tjCompress2", _i32(_ptr, _ptr, _i32, _i32, _i32, _i32, _ptr, _ptr, _i32, _i32, _i32)
)
#: tjDecompress2(handle, jpeg, size, dst, width, pitch, height, pixel format, flags)
_decompress: Any = types.ExternalFunction(
    "tjDecompress2", _i32(_ptr, _ptr, types.uint64, _ptr, _i32, _i32, _i32, _i32, _i32)
)


@nb.njit(cache=True, nogil=True)
def _round_trip(packed, height, width, channels, quality):  # pragma: no cover - JIT
    """Encode and decode ``packed`` (uint8, ``height x width x channels``, C order) in place;
    0, or -1 when libjpeg-turbo fails (the image is then undefined). ``channels``: 1 (gray),
    3 (RGB) or 4 (RGBX: RGB with a fourth byte the codec does not read)."""
    gray = channels == 1
    form = _TJPF_GRAY if gray else (_TJPF_RGBX if channels == 4 else _TJPF_RGB)
    sub = _TJSAMP_GRAY if gray else _TJSAMP_420
    jpeg = np.empty(_buf_size(np.int32(width), np.int32(height), np.int32(sub)), np.uint8)
    where = np.empty(2, np.uint64)  # the JPEG's address and size, as TurboJPEG takes them
    where[0] = jpeg.ctypes.data
    where[1] = jpeg.size
    pitch = np.int32(width * channels)
    h, w, flags = np.int32(height), np.int32(width), np.int32(_TJFLAG_ACCURATEDCT)
    enc = _init_compress()
    ok = _compress(
        enc,
        packed.ctypes.data,
        w,
        pitch,
        h,
        np.int32(form),
        where[0:].ctypes.data,
        where[1:].ctypes.data,
        np.int32(sub),
        np.int32(quality),
        np.int32(_TJFLAG_NOREALLOC | _TJFLAG_ACCURATEDCT),
    )
    _destroy(enc)
    if ok != 0:
        return -1
    dec = _init_decompress()
    ok = _decompress(
        dec, jpeg.ctypes.data, where[1], packed.ctypes.data, w, pitch, h, np.int32(form), flags
    )
    _destroy(dec)
    return 0 if ok == 0 else -1


@nb.njit(cache=True, nogil=True)
def _pack(image, packed, low, span, rounds):  # pragma: no cover - JIT
    """``packed[y, x, c]``: value ``(c, y, x)`` of ``image`` as a byte."""
    planes, height, width, pixel = image.shape
    for p in range(planes):
        for y in range(height):
            for x in range(width):
                for q in range(pixel):
                    v = image[p, y, x, q]
                    if not rounds:
                        v = math.floor(255.0 * min(max((v - low) / span, 0.0), 1.0) + 0.5)
                    packed[y, x, p * pixel + q] = np.uint8(v)


@nb.njit(cache=True, nogil=True)
def _unpack(packed, image, low, span, rounds):  # pragma: no cover - JIT
    """The inverse of :func:`_pack`."""
    planes, height, width, pixel = image.shape
    for p in range(planes):
        for y in range(height):
            for x in range(width):
                for q in range(pixel):
                    b = packed[y, x, p * pixel + q]
                    image[p, y, x, q] = b if rounds else low + span * (b / 255.0)


@nb.njit(cache=True, nogil=True)
def _bytes_round_trip(flat, params, height, width, planes):  # pragma: no cover - JIT
    """:func:`jpeg_artefacts` of uint8 bytes ``flat``: HWC or 2-d (``planes`` 1) as they are,
    CHW RGB (``planes`` 3) as RGBX words (:mod:`.pixel_words`: one vectorised pass each way,
    where a byte loop into RGB triples goes a value at a time). A copy goes through the codec,
    so the image is kept where it fails."""
    n, words = height * width, planes == 3
    quads = np.empty(n if words else 0, np.uint32)
    packed = quads.view(np.uint8) if words else np.empty(flat.size, np.uint8)
    if words:
        interleave(flat, 3, n, quads)
    else:
        copy_bytes(packed, 0, flat, 0, flat.size)
    if _round_trip(packed, height, width, 4 if words else flat.size // n, int(params[1])):
        params[0] = -1.0  # failed (apply_photo_steps raises): the image is kept
    elif words:
        planes_from_words(quads, 3, flat)
    else:
        copy_bytes(flat, 0, packed, 0, flat.size)


@nb.njit(cache=True, nogil=True)
def jpeg_artefacts(image, params, tag):  # pragma: no cover - JIT
    """``params = (apply, quality, low, high, rounds)``; ``image`` of 1 or 3 channels. See
    the module docstring. Where libjpeg-turbo fails (out of memory), ``params[0]`` is set to
    -1, which the caller raises on, and the image is kept."""
    if params[0] == 0.0:
        return
    low, high, rounds = params[-3], params[-2], params[-1] != 0.0
    planes, height, width, pixel = image.shape
    if rounds and (planes == 1 or (planes == 3 and pixel == 1)):  # bytes: no value mapping
        _bytes_round_trip(image.reshape(image.size).view(np.uint8), params, height, width, planes)
        return
    packed = np.empty((height, width, planes * pixel), np.uint8)
    _pack(image, packed, low, high - low, rounds)
    if _round_trip(packed.reshape(packed.size), height, width, planes * pixel, int(params[1])):
        params[0] = -1.0  # failed (apply_photo_steps raises): the image is kept
        return
    _unpack(packed, image, low, high - low, rounds)
