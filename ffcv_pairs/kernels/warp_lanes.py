"""Eight pixels of the warp's uint8 blend at a time, as inline LLVM.

The bilinear warp (:mod:`.warp`) reads four taps per output value at offsets known only at
run time; numba compiles that loop one value at a time (the loads could alias the stores,
so LLVM does not vectorise it). Here eight consecutive outputs of a row are one vector:
two 4-byte loads per output (at ``t``: its top taps in the low bytes; at ``t + row - 2``:
its bottom taps in the high bytes, so no load reads past the last tap: a row is at least two
bytes, the blend needs ``width > 1``), as gathers, then the exact integer blend of
:func:`.warp._blend8` on the eight at once: the same integers, in 32-bit lanes where they fit
and 64-bit ones for the last step.

:func:`blend8_gather_intrinsic` has a plain-numba twin, :func:`blend8_gather_plain` (the
blend a value at a time: the definition the tests compare it with byte for byte);
:data:`blend8_gather` is the one this process runs (:func:`~.twins.pick`).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .llvmir import element_pointer, splat
from .twins import pick

__all__ = [
    "GATHER_LANES",
    "blend8_gather",
    "blend8_gather_intrinsic",
    "blend8_gather_plain",
]

GATHER_LANES = 8
_BITS = 20  # as kernels/warp
_ONE = 1 << _BITS
_HALF_BLEND = 1 << (2 * _BITS - 1)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_V32 = ir.VectorType(_I32, GATHER_LANES)
_V64 = ir.VectorType(_I64, GATHER_LANES)


def _const(value: int, vec_t: ir.VectorType) -> ir.Constant:
    return ir.Constant(vec_t, [ir.Constant(vec_t.element, value)] * GATHER_LANES)


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
    ``t = t0 + at[x + j]`` and the weights are the low ``_BITS`` bits of ``xs[x + j]``,
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
        byte = _const(0xFF, _V32)
        v00, v01 = builder.and_(top4, byte), builder.and_(builder.lshr(top4, _const(8, _V32)), byte)
        v10 = builder.and_(builder.lshr(low4, _const(16, _V32)), byte)
        v11 = builder.lshr(low4, _const(24, _V32))
        mask = _const(_ONE - 1, _V64)
        ax = builder.trunc(builder.and_(lanes(xs_t, xs_v), mask), _V32)
        ay = builder.sext(builder.trunc(builder.and_(lanes(ys_t, ys_v), mask), _V32), _V64)
        shift = _const(_BITS, _V32)
        top = builder.add(builder.shl(v00, shift), builder.mul(ax, builder.sub(v01, v00)))
        low = builder.add(builder.shl(v10, shift), builder.mul(ax, builder.sub(v11, v10)))
        wide_top = builder.sext(top, _V64)
        mixed = builder.mul(ay, builder.sext(builder.sub(low, top), _V64))
        value = builder.add(builder.shl(wide_top, _const(_BITS, _V64)), mixed)
        value = builder.add(value, _const(_HALF_BLEND, _V64))
        value = builder.ashr(value, _const(2 * _BITS, _V64))
        out_t = ir.VectorType(ir.IntType(8), GATHER_LANES)
        out = element_pointer(context, builder, d_t, d_v, q, out_t)
        builder.store(builder.trunc(value, out_t), out, align=1)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def blend8_gather_plain(s, d, t0, q, row, xs, ys, at, x):  # pragma: no cover - JIT
    """:func:`blend8_gather_intrinsic`'s twin: :func:`.warp._blend8`'s integers, a value at
    a time (``(1 - a) p + a q`` as ``p + a (q - p)``, rounded half up)."""
    mask = _ONE - 1
    for j in range(GATHER_LANES):
        t, ax, ay = t0 + at[x + j], xs[x + j] & mask, ys[x + j] & mask
        v00, v10 = np.int64(s[t]), np.int64(s[t + row])
        top = (v00 << _BITS) + ax * (np.int64(s[t + 1]) - v00)
        low = (v10 << _BITS) + ax * (np.int64(s[t + row + 1]) - v10)
        d[q + j] = ((top << _BITS) + ay * (low - top) + _HALF_BLEND) >> (2 * _BITS)


blend8_gather = pick(blend8_gather_intrinsic, blend8_gather_plain)
