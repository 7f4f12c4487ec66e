"""Eight-value vector steps of the resize, as inline LLVM: blends by in-lane permutes,
widened row blends, and the cast of an output line.

The horizontal pass of a resize reads two taps per output at indices known only
at run time, which numba's loops compile to two scalar loads per output (LLVM
emits no gathers where they are slow, as on AMD). Here eight consecutive outputs
are one vector: outputs 0-3 take their taps from one 8-value window of the row,
outputs 4-7 from another, so four 16-byte loads (the windows' halves) and two
in-lane variable permutes and a blend per tap (``vpermilps``, cheap on every AVX
CPU, where a lane-crossing ``vpermps`` is not on AMD) fetch each tap for all
eight outputs. The tap offsets and weights are shared by the
planes of a row (one call blends up to three planes).

Where the host has no AVX, :func:`blend8` builds the same vectors from scalar
loads (:data:`PERMUTE` is False): the same values, at the scalar speed.
:func:`make_blend8` makes either kind, so tests can compare them.

:func:`rows8` (the vertical pass: eight uint8 values of two rows, widened and
blended) and :func:`store8` (eight float32 values cast to the output's dtype) are
plain vector IR. A numba loop over a row of 30-60 values vectorises 32 at a time
and runs the rest one by one; eight at a time, with one overlapping last step,
keeps every value in a vector. All three take an array and element offsets, never a
slice: a slice is a new reference, an atomic count on memory that every loader
thread shares.

Each intrinsic (``*_intrinsic``; :func:`make_blend8` makes the blend's) has a plain-numba
twin (``*_plain``): a loop over the eight values, the definition the tests compare it
with bit for bit. The public names are bound to one kind at import
(:func:`~ffcv_pairs.kernels.twins.pick`: ``FFCV_PAIRS_PLAIN_KERNELS=1`` picks the twins).
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

from .llvmir import element_pointer, splat
from .twins import pick

__all__ = [
    "LANES",
    "MAX_SPAN",
    "PERMUTE",
    "blend8",
    "blend8_intrinsic",
    "blend8_plain",
    "make_blend8",
    "rows8",
    "rows8_intrinsic",
    "rows8_plain",
    "store8",
    "store8_intrinsic",
    "store8_plain",
]

LANES = 8  # outputs per call; two windows of LANES values, one per half
MAX_SPAN = LANES - 2  # largest left-tap offset in a window (its right tap is the next value)
PERMUTE = bool(llvm.get_host_cpu_features().get("avx", False))

_HALF = LANES // 2
_F8 = ir.VectorType(ir.FloatType(), LANES)
_F4 = ir.VectorType(ir.FloatType(), _HALF)
_I8 = ir.VectorType(ir.IntType(32), LANES)


def _splat(value, vec_t):
    return ir.Constant(vec_t, [value] * vec_t.count)


def _permuted_taps(builder, load4, starts, offsets):
    """The taps at ``offsets`` (per half, into the windows at ``starts``) by permutes."""
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_F8, [_F8, _I8]), "llvm.x86.avx.vpermilvar.ps.256"
    )
    both = ir.Constant(_I8, list(range(LANES)))
    four = ir.Constant(starts[0].type, _HALF)
    lo = builder.shuffle_vector(load4(starts[0]), load4(starts[1]), both)
    hi = builder.shuffle_vector(
        load4(builder.add(starts[0], four)), load4(builder.add(starts[1], four)), both
    )
    taps = []
    for idx in offsets:
        upper = builder.icmp_signed(">", idx, _splat(_HALF - 1, _I8))
        taps.append(builder.select(upper, builder.call(fn, [hi, idx]), builder.call(fn, [lo, idx])))
    return taps


def _loaded_taps(builder, load1, starts, offsets):
    """The same taps as :func:`_permuted_taps`, from scalar loads."""
    taps = []
    for idx in offsets:
        vec = ir.Constant(_F8, ir.Undefined)
        for t in range(LANES):
            i = builder.sext(
                builder.extract_element(idx, ir.Constant(ir.IntType(32), t)), starts[0].type
            )
            value = load1(builder.add(starts[t // _HALF], i))
            vec = builder.insert_element(vec, value, ir.Constant(ir.IntType(32), t))
        taps.append(vec)
    return taps


def _row_start(context, builder, arr_t, arr, row):
    """Element offset of ``row`` in a C-contiguous 2-D array (``row * shape[1]``)."""
    shape = context.make_array(arr_t)(context, builder, arr).shape
    return builder.mul(row, builder.extract_value(shape, 1))


def make_blend8(permute: bool):
    """:func:`blend8` with permutes (``permute``: needs AVX) or with scalar loads."""

    @intrinsic
    def blend8_intrinsic(
        typingctx, src, dst, ks, starts, offsets, at, weights
    ):  # pragma: no cover - JIT
        """For each plane ``k`` of the tuple ``ks`` (rows of the float32 2-D arrays ``src``
        and ``dst``): ``dst[k, at + t] = a + (b - a) * weights[at + t]`` for ``t < 8``, where
        ``a = src[k, s + i]``, ``b = src[k, s + i + 1]``, ``i = offsets[at + t]`` (int32,
        ``0 <= i <= MAX_SPAN``) and ``s = starts[at // 4]`` for ``t < 4``,
        ``starts[at // 4 + 1]`` for the others.

        Reads ``src[k, s : s + 8]`` (the caller pads the rows).
        """
        sig = types.void(src, dst, ks, starts, offsets, types.intp, weights)

        def codegen(context, builder, signature, args):
            src_t, dst_t, ks_t, starts_t, offsets_t, _, weights_t = signature.args
            src_v, dst_v, ks_v, starts_v, offsets_v, at, weights_v = args
            first = builder.lshr(at, ir.Constant(at.type, 2))
            first_p = element_pointer(context, builder, starts_t, starts_v, first, ir.IntType(64))
            starts = (
                builder.load(first_p),
                builder.load(builder.gep(first_p, [ir.Constant(ir.IntType(32), 1)])),
            )
            left = builder.load(
                element_pointer(context, builder, offsets_t, offsets_v, at, _I8), align=4
            )
            right = builder.add(left, _splat(1, _I8))
            w = builder.load(
                element_pointer(context, builder, weights_t, weights_v, at, _F8), align=4
            )
            for j in range(len(ks_t)):
                k = builder.extract_value(ks_v, j)
                row = _row_start(context, builder, src_t, src_v, k)
                row_starts = tuple(builder.add(row, s) for s in starts)

                def load4(i):
                    return builder.load(
                        element_pointer(context, builder, src_t, src_v, i, _F4), align=4
                    )

                def load1(i):
                    return builder.load(
                        element_pointer(context, builder, src_t, src_v, i, ir.FloatType())
                    )

                if permute:
                    a, b = _permuted_taps(builder, load4, row_starts, (left, right))
                else:
                    a, b = _loaded_taps(builder, load1, row_starts, (left, right))
                blend = builder.fmul(builder.fsub(b, a), w, flags=["contract"])
                out = builder.fadd(a, blend, flags=["contract"])
                d = builder.add(_row_start(context, builder, dst_t, dst_v, k), at)
                builder.store(out, element_pointer(context, builder, dst_t, dst_v, d, _F8), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return blend8_intrinsic


def _as_float32(context, builder, value, dtype):
    """A vector of ``dtype`` values as float32, as ``np.float32(x)`` converts one."""
    if isinstance(dtype, types.Float):
        return value if dtype.bitwidth == 32 else builder.fptrunc(value, _F8)
    return (builder.sitofp if dtype.signed else builder.uitofp)(value, _F8)


@intrinsic
def rows8_intrinsic(typingctx, src, i0, i1, weight, half, out, o):  # pragma: no cover - JIT
    """``out[o + t] = a + (b - a) * weight + half`` for ``t < 8``, where ``a = src[i0 + t]``
    and ``b = src[i1 + t]`` (any integer or float dtype, converted to float32; ``out``:
    float32, any shape, ``o`` its element offset). Multiply and add contract to one fused
    multiply-add where the CPU has it."""
    numeric = isinstance(src.dtype, (types.Integer, types.Float))
    if not numeric or out.dtype != types.float32:
        raise TypeError(f"rows8 blends numbers into float32, not {src.dtype} into {out.dtype}")
    sig = types.void(src, types.intp, types.intp, types.float32, types.float32, out, types.intp)

    def codegen(context, builder, signature, args):
        src_t, _, _, _, _, out_t, _ = signature.args
        src_v, i0, i1, weight, half, out_v, o = args
        vec = ir.VectorType(context.get_value_type(src_t.dtype), LANES)

        def widened(i):
            v = builder.load(element_pointer(context, builder, src_t, src_v, i, vec), align=1)
            return _as_float32(context, builder, v, src_t.dtype)

        a, b = widened(i0), widened(i1)
        w, h = splat(builder, weight, LANES), splat(builder, half, LANES)
        blend = builder.fmul(builder.fsub(b, a), w, flags=["contract"])
        value = builder.fadd(builder.fadd(a, blend, flags=["contract"]), h)
        builder.store(value, element_pointer(context, builder, out_t, out_v, o, _F8), align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def store8_intrinsic(typingctx, line, i, dst, d):  # pragma: no cover - JIT
    """``dst[d + t] = line[i + t]`` for ``t < 8``: float32 to ``dst``'s dtype, as numba's
    own cast of a value in range (integers truncate: the resize adds 0.5 before, to round
    half up)."""
    if line.dtype != types.float32 or not isinstance(dst.dtype, (types.Integer, types.Float)):
        raise TypeError(f"store8 casts float32 to an integer or float dtype, not {dst.dtype}")
    sig = types.void(line, types.intp, dst, types.intp)

    def codegen(context, builder, signature, args):
        line_t, _, dst_t, _ = signature.args
        line_v, i, dst_v, d = args
        value = builder.load(element_pointer(context, builder, line_t, line_v, i, _F8), align=4)
        bits = dst_t.dtype.bitwidth
        if isinstance(dst_t.dtype, types.Float):
            out_t = ir.VectorType(context.get_value_type(dst_t.dtype), LANES)
            value = value if bits == 32 else builder.fpext(value, out_t)
        else:  # via int32 (int64 for 64-bit): a uint8 value above 127 is in range there
            wide = ir.VectorType(ir.IntType(max(bits, 32)), LANES)
            out_t = ir.VectorType(ir.IntType(bits), LANES)
            value = builder.fptosi(value, wide)
            value = value if bits >= 32 else builder.trunc(value, out_t)
        builder.store(value, element_pointer(context, builder, dst_t, dst_v, d, out_t), align=1)
        return context.get_dummy_value()

    return sig, codegen


# The plain twins: loops over the eight values, the contract of each intrinsic above in
# numba's own terms. The blends carry their own ``contract`` flag, as the intrinsics'
# instructions do, and are not inlined by numba: a function without fastmath flags takes
# its caller's, and one inlined by numba compiles with its caller's. So a multiply and an
# add fuse (one rounding) exactly where the intrinsics' do, whatever the caller says.


@nb.njit(cache=True, nogil=True, fastmath={"contract"})
def blend8_plain(src, dst, ks, starts, offsets, at, weights):  # pragma: no cover - JIT
    """:func:`make_blend8`'s twin: the two taps of each output read one by one."""
    for t in range(LANES):
        s = starts[at // _HALF + t // _HALF] + offsets[at + t]
        w = weights[at + t]
        for k in ks:
            a = src[k, s]
            dst[k, at + t] = a + (src[k, s + 1] - a) * w


@nb.njit(cache=True, nogil=True, fastmath={"contract"})
def rows8_plain(src, i0, i1, weight, half, out, o):  # pragma: no cover - JIT
    """:func:`rows8_intrinsic`'s twin (``src`` 1-d; ``out`` flat, as there)."""
    flat, w, h = out.reshape(-1), np.float32(weight), np.float32(half)
    for t in range(LANES):
        a = np.float32(src[i0 + t])
        mixed = a + (np.float32(src[i1 + t]) - a) * w
        flat[o + t] = mixed + h


def _stored(x, dst):  # pragma: no cover - typed by the overload below
    """``x`` (float32) as :func:`store8_intrinsic` converts it for ``dst``'s dtype."""
    raise NotImplementedError("only callable from jitted code")


@overload(_stored, jit_options={"nogil": True})
def _stored_overload(x, dst):
    if isinstance(dst.dtype, types.Float):
        return lambda x, dst: x
    if not isinstance(dst.dtype, types.Integer):
        raise TypeError(f"store8 casts float32 to an integer or float dtype, not {dst.dtype}")
    if dst.dtype in (types.int64, types.uint64):
        return lambda x, dst: np.int64(x)
    return lambda x, dst: np.int32(x)  # then truncated by the store, as the intrinsic does


@nb.njit(cache=True, nogil=True)
def store8_plain(line, i, dst, d):  # pragma: no cover - JIT
    """:func:`store8_intrinsic`'s twin (``line`` and ``dst`` flat, as there)."""
    src, out = line.reshape(-1), dst.reshape(-1)
    for t in range(LANES):
        out[d + t] = _stored(src[i + t], out)


blend8_intrinsic = make_blend8(PERMUTE)  # the permute where the host has AVX
blend8 = pick(blend8_intrinsic, blend8_plain)
rows8 = pick(rows8_intrinsic, rows8_plain)
store8 = pick(store8_intrinsic, store8_plain)
