"""Sixteen pixels of an affine output row at a time, for uint8 images of 2 to 4 planes (RGB),
from a copy of the source with one 4-byte word per pixel.

The planar blend (:func:`~.warp_lanes.blend8_gather`) gathers two 4-byte words per output
value and plane, and those gathers set a rotation's speed. Here the source's planes are
first interleaved into one word per pixel (:func:`~.pixel_words.interleave`: plane ``k`` in
byte ``k``), so one 8-byte gather brings a pixel's two top taps in every plane and one more
its two bottom taps: a third of the gathered elements for RGB. The points come as
:func:`~.warp_lanes.taps8_intrinsic` computes them (the same float64 operations, sixteen
lanes), the blend as :func:`~.warp_points.mix` (32-bit lanes). A lane whose four taps are not
all inside reads nothing (it is masked out of the gathers) and is written as the blend of
zeros, 0: :func:`quad_row` lists it for the edge path (:func:`~.warp_edges.edge_row`), which
overwrites it.

The intrinsic has a plain-numba twin (:func:`quads16_plain`, a pixel at a time: the
definition the tests compare it with byte for byte); :data:`quads16` is the kind this process
runs (:func:`~.twins.pick`).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .bytemoves import fill_bytes
from .llvmir import element_pointer, lane_constant, splat
from .pixel_words import interleave
from .twins import pick
from .warp_edges import taps_outside
from .warp_lanes import blend_lanes, fixed_lanes
from .warp_points import BITS, CUT, ONE, blend_bytes, fixed

__all__ = [
    "QUAD_LANES",
    "quad_row",
    "quads16",
    "quads16_intrinsic",
    "quads16_plain",
    "source_words",
]

QUAD_LANES = 16
_I32, _I64, _F64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
_V32, _V64, _VF = (ir.VectorType(t, QUAD_LANES) for t in (_I32, _I64, _F64))
_HALF = ir.VectorType(_I64, QUAD_LANES // 2)


def _pick(builder, vec, first: int, count: int):
    """Lanes ``first .. first + count - 1`` of ``vec``."""
    index = ir.Constant(ir.VectorType(_I32, count), list(range(first, first + count)))
    return builder.shuffle_vector(vec, vec, index)


def _gather_words(builder, base, index, good):
    """The 8-byte words at the 4-byte words ``index`` of ``base`` (sixteen lanes, two gathers
    of eight); lanes not ``good`` read nothing and are 0."""
    fn_t = ir.FunctionType(
        _HALF, [ir.VectorType(_I64.as_pointer(), 8), _I32, ir.VectorType(ir.IntType(1), 8), _HALF]
    )
    fn = cgutils.get_or_insert_function(builder.module, fn_t, "llvm.masked.gather.v8i64.v8p0")
    start = splat(builder, builder.ptrtoint(base, _I64), 8)
    halves = []
    for first in (0, 8):
        offsets = builder.shl(_pick(builder, index, first, 8), lane_constant(_HALF, 2))
        ptrs = builder.inttoptr(builder.add(start, offsets), ir.VectorType(_I64.as_pointer(), 8))
        mask = _pick(builder, good, first, 8)
        halves.append(builder.call(fn, [ptrs, ir.Constant(_I32, 4), mask, lane_constant(_HALF, 0)]))
    words = builder.shuffle_vector(halves[0], halves[1], ir.Constant(_V32, list(range(16))))
    high = builder.lshr(words, lane_constant(_V64, 32))
    return builder.trunc(words, _V32), builder.trunc(high, _V32)


def _blend_plane(builder, words, k, ax, ay):
    """Plane ``k``'s blend (:func:`~.warp_lanes.blend_lanes`) of the taps in byte ``k`` of
    ``words`` (top left, top right, bottom left, bottom right), weights ``ax``, ``ay``."""
    shift, byte = lane_constant(_V32, 8 * k), lane_constant(_V32, 255)
    taps = [builder.and_(builder.lshr(word, shift), byte) for word in words]
    return blend_lanes(builder, *taps, ax, ay)


@intrinsic
def quads16_intrinsic(
    typingctx, quads, d, planes, plane_out, q, width, height, bx, by, m00, m10, x
):  # pragma: no cover - JIT
    """Pixels ``x .. x + 15`` of an affine output row (it reads ``(bx + m00 x, by + m10
    x)``) blended from ``quads`` (:func:`~.pixel_words.interleave` of a ``height`` by ``width``
    source) into
    ``d[k * plane_out + q + j]`` for each plane ``k < planes`` (2 to 4). Returns the bit mask
    of the lanes whose taps are not all inside (written 0)."""
    i8, f8 = types.intp, types.float64
    if quads.dtype != types.uint32 or d.dtype != types.uint8:
        raise TypeError(f"quads16 blends uint32 words into uint8, not {quads.dtype} into {d.dtype}")
    sig = types.intp(quads, d, i8, i8, i8, i8, i8, f8, f8, f8, f8, i8)

    def codegen(context, builder, signature, args):
        quads_t, d_t = signature.args[:2]
        quads_v, d_v, planes_v, plane_out, q, width_v, height_v, bx, by, m00, m10, x = args
        step = ir.Constant(_V64, [ir.Constant(_I64, j) for j in range(QUAD_LANES)])
        fx = builder.sitofp(builder.add(splat(builder, x, QUAD_LANES), step), _VF)
        sx, sy = fixed_lanes(builder, bx, m00, fx), fixed_lanes(builder, by, m10, fx)
        whole = lane_constant(_V64, BITS)
        x0, y0 = builder.ashr(sx, whole), builder.ashr(sy, whole)

        def below(value, bound):  # 0 <= value < bound - 1, one unsigned compare
            last = splat(builder, builder.sub(bound, ir.Constant(_I64, 1)), QUAD_LANES)
            return builder.icmp_unsigned("<", value, last)

        good = builder.and_(below(x0, width_v), below(y0, height_v))
        top = builder.add(builder.mul(y0, splat(builder, width_v, QUAD_LANES)), x0)
        low = builder.add(top, splat(builder, width_v, QUAD_LANES))
        base = element_pointer(context, builder, quads_t, quads_v, ir.Constant(_I64, 0), _I32)
        (t0, t1), (b0, b1) = (
            _gather_words(builder, base, top, good),
            _gather_words(builder, base, low, good),
        )

        fraction, cut = lane_constant(_V64, ONE - 1), lane_constant(_V64, CUT)

        def weights(fixed):  # .warp_points.weight, sixteen at a time
            cut_off = builder.lshr(builder.and_(fixed, fraction), cut)
            return builder.trunc(cut_off, _V32)

        ax, ay = weights(sx), weights(sy)
        out_t = ir.VectorType(ir.IntType(8), QUAD_LANES)
        for k in range(4):  # planes 0 .. planes - 1
            lit = builder.icmp_signed(">", planes_v, ir.Constant(_I64, k))
            with builder.if_then(lit, likely=k < 3):
                value = _blend_plane(builder, (t0, t1, b0, b1), k, ax, ay)
                at = builder.add(q, builder.mul(plane_out, ir.Constant(_I64, k)))
                out = element_pointer(context, builder, d_t, d_v, at, out_t)
                builder.store(builder.trunc(value, out_t), out, align=1)
        bits = builder.bitcast(builder.not_(good), ir.IntType(QUAD_LANES))
        return builder.zext(bits, _I64)

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def quads16_plain(
    quads, d, planes, plane_out, q, width, height, bx, by, m00, m10, x
):  # pragma: no cover - JIT
    """:func:`quads16_intrinsic`'s twin, a pixel at a time."""
    bits, u = np.int64(0), np.uint64
    for j in range(QUAD_LANES):
        sx, sy = fixed(bx + m00 * (x + j)), fixed(by + m10 * (x + j))
        x0, y0 = sx >> BITS, sy >> BITS
        good = u(x0) < u(width - 1) and u(y0) < u(height - 1)
        ax, ay = sx & (ONE - 1), sy & (ONE - 1)
        t = y0 * width + x0 if good else 0  # a lane not good reads nothing: its taps are 0
        w00, w01 = np.int64(quads[t]) * good, np.int64(quads[t + 1]) * good
        w10, w11 = np.int64(quads[t + width]) * good, np.int64(quads[t + width + 1]) * good
        for k in range(planes):
            shift = 8 * k
            d[k * plane_out + q + j] = blend_bytes(
                (w00 >> shift) & 255,
                (w01 >> shift) & 255,
                (w10 >> shift) & 255,
                (w11 >> shift) & 255,
                ax,
                ay,
            )
        bits |= np.int64(0 if good else 1) << j
    return bits


