"""Sums of 64 bytes at a time, as inline LLVM: a zero-extended vector reduction.

LLVM lowers ``reduce.add(zext <64 x i8>)`` to ``psadbw`` on x86 (eight 8-byte sums
per instruction); numba's own loop over ``uint8`` widens every byte to 32 bits
first and runs at less than half that speed. The image means of the contrast op
are sums like these: :func:`clamped_sums` gives what a brightness that clamps at 255 needs in
one pass.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["WIDTH", "clamped_sums"]

WIDTH = 64  # bytes per vector


def _reduce(builder, vec):
    """``sum(zext(vec))`` as i32."""
    wide_t = ir.VectorType(ir.IntType(32), WIDTH)
    fn = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.IntType(32), [wide_t]),
        f"llvm.vector.reduce.add.v{WIDTH}i32",
    )
    return builder.call(fn, [builder.zext(vec, wide_t)])


@intrinsic
def _sums64(typingctx, arr, start, floor):  # pragma: no cover - JIT
    """For the 64 bytes ``x`` at ``arr[start:]``: ``(sum(x), sum(max(x - floor, 0)),
    #{x > floor})``, from one load."""
    sig = types.UniTuple(types.int64, 3)(arr, types.intp, types.uint8)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        vec_t = ir.VectorType(ir.IntType(8), WIDTH)
        ptr = builder.bitcast(builder.gep(a.data, [args[1]]), vec_t.as_pointer())
        x = builder.load(ptr, align=1)
        splat = cgutils.pack_array(builder, [args[2]] * WIDTH)
        floor = builder.load(
            builder.bitcast(cgutils.alloca_once_value(builder, splat), vec_t.as_pointer())
        )
        sub = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vec_t, [vec_t, vec_t]), f"llvm.usub.sat.v{WIDTH}i8"
        )
        umin = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vec_t, [vec_t, vec_t]), f"llvm.umin.v{WIDTH}i8"
        )
        above = builder.call(sub, [x, floor])
        count = builder.call(umin, [above, ir.Constant(vec_t, [1] * WIDTH)])
        i64 = ir.IntType(64)
        sums = [builder.zext(_reduce(builder, v), i64) for v in (x, above, count)]
        return context.make_tuple(builder, signature.return_type, sums)

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def clamped_sums(seg, t):  # pragma: no cover - JIT
    """``(sum of the values below t, count of the values >= t)`` over a uint8 segment
    ``seg``, ``1 <= t``, in one pass (``t > 255``: the plain sum and 0)."""
    n = seg.shape[0]
    floor = min(t - 1, 255)
    total, above, count, k = np.int64(0), np.int64(0), np.int64(0), 0
    f = np.uint8(floor)
    while k + WIDTH <= n:
        s, a, c = _sums64(seg, k, f)
        total, above, count, k = total + s, above + a, count + c, k + WIDTH
    for j in range(k, n):
        v = np.int64(seg[j])
        total += v
        if v > floor:
            above, count = above + v - floor, count + 1
    # Each value >= t adds v to the total and v - floor to above.
    return total - above - floor * count, count
