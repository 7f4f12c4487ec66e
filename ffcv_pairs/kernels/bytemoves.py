"""Byte moves for the decoders, as inline LLVM: row copies, reversed rows, fills.

A call to ``memcpy`` (or a slice assignment) costs more than the copy at
64-byte rows, and numba does not vectorise a byte loop with computed indices,
so rows move as 64/32/16-byte vectors with an overlapping last vector (a byte
shuffle reverses one); long runs go to ``memcpy``. Intrinsics are inlined into
their caller and cacheable (a ctypes ``memcpy`` is not).

Each intrinsic (``*_intrinsic``) has a plain-numba twin (``*_plain``): byte loops,
the definition the tests compare it with. The public names are bound to one kind
at import (:func:`~ffcv_pairs.kernels.twins.pick`: ``FFCV_PAIRS_PLAIN_KERNELS=1``
picks the twins).
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
    "GAP",
    "copy_bytes",
    "copy_bytes_intrinsic",
    "copy_bytes_plain",
    "fill_bytes",
    "fill_bytes_intrinsic",
    "fill_bytes_plain",
    "fill_gap",
    "fill_gap_intrinsic",
    "fill_gap_plain",
    "prefetch",
    "prefetch_intrinsic",
    "prefetch_plain",
    "reverse_bytes",
    "reverse_bytes_intrinsic",
    "reverse_bytes_plain",
]

_VECTORS = (64, 32, 16)  # vector widths for row copies, widest first (LLVM splits them
# into what the CPU has: one AVX-512 move per 64-byte row, four SSE moves without it)
_LARGE = 256  # longer runs go to the C library's memcpy
GAP = 8  # fill_gap's widest gap (bytes of one vector)


def _move(builder, dptr, sptr, k, width, reverse):
    """One vector: ``dst[k : k+width] = src[k : k+width]``, or with ``reverse``
    ``dst[k + j] = src[-(k + j)]`` (``sptr`` then points at the last source byte)."""
    i64, vec = ir.IntType(64), ir.VectorType(ir.IntType(8), width)
    if reverse:
        src = builder.gep(sptr, [builder.sub(ir.Constant(i64, 1 - width), k)])
    else:
        src = builder.gep(sptr, [k])
    value = builder.load(builder.bitcast(src, vec.as_pointer()), align=1)
    if reverse:
        mask = ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width - 1, -1, -1)))
        value = builder.shuffle_vector(value, ir.Constant(vec, None), mask)
    builder.store(value, builder.bitcast(builder.gep(dptr, [k]), vec.as_pointer()), align=1)


def _vector_run(builder, dptr, sptr, n, reverse):
    """Emit ``dst[k] = src[k]`` (or ``src[-k]``) for ``k < n``, with no byte loop above 16.

    ``n >= _VECTORS[0]``: whole vectors, then one that overlaps the previous; a
    shorter run goes to :func:`_short_run`.
    """
    i64 = ir.IntType(64)
    widest = _VECTORS[0]
    width = ir.Constant(i64, widest)
    with builder.if_else(builder.icmp_signed(">=", n, width)) as (then, otherwise):
        with then:
            with cgutils.for_range(builder, builder.sdiv(n, width)) as loop:
                _move(builder, dptr, sptr, builder.mul(loop.index, width), widest, reverse)
            rem = builder.srem(n, width)
            with builder.if_then(builder.icmp_signed("!=", rem, ir.Constant(i64, 0))):
                _move(builder, dptr, sptr, builder.sub(n, width), widest, reverse)
        with otherwise:
            _short_run(builder, dptr, sptr, n, reverse, _VECTORS[1:])


def _short_run(builder, dptr, sptr, n, reverse, widths):
    """A run shorter than twice ``widths[0]``: two overlapping vectors of the widest width
    that fits; below the narrowest, a byte loop."""
    if not widths:
        with cgutils.for_range(builder, n) as loop:
            k = builder.neg(loop.index) if reverse else loop.index
            builder.store(builder.load(builder.gep(sptr, [k])), builder.gep(dptr, [loop.index]))
        return
    i64 = ir.IntType(64)
    width = ir.Constant(i64, widths[0])
    with builder.if_else(builder.icmp_signed(">=", n, width)) as (then, otherwise):
        with then:
            _move(builder, dptr, sptr, ir.Constant(i64, 0), widths[0], reverse)
            _move(builder, dptr, sptr, builder.sub(n, width), widths[0], reverse)
        with otherwise:
            _short_run(builder, dptr, sptr, n, reverse, widths[1:])


def _run_codegen(reverse):
    def codegen(context, builder, signature, args):
        dst_v, d0_v, src_v, s0_v, n_v = args
        d_arr = context.make_array(signature.args[0])(context, builder, dst_v)
        s_arr = context.make_array(signature.args[2])(context, builder, src_v)
        dptr = builder.gep(d_arr.data, [d0_v])
        sptr = builder.gep(s_arr.data, [s0_v])
        if reverse:
            _vector_run(builder, dptr, sptr, n_v, True)
        else:
            large = builder.icmp_signed(">", n_v, ir.Constant(ir.IntType(64), _LARGE))
            with builder.if_else(large) as (big, small):
                with big:
                    cgutils.raw_memcpy(builder, dptr, sptr, n_v, 1)
                with small:
                    _vector_run(builder, dptr, sptr, n_v, False)
        return context.get_dummy_value()

    return codegen


@intrinsic
def copy_bytes_intrinsic(typingctx, dst, d0, src, s0, n):  # pragma: no cover - JIT
    """``dst[d0:d0+n] = src[s0:s0+n]`` for 1-d uint8 arrays (no overlap).

    Inline vector moves for row-sized runs (a call to ``memcpy``, or a
    slice assignment, costs more than the copy at 64-byte rows; numba does not
    vectorise a byte loop), ``memcpy`` for long ones. An intrinsic is also
    cacheable (a ctypes ``memcpy`` is not).
    """
    sig = types.void(dst, types.intp, src, types.intp, types.intp)
    return sig, _run_codegen(reverse=False)


@intrinsic
def reverse_bytes_intrinsic(typingctx, dst, d0, src, s_last, n):  # pragma: no cover - JIT
    """``dst[d0 + k] = src[s_last - k]`` for ``k < n``: a vector at a time (a byte shuffle)."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)
    return sig, _run_codegen(reverse=True)