quads16 = pick(quads16_intrinsic, quads16_plain)


@nb.njit(cache=True, nogil=True, inline="always")
def source_words(s8, m, disp, st, height, width, ow, blends):  # pragma: no cover - JIT
    """The source's words (:func:`~.pixel_words.interleave`) where :func:`quad_row` serves a
    sample: uint8 ``blends`` (not each axis apart), 2 to 4 planes of one value a pixel, rows of
    at least sixteen pixels, an affine matrix; else an empty array."""
    affine = disp.shape[0] == 0 and m[2, 0] == 0.0 and m[2, 1] == 0.0 and m[2, 2] == 1.0
    quad = blends and affine and st.pixel == 1 and 2 <= st.planes <= 4 and ow >= QUAD_LANES
    quads = np.empty(height * width if quad else 0, np.uint32)
    if quad:
        interleave(s8, st.planes, height * width, quads)
    return quads


@nb.njit(cache=True, nogil=True, inline="always")
def quad_row(
    quads, d8, st, y, ow, width, height, bx, by, m, xs, ys, edge, level, constant
):  # pragma: no cover - JIT
    """Output row ``y`` of an affine uint8 warp by ``m`` (it reads ``(bx + m00 x, by + m10
    x)``, ``ow >= 16``) blended sixteen pixels a step (:data:`quads16`, the last step overlapping
    the one before); the pixels with a tap outside are listed in ``edge`` with their points
    in ``xs``, ``ys`` (as :func:`~.warp._taps` stores them). Returns how many.

    Under ``constant`` padding the pixels at either end of the row whose taps are all outside
    (a rotation's corners) are written as the fill, byte ``level``, here: no step blends them
    and none is listed (the edge path would write the same bytes, a pixel at a time)."""
    e, m00, m10, a, b = 0, m[0, 0], m[1, 0], 0, ow
    if constant:  # the row's points are monotone in x: its all-fill pixels are at its ends
        while a < ow and taps_outside(fixed(bx + m00 * a), fixed(by + m10 * a), height, width):
            a += 1
        while b > a and taps_outside(
            fixed(bx + m00 * (b - 1)), fixed(by + m10 * (b - 1)), height, width
        ):
            b -= 1
        for k in range(st.planes):
            fill_bytes(d8, k * st.plane_out + y * ow, level, a)
            fill_bytes(d8, k * st.plane_out + y * ow + b, level, ow - b)
    if b == a:
        return 0
    lo = min(a, ow - QUAD_LANES)
    end = max(b, lo + QUAD_LANES)
    done = lo
    for x in range(lo, end, QUAD_LANES):
        x = min(x, end - QUAD_LANES)
        q = y * ow + x
        bits = quads16(quads, d8, st.planes, st.plane_out, q, width, height, bx, by, m00, m10, x)
        bits >>= done - x  # lanes an earlier step listed are left out
        for j in range(done - x, QUAD_LANES if bits else 0):
            if (bits >> (j - (done - x))) & 1:
                xs[x + j], ys[x + j] = fixed(bx + m00 * (x + j)), fixed(by + m10 * (x + j))
                edge[e] = x + j
                e += 1
        done = x + QUAD_LANES
    return e
