"""Sums of 64 bytes at a time, as inline LLVM: a zero-extended vector reduction.

LLVM lowers ``reduce.add(zext <64 x i8>)`` to ``psadbw`` on x86 (eight 8-byte sums
per instruction); numba's own loop over ``uint8`` widens every byte to 32 bits
first and runs at less than half that speed. The image means of the contrast op
are sums like these: :func:`clamped_sums` gives what a brightness that clamps at 255 needs in
one pass, and the writer's per-image statistics (:func:`image_stats`) are made of them.

The two intrinsics (``*_intrinsic``) have plain-numba twins (``*_plain``), byte loops the
tests compare them with; :func:`~ffcv_pairs.kernels.twins.pick` binds :func:`sums64` and
:func:`channel_sums48` to one kind at import (``FFCV_PAIRS_PLAIN_KERNELS=1``: the twins).
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
    "STATS_FIRST",
    "STATS_LAST",
    "STATS_TOTAL",
    "WIDTH",
    "channel_sums48",
    "channel_sums48_intrinsic",
    "channel_sums48_plain",
    "clamped_sums",
    "image_stats",
    "sums64",
    "sums64_intrinsic",
    "sums64_plain",
]

WIDTH = 64  # bytes per vector
# How image_stats sums an image's values (see ffcv_pairs.format.stats.stats_kind).
STATS_FIRST, STATS_LAST, STATS_TOTAL = 0, 1, 2


def _reduce(builder, vec, width=WIDTH):
    """``sum(zext(vec))`` as i32 (``vec``: ``width`` bytes)."""
    wide_t = ir.VectorType(ir.IntType(32), width)
    fn = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.IntType(32), [wide_t]),
        f"llvm.vector.reduce.add.v{width}i32",
    )
    return builder.call(fn, [builder.zext(vec, wide_t)])


@intrinsic
def sums64_intrinsic(typingctx, arr, start, floor):  # pragma: no cover - JIT
    """For the 64 bytes ``x`` at ``arr[start:]``: ``(sum(x), sum(max(x - floor, 0)),
    #{x > floor})``, from one load."""
    sig = types.UniTuple(types.int64, 3)(arr, types.intp, types.uint8)

    def codegen(context, builder, signature, args):
        vec_t = ir.VectorType(ir.IntType(8), WIDTH)
        ptr = element_pointer(context, builder, signature.args[0], args[0], args[1], vec_t)
        x = builder.load(ptr, align=1)
        floor = splat(builder, args[2], WIDTH)
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


@intrinsic
def channel_sums48_intrinsic(typingctx, arr, start):  # pragma: no cover - JIT
    """The sums of the values ``x[q]`` with ``q % 3 == 0, 1, 2`` of the 48 bytes ``x`` at
    ``arr[start:]`` (16 interleaved 3-channel pixels), from one load and three masks."""
    sig = types.UniTuple(types.int64, 3)(arr, types.intp)

    def codegen(context, builder, signature, args):
        vec_t = ir.VectorType(ir.IntType(8), 48)
        ptr = element_pointer(context, builder, signature.args[0], args[0], args[1], vec_t)
        x = builder.load(ptr, align=1)
        sums = []
        for c in range(3):
            mask = ir.Constant(vec_t, [255 if q % 3 == c else 0 for q in range(48)])
            total = _reduce(builder, builder.and_(x, mask), 48)
            sums.append(builder.zext(total, ir.IntType(64)))
        return context.make_tuple(builder, signature.return_type, sums)

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def sums64_plain(arr, start, floor):  # pragma: no cover - JIT
    """:func:`sums64_intrinsic`'s twin, a byte at a time."""
    f = np.int64(np.uint8(floor))
    total, above, count = np.int64(0), np.int64(0), np.int64(0)
    for j in range(WIDTH):
        x = np.int64(arr[start + j])
        total += x
        if x > f:
            above, count = above + x - f, count + 1
    return total, above, count


@nb.njit(cache=True, nogil=True)
def channel_sums48_plain(arr, start):  # pragma: no cover - JIT
    """:func:`channel_sums48_intrinsic`'s twin, a byte at a time."""
    s0, s1, s2 = np.int64(0), np.int64(0), np.int64(0)
    for q in range(start, start + 48, 3):
        s0, s1, s2 = s0 + np.int64(arr[q]), s1 + np.int64(arr[q + 1]), s2 + np.int64(arr[q + 2])
    return s0, s1, s2


sums64 = pick(sums64_intrinsic, sums64_plain)
channel_sums48 = pick(channel_sums48_intrinsic, channel_sums48_plain)


@nb.njit(cache=True, nogil=True)
def clamped_sums(seg, t):  # pragma: no cover - JIT
    """``(sum of the values below t, count of the values >= t)`` over a uint8 segment
    ``seg``, ``1 <= t``, in one pass (``t > 255``: the plain sum and 0)."""
    n = seg.shape[0]
    floor = min(t - 1, 255)
    total, above, count, k = np.int64(0), np.int64(0), np.int64(0), 0
    f = np.uint8(floor)
    while k + WIDTH <= n:
        s, a, c = sums64(seg, k, f)
        total, above, count, k = total + s, above + a, count + c, k + WIDTH
    for j in range(k, n):
        v = np.int64(seg[j])
        total += v
        if v > floor:
            above, count = above + v - floor, count + 1
    # Each value >= t adds v to the total and v - floor to above.
    return total - above - floor * count, count


@nb.njit(cache=True, nogil=True)
def image_stats(images, kind, out):  # pragma: no cover - JIT
    """Per uint8 image (a row of ``images``, ``(k, n)``): ``out[i] = [max, s0, s1, s2]``
    (``out``: uint32 ``(k, 4)``). ``kind`` :data:`STATS_FIRST`: the sums of the three
    planes of ``n // 3`` values; :data:`STATS_LAST`: of the three interleaved channels;
    :data:`STATS_TOTAL`: ``s0`` the sum of all values, ``s1 = s2 = 0``."""
    n = images.shape[1]
    for i in range(images.shape[0]):
        x = images[i]
        top = np.uint8(0)
        for j in range(n):
            top = max(top, x[j])
        out[i, 0] = top
        out[i, 1], out[i, 2], out[i, 3] = 0, 0, 0
        if kind == STATS_FIRST:
            p = n // 3
            for c in range(3):
                out[i, 1 + c] = clamped_sums(x[c * p : (c + 1) * p], 256)[0]
        elif kind == STATS_LAST:
            s0, s1, s2, j = np.int64(0), np.int64(0), np.int64(0), 0
            while j + 48 <= n:
                a, b, c = channel_sums48(x, j)
                s0, s1, s2, j = s0 + a, s1 + b, s2 + c, j + 48
            for q in range(j, n):  # j is a multiple of 3
                if q % 3 == 0:
                    s0 += x[q]
                elif q % 3 == 1:
                    s1 += x[q]
                else:
                    s2 += x[q]
            out[i, 1], out[i, 2], out[i, 3] = s0, s1, s2
        else:
            out[i, 1] = clamped_sums(x, 256)[0]