@intrinsic
def fill_bytes_intrinsic(typingctx, dst, d0, value, n):  # pragma: no cover - JIT
    """``dst[d0:d0+n] = value`` for a 1-d uint8 array (``memset``: a numba byte loop with
    computed indices is not vectorised)."""
    sig = types.void(dst, types.intp, types.uint8, types.intp)

    def codegen(context, builder, signature, args):
        dst_v, d0_v, value_v, n_v = args
        d_arr = context.make_array(signature.args[0])(context, builder, dst_v)
        cgutils.memset(builder, builder.gep(d_arr.data, [d0_v]), n_v, value_v)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fill_gap_intrinsic(typingctx, dst, d0, value, n):  # pragma: no cover - JIT
    """``dst[d0:d0+n] = value`` for ``0 <= n <= GAP``, as one load, select and store of
    :data:`GAP` bytes, which rewrites ``dst[d0+n : d0+GAP]`` with what is there (a byte
    loop, or ``memset``, costs several times as much). Within :data:`GAP` bytes of the end
    of ``dst`` a byte loop writes the ``n`` bytes instead: the vector would reach past the
    array (a fault at the end of a mapping; a race with whoever owns the bytes after it).
    The planes kernel fills the gap at the end of every row but the last, so it always
    takes the vector."""
    sig = types.void(dst, types.intp, types.uint8, types.intp)

    def codegen(context, builder, signature, args):
        dst_v, d0_v, value_v, n_v = args
        arr = context.make_array(signature.args[0])(context, builder, dst_v)
        i32, vec, gap = (
            ir.IntType(32),
            ir.VectorType(ir.IntType(8), GAP),
            ir.Constant(n_v.type, GAP),
        )
        fits = builder.icmp_signed(">=", builder.sub(arr.nitems, d0_v), gap)
        with builder.if_else(fits, likely=True) as (vector, bytewise):
            with vector:
                ptr = element_pointer(context, builder, signature.args[0], dst_v, d0_v, vec)
                old = builder.load(ptr, align=1)
                lanes = ir.Constant(ir.VectorType(i32, GAP), list(range(GAP)))
                splat_n, splat_v = (
                    splat(builder, builder.trunc(n_v, i32), GAP),
                    splat(builder, value_v, GAP),
                )
                inside = builder.icmp_unsigned("<", lanes, splat_n)
                builder.store(builder.select(inside, splat_v, old), ptr, align=1)
            with bytewise:
                count = builder.select(builder.icmp_signed("<", n_v, gap), n_v, gap)
                with cgutils.for_range(builder, count) as loop:
                    at = builder.gep(arr.data, [builder.add(d0_v, loop.index)])
                    builder.store(value_v, at)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_intrinsic(typingctx, arr, i):  # pragma: no cover - JIT
    """Hint the CPU to bring the cache line of ``arr[i]`` in (a read, kept in every cache
    level); no fault for any address: the resize asks for source rows it will read a few
    output rows later, so their misses overlap with the work on the rows before."""
    sig = types.void(arr, types.intp)

    def codegen(context, builder, signature, args):
        arr_v, i_v = args
        i8, i32 = ir.IntType(8), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8.as_pointer(), i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        ptr = element_pointer(context, builder, signature.args[0], arr_v, i_v, i8)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


