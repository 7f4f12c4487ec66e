"""The whole-pixel copy of :mod:`ffcv_pairs.kernels.warp`: a uint8 sample whose matrix moves
whole pixels (flips, quarter turns, transpose, d4, whole shifts, crops, pads) is copied, not
blended: its blend weights are 1 and 0, so the bytes are the blend's.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .bytemoves import copy_bytes, fill_bytes
from .geometry import PAD_CONSTANT, border

__all__ = ["copy_whole_pixels", "whole_pixels"]


@nb.njit(cache=True, nogil=True, inline="always")
def whole_pixels(m, disp, oh, ow):  # pragma: no cover - JIT
    """True when ``m`` moves whole pixels: affine, no displacement, six whole entries, and
    the output's corners (so all of it) map within 1e8 pixels (the blend's ``_FAR`` is 1e9)."""
    if disp.shape[0] > 0 or m[2, 0] != 0.0 or m[2, 1] != 0.0 or m[2, 2] != 1.0:
        return False
    for r in range(2):
        for c in range(3):
            if not (abs(m[r, c]) < 1e8 and math.floor(m[r, c]) == m[r, c]):
                return False
    for y in (0.0, oh - 1.0):
        for x in (0.0, ow - 1.0):
            u, v = m[0, 0] * x + m[0, 1] * y + m[0, 2], m[1, 0] * x + m[1, 1] * y + m[1, 2]
            if not (abs(u) < 1e8 and abs(v) < 1e8):
                return False
    return True


@nb.njit(cache=True, nogil=True, inline="always")
def _copy_run(s, d, y, k0, r, st, height, width, ow, mode, fv):  # pragma: no cover - JIT
    """Output row ``y`` of a whole-pixel move that reads source row ``r`` from column ``k0``
    on: one run of bytes a plane (:func:`~.bytemoves.copy_bytes`, ``fill_bytes``),
    the fill either side under constant padding. False (nothing written) for the other
    padding modes where the row leaves the image."""
    lo, hi = min(max(-k0, 0), ow), max(min(width - k0, ow), 0)
    outside = r < 0 or r >= height or lo > 0 or hi < ow
    if outside and mode != PAD_CONSTANT:
        return False
    px = st.pixel
    if r < 0 or r >= height:
        lo, hi = ow, ow
    for k in range(st.planes):
        q, p = k * st.plane_out + y * ow * px, k * st.plane_in + r * st.row_in + k0 * px
        fill_bytes(d, q, fv, lo * px)
        if hi > lo:
            copy_bytes(d, q + lo * px, s, p + lo * px, (hi - lo) * px)
        fill_bytes(d, q + max(hi, lo) * px, fv, (ow - max(hi, lo)) * px)
    return True


@nb.njit(cache=True, nogil=True)
def copy_whole_pixels(s, d, m, st, height, width, oh, ow, mode, fb):  # pragma: no cover - JIT
    """:func:`~.warp.warp_bilinear` of a uint8 sample whose matrix moves whole pixels
    (:func:`whole_pixels`): each output pixel is the source pixel it lands on (the blend's
    weights are 1 and 0), mapped by the padding mode, or the fill ``fb``, as bytes."""
    at = np.empty(ow, np.int64)  # a row's source offsets, -1 for the fill
    a, b, c, e = np.int64(m[0, 0]), np.int64(m[0, 1]), np.int64(m[1, 0]), np.int64(m[1, 1])
    tx, ty, px, u = np.int64(m[0, 2]), np.int64(m[1, 2]), st.pixel, np.uint64
    for y in range(oh):
        if (
            a == 1
            and c == 0
            and _copy_run(s, d, y, b * y + tx, e * y + ty, st, height, width, ow, mode, fb)
        ):
            continue
        for x in range(ow):
            r, col = c * x + e * y + ty, a * x + b * y + tx
            if not (0 <= r < height and 0 <= col < width):
                r, col = border(r, height, mode), border(col, width, mode)
            at[x] = -1 if r < 0 or col < 0 else r * st.row_in + col * px
        for k in range(st.planes):
            p, q = k * st.plane_in, k * st.plane_out + y * ow * px
            if px == 1:
                for x in range(ow):
                    if at[x] < 0:
                        d[u(q + x)] = fb
                    else:
                        d[u(q + x)] = s[u(p + at[x])]
                continue
            for x in range(ow):
                for j in range(px):
                    if at[x] < 0:
                        d[u(q + x * px + j)] = fb
                    else:
                        d[u(q + x * px + j)] = s[u(p + at[x] + j)]
