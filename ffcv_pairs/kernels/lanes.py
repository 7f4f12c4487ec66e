"""Eight linear blends per plane from two 8-value windows, as inline LLVM: in-lane permutes.

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
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["LANES", "MAX_SPAN", "PERMUTE", "blend8", "make_blend8"]

LANES = 8  # outputs per call; two windows of LANES values, one per half
MAX_SPAN = LANES - 2  # largest left-tap offset in a window (its right tap is the next value)
PERMUTE = bool(llvm.get_host_cpu_features().get("avx", False))

_HALF = LANES // 2
_F8 = ir.VectorType(ir.FloatType(), LANES)
_F4 = ir.VectorType(ir.FloatType(), _HALF)
_I8 = ir.VectorType(ir.IntType(32), LANES)


def _splat(value, vec_t):
    return ir.Constant(vec_t, [value] * vec_t.count)


def _pointer(context, builder, arr_t, arr, index, elem_t):
    data = context.make_array(arr_t)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [index]), elem_t.as_pointer())


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


def make_blend8(permute: bool):
    """:func:`blend8` with permutes (``permute``: needs AVX) or with scalar loads."""

    @intrinsic
    def blend8(typingctx, srcs, starts, offsets, at, weights, dsts, to):  # pragma: no cover - JIT
        """For each plane ``(src, dst)`` of the tuples ``srcs`` and ``dsts``:
        ``dst[to + t] = a + (b - a) * weights[at + t]`` for ``t < 8``, where ``a = src[s + i]``,
        ``b = src[s + i + 1]``, ``i = offsets[at + t]`` (int32, ``0 <= i <= MAX_SPAN``) and
        ``s = starts[at // 4]`` for ``t < 4``, ``starts[at // 4 + 1]`` for the others.

        Reads ``src[s : s + 8]`` (the caller pads the rows).
        """
        sig = types.void(srcs, starts, offsets, types.intp, weights, dsts, types.intp)

        def codegen(context, builder, signature, args):
            srcs_t, starts_t, offsets_t, _, weights_t, dsts_t, _ = signature.args
            srcs_v, starts_v, offsets_v, at, weights_v, dsts_v, to = args
            first = builder.lshr(at, ir.Constant(at.type, 2))
            first_p = _pointer(context, builder, starts_t, starts_v, first, ir.IntType(64))
            starts = (
                builder.load(first_p),
                builder.load(builder.gep(first_p, [ir.Constant(ir.IntType(32), 1)])),
            )
            left = builder.load(_pointer(context, builder, offsets_t, offsets_v, at, _I8), align=4)
            right = builder.add(left, _splat(1, _I8))
            w = builder.load(_pointer(context, builder, weights_t, weights_v, at, _F8), align=4)
            for k in range(len(srcs_t)):
                src = builder.extract_value(srcs_v, k)

                def load4(i, k=k, src=src):
                    ptr = _pointer(context, builder, srcs_t[k], src, i, _F4)
                    return builder.load(ptr, align=4)

                def load1(i, k=k, src=src):
                    return builder.load(
                        _pointer(context, builder, srcs_t[k], src, i, ir.FloatType())
                    )

                if permute:
                    a, b = _permuted_taps(builder, load4, starts, (left, right))
                else:
                    a, b = _loaded_taps(builder, load1, starts, (left, right))
                blend = builder.fmul(builder.fsub(b, a), w, flags=["contract"])
                out = builder.fadd(a, blend, flags=["contract"])
                dst = builder.extract_value(dsts_v, k)
                builder.store(out, _pointer(context, builder, dsts_t[k], dst, to, _F8), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return blend8


blend8 = make_blend8(PERMUTE)
