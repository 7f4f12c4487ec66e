"""The pixels of a warped row whose taps are not all inside the source (:mod:`.warp`): taps
mapped by the padding mode, or the fill. A row's other pixels are blended a span at a time
(:mod:`.warp_lanes`, :mod:`.warp_quads`); these are few (the border of the warped image), so
they go one at a time, out of line.
"""

from __future__ import annotations

import numba as nb

from .bytemoves import fill_bytes
from .geometry import PAD_CONSTANT, border
from .warp_points import BITS, ONE, mix

__all__ = ["all_fill", "edge_row", "listed", "taps_outside"]


@nb.njit(cache=True, nogil=True)  # out of line: border pixels are few, and it compiles once
def _edge_pixel(
    s, d, x0, y0, out, st, height, width, mode, fill, ax, ay, rounding
):  # pragma: no cover - JIT
    """One output pixel with a tap outside the image (``height`` by ``width``): taps mapped by
    the padding mode, or the fill."""
    c0, c1 = border(x0, width, mode), border(x0 + 1, width, mode)
    r0, r1 = border(y0, height, mode), border(y0 + 1, height, mode)
    row, px = st.row_in, st.pixel
    for k in range(st.planes):
        for c in range(px):
            base = k * st.plane_in + c
            v00 = fill if r0 < 0 or c0 < 0 else float(s[base + r0 * row + c0 * px])
            v01 = fill if r0 < 0 or c1 < 0 else float(s[base + r0 * row + c1 * px])
            v10 = fill if r1 < 0 or c0 < 0 else float(s[base + r1 * row + c0 * px])
            v11 = fill if r1 < 0 or c1 < 0 else float(s[base + r1 * row + c1 * px])
            d[k * st.plane_out + out + c] = mix(v00, v01, v10, v11, ax, ay, rounding)


@nb.njit(cache=True, nogil=True, inline="always")
def listed(ok, ow, edge, lo=0, hi=0, bad=-1):  # pragma: no cover - JIT
    """The pixels of a row not all inside (``ok`` of :func:`.warp._store`) in ``edge``: ``x``, or
    ``-1 - x`` for one with no point. Returns how many. When the row's ``bad`` such pixels
    are all outside ``lo:hi`` (its first pixel all inside to its last: an affine row's),
    those outside are the list, and the span is not looked at."""
    e, whole = 0, bad == ow - (hi - lo)
    for x in range(ow):
        if whole and x == lo:
            break
        if ok[x] != 3:
            edge[e] = x if ok[x] == 2 else -1 - x
            e += 1
    for x in range(hi if whole else ow, ow):
        edge[e] = x if ok[x] == 2 else -1 - x
        e += 1
    return e


@nb.njit(cache=True, nogil=True, inline="always")
def taps_outside(px, py, height, width):  # pragma: no cover - JIT
    """Whether all four taps of the fixed-point point ``(px, py)`` are outside the image."""
    x0, y0 = px >> BITS, py >> BITS
    return x0 < -1 or x0 >= width or y0 < -1 or y0 >= height


@nb.njit(cache=True, nogil=True, inline="always")
def all_fill(xs, ys, x, mode, height, width):  # pragma: no cover - JIT
    """Whether all four taps of pixel ``x``'s point are the fill (constant padding)."""
    return mode == PAD_CONSTANT and taps_outside(xs[x], ys[x], height, width)


@nb.njit(cache=True, nogil=True, inline="always")
def edge_row(
    s, d, d8, y, st, xs, ys, edge, e, ow, height, width, mode, fill, level, rounding
):  # pragma: no cover - JIT
    """Output row ``y``'s pixels listed in ``edge[:e]`` (:func:`listed`). Under uint8
    planes a run of pixels whose taps are all the fill is one byte fill a plane, ``level``
    (their blend is the fill's integer part, whatever the weights)."""
    runs, j = rounding and st.pixel == 1, 0
    while j < e:
        x = edge[j] if edge[j] >= 0 else -1 - edge[j]
        if runs and edge[j] >= 0 and all_fill(xs, ys, x, mode, height, width):
            end = j + 1
            while (
                end < e
                and edge[end] == x + end - j
                and all_fill(xs, ys, x + end - j, mode, height, width)
            ):
                end += 1
            for k in range(st.planes):
                fill_bytes(d8, k * st.plane_out + y * ow + x, level, end - j)
            j = end
            continue
        out = (y * ow + x) * st.pixel
        x0, y0, ax, ay = xs[x] >> BITS, ys[x] >> BITS, xs[x] & (ONE - 1), ys[x] & (ONE - 1)
        if edge[j] < 0 or all_fill(xs, ys, x, mode, height, width):  # no point, or all fill
            v = fill if edge[j] < 0 else mix(fill, fill, fill, fill, ax, ay, rounding)
            for k in range(st.planes):
                for c in range(st.pixel):
                    d[k * st.plane_out + out + c] = v
        else:
            _edge_pixel(s, d, x0, y0, out, st, height, width, mode, fill, ax, ay, rounding)
        j += 1