# The plain twins: byte loops, the contract of each intrinsic above in numba's own terms.


@nb.njit(cache=True, nogil=True)
def copy_bytes_plain(dst, d0, src, s0, n):  # pragma: no cover - JIT
    """:func:`copy_bytes_intrinsic`'s twin, a byte at a time."""
    for k in range(n):
        dst[d0 + k] = src[s0 + k]


@nb.njit(cache=True, nogil=True)
def reverse_bytes_plain(dst, d0, src, s_last, n):  # pragma: no cover - JIT
    """:func:`reverse_bytes_intrinsic`'s twin, a byte at a time."""
    for k in range(n):
        dst[d0 + k] = src[s_last - k]


@nb.njit(cache=True, nogil=True)
def fill_bytes_plain(dst, d0, value, n):  # pragma: no cover - JIT
    """:func:`fill_bytes_intrinsic`'s twin, a byte at a time."""
    v = np.uint8(value)
    for k in range(n):
        dst[d0 + k] = v


@nb.njit(cache=True, nogil=True)
def fill_gap_plain(dst, d0, value, n):  # pragma: no cover - JIT
    """:func:`fill_gap_intrinsic`'s twin: the ``min(n, GAP)`` bytes, nothing after them."""
    v = np.uint8(value)
    for k in range(min(n, GAP)):
        dst[d0 + k] = v


@nb.njit(cache=True, nogil=True)
def prefetch_plain(arr, i):  # pragma: no cover - JIT
    """:func:`prefetch_intrinsic`'s twin: no hint at all (a prefetch changes no byte)."""
    return None


copy_bytes = pick(copy_bytes_intrinsic, copy_bytes_plain)
reverse_bytes = pick(reverse_bytes_intrinsic, reverse_bytes_plain)
fill_bytes = pick(fill_bytes_intrinsic, fill_bytes_plain)
fill_gap = pick(fill_gap_intrinsic, fill_gap_plain)
prefetch = pick(prefetch_intrinsic, prefetch_plain)
