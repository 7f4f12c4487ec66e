"""Eight pixels of the warp's uint8 blend at a time, as inline LLVM.

The bilinear warp (:mod:`.warp`) reads four taps per output value at offsets known only at
run time; numba compiles that loop one value at a time (the loads could alias the stores,
so LLVM does not vectorise it). Here eight consecutive outputs of a row are one vector:
two 4-byte loads per output (at ``t``: its top taps in the low bytes; at ``t + row - 2``:
its bottom taps in the high bytes, so no load reads past the last tap: a row is at least two
bytes, the blend needs ``width > 1``), as gathers, then the exact integer blend of
:func:`.warp_points.mix` on the eight at once, in 32-bit lanes (its weights have
:data:`~.warp_points.WEIGHT_BITS` bits).

The source points of an affine row come eight at a time too (:func:`taps8_intrinsic`): the
float64 operations numba's per-pixel loop does, in 512-bit lanes where the CPU has them, the
product by ``2**BITS`` and the half added in one multiply-add (the product is exact, so the
sum rounds once either way), then the same stores.

Each intrinsic has a plain-numba twin, ``*_plain`` (a value at a time: the definition the
tests compare it with byte for byte); :data:`blend8_gather` and :data:`taps8` are the kind
this process runs (:func:`~.twins.pick`).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .llvmir import element_pointer, lane_constant, splat
from .twins import pick
from .warp_points import BITS, CUT, HALF_BLEND, ONE, SCALE, WEIGHT_BITS, blend_bytes, fixed

__all__ = [
    "GATHER_LANES",
    "blend8_gather",
    "blend8_gather_intrinsic",
    "blend8_gather_plain",
    "blend_lanes",
    "fixed_lanes",
    "taps8",
    "taps8_intrinsic",
    "taps8_plain",
]

GATHER_LANES = 8
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_V32 = ir.VectorType(_I32, GATHER_LANES)
_V64 = ir.VectorType(_I64, GATHER_LANES)


def blend_lanes(builder, v00, v01, v10, v11, ax, ay):
    """:func:`~.warp_points.blend_bytes` on vectors of 32-bit lanes: the taps ``v00`` ..
    ``v11`` (0..255) and the weights ``ax``, ``ay`` (:func:`~.warp_points.weight`)."""
    vec_t = v00.type
    shift = lane_constant(vec_t, WEIGHT_BITS)
    top = builder.add(builder.shl(v00, shift), builder.mul(ax, builder.sub(v01, v00)))
    low = builder.add(builder.shl(v10, shift), builder.mul(ax, builder.sub(v11, v10)))
    value = builder.add(builder.shl(top, shift), builder.mul(ay, builder.sub(low, top)))
    value = builder.add(value, lane_constant(vec_t, HALF_BLEND))
    return builder.ashr(value, lane_constant(vec_t, 2 * WEIGHT_BITS))


def _gather32(builder, base, offsets):
    """``<8 x i32>`` read (unaligned) at the byte addresses ``base + offsets``."""
    ptr_t = _I32.as_pointer()
    addrs = builder.add(splat(builder, builder.ptrtoint(base, _I64), GATHER_LANES), offsets)
    ptrs = builder.inttoptr(addrs, ir.VectorType(ptr_t, GATHER_LANES))
    mask_t = ir.VectorType(ir.IntType(1), GATHER_LANES)
    fnty = ir.FunctionType(_V32, [ptrs.type, _I32, mask_t, _V32])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.gather.v8i32.v8p0")
    every = ir.Constant(mask_t, [ir.Constant(ir.IntType(1), 1)] * GATHER_LANES)
    return builder.call(fn, [ptrs, ir.Constant(_I32, 1), every, ir.Constant(_V32, None)])


@intrinsic
def blend8_gather_intrinsic(typingctx, s, d, t0, q, row, xs, ys, at, x):  # pragma: no cover - JIT
    """``d[q + j] = blend of s at t, t + 1, t + row, t + row + 1`` for ``j < 8``, where
    ``t = t0 + at[x + j]`` and the weights are :func:`~.warp_points.weight` of ``xs[x + j]``,
    ``ys[x + j]`` (``s``, ``d``: uint8, C-contiguous; ``xs``, ``ys``, ``at``: int64 1-d;
    every tap inside ``s`` and ``row >= 2``)."""
    if s.dtype != types.uint8 or d.dtype != types.uint8:
        raise TypeError(f"blend8_gather blends uint8 into uint8, not {s.dtype} into {d.dtype}")
    sig = types.void(s, d, types.intp, types.intp, types.intp, xs, ys, at, types.intp)

    def codegen(context, builder, signature, args):
        s_t, d_t, _, _, _, xs_t, ys_t, at_t, _ = signature.args
        s_v, d_v, t0, q, row, xs_v, ys_v, at_v, x = args

        def lanes(arr_t, arr):
            ptr = element_pointer(context, builder, arr_t, arr, x, _V64)
            return builder.load(ptr, align=8)

        base = element_pointer(context, builder, s_t, s_v, ir.Constant(_I64, 0), ir.IntType(8))
        t = builder.add(lanes(at_t, at_v), splat(builder, t0, GATHER_LANES))
        below = builder.add(t, splat(builder, builder.sub(row, ir.Constant(_I64, 2)), 8))
        top4, low4 = _gather32(builder, base, t), _gather32(builder, base, below)
        byte = lane_constant(_V32, 0xFF)
        v00, v01 = (
            builder.and_(top4, byte),
            builder.and_(builder.lshr(top4, lane_constant(_V32, 8)), byte),
        )
        v10 = builder.and_(builder.lshr(low4, lane_constant(_V32, 16)), byte)
        v11 = builder.lshr(low4, lane_constant(_V32, 24))
        mask, cut = lane_constant(_V64, ONE - 1), lane_constant(_V64, CUT)

        def weights(arr_t, arr):  # .warp_points.weight, eight at a time
            return builder.trunc(builder.lshr(builder.and_(lanes(arr_t, arr), mask), cut), _V32)

        value = blend_lanes(builder, v00, v01, v10, v11, weights(xs_t, xs_v), weights(ys_t, ys_v))
        out_t = ir.VectorType(ir.IntType(8), GATHER_LANES)
        out = element_pointer(context, builder, d_t, d_v, q, out_t)
        builder.store(builder.trunc(value, out_t), out, align=1)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def blend8_gather_plain(s, d, t0, q, row, xs, ys, at, x):  # pragma: no cover - JIT
    """:func:`blend8_gather_intrinsic`'s twin: :func:`.warp_points.blend_bytes`, a value at a
    time."""
    for j in range(GATHER_LANES):
        t, ax, ay = t0 + at[x + j], xs[x + j] & (ONE - 1), ys[x + j] & (ONE - 1)
        d[q + j] = blend_bytes(s[t], s[t + 1], s[t + row], s[t + row + 1], ax, ay)


blend8_gather = pick(blend8_gather_intrinsic, blend8_gather_plain)


_F64 = ir.VectorType(ir.DoubleType(), GATHER_LANES)


def fixed_lanes(builder, b, m, fx):
    """``floor((b + m x) * 2**BITS + 1/2)`` of the pixels ``fx`` (a vector of doubles), as
    numba computes it in :func:`.warp._taps`: ``b + m x`` a product then a sum (no
    contraction); then one multiply-add for the product by ``2**BITS`` (exact: a power of
    two) and the sum. int64 lanes."""
    n, vec_t = fx.type.count, fx.type
    fma_t, floor_t = ir.FunctionType(vec_t, [vec_t] * 3), ir.FunctionType(vec_t, [vec_t])
    fma = cgutils.get_or_insert_function(builder.module, fma_t, f"llvm.fma.v{n}f64")
    floor = cgutils.get_or_insert_function(builder.module, floor_t, f"llvm.floor.v{n}f64")
    u = builder.fadd(splat(builder, b, n), builder.fmul(splat(builder, m, n), fx))
    scaled = builder.call(fma, [u, lane_constant(vec_t, SCALE), lane_constant(vec_t, 0.5)])
    return builder.fptosi(builder.call(floor, [scaled]), ir.VectorType(_I64, n))


@intrinsic
def taps8_intrinsic(
    typingctx, bx, by, m00, m10, width, height, row, px, xs, ys, at, ok, x
):  # pragma: no cover - JIT
    """Pixels ``x .. x + 7`` of an affine output row (``_row``'s ``near``: it reads
    ``(bx + m00 x, by + m10 x)``), stored as :func:`.warp._store` stores them (``xs``,
    ``ys``, ``at``, ``ok``: int64 1-d, at least ``x + 8`` long). Returns how many have a
    tap outside."""
    f8, i8 = types.float64, types.intp
    sig = types.intp(f8, f8, f8, f8, i8, i8, i8, i8, xs, ys, at, ok, i8)

    def codegen(context, builder, signature, args):
        bx_v, by_v, m00_v, m10_v, width_v, height_v, row_v, px_v = args[:8]
        arrays, x_v = list(zip(signature.args[8:12], args[8:12])), args[12]
        step = ir.Constant(_V64, [ir.Constant(_I64, j) for j in range(GATHER_LANES)])
        fx = builder.sitofp(builder.add(splat(builder, x_v, GATHER_LANES), step), _F64)
        sx, sy = fixed_lanes(builder, bx_v, m00_v, fx), fixed_lanes(builder, by_v, m10_v, fx)
        x0, y0 = (
            builder.ashr(sx, lane_constant(_V64, BITS)),
            builder.ashr(sy, lane_constant(_V64, BITS)),
        )

        def below(value, bound):  # 0 <= value < bound - 1, one unsigned compare
            last = builder.sub(bound, ir.Constant(_I64, 1))
            return builder.icmp_unsigned("<", value, splat(builder, last, GATHER_LANES))

        good = builder.and_(below(x0, width_v), below(y0, height_v))
        offset = builder.add(
            builder.mul(y0, splat(builder, row_v, 8)), builder.mul(x0, splat(builder, px_v, 8))
        )
        flag = builder.add(builder.zext(good, _V64), lane_constant(_V64, 2))
        values = (sx, sy, builder.select(good, offset, lane_constant(_V64, 0)), flag)
        for (arr_t, arr), value in zip(arrays, values):
            ptr = element_pointer(context, builder, arr_t, arr, x_v, _V64)
            builder.store(value, ptr, align=8)
        mask = builder.zext(builder.bitcast(good, ir.IntType(GATHER_LANES)), _I64)
        ctpop = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I64, [_I64]), "llvm.ctpop.i64"
        )
        return builder.sub(ir.Constant(_I64, GATHER_LANES), builder.call(ctpop, [mask]))

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def taps8_plain(bx, by, m00, m10, width, height, row, px, xs, ys, at, ok, x):  # pragma: no cover
    """:func:`taps8_intrinsic`'s twin: :func:`.warp._taps`' affine loop on eight pixels."""
    bad, u = np.int64(0), np.uint64
    for j in range(x, x + GATHER_LANES):
        sx, sy = fixed(bx + m00 * j), fixed(by + m10 * j)
        x0, y0 = sx >> BITS, sy >> BITS
        good = np.int64(u(x0) < u(width - 1)) & np.int64(u(y0) < u(height - 1))
        xs[j], ys[j], at[j], ok[j] = sx, sy, (y0 * row + x0 * px) * good, good + 2
        bad += 1 - good
    return bad


taps8 = pick(taps8_intrinsic, taps8_plain)
