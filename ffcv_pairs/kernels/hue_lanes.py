"""The hue shift of sixteen RGB pixels at a time, as inline LLVM, and its plain-numba twin.

The hue is most of the colour jitter's time (about 60 vector instructions for eight pixels:
a division, three floors, the clamps). numba's loops vectorise it eight float32 lanes wide,
as LLVM prefers 256-bit vectors on the CPUs that have AVX-512. :func:`hue16_intrinsic`
writes the same steps on ``<16 x float>`` vectors: one 512-bit register where the CPU has
AVX-512, two 256-bit halves where it has AVX2 (LLVM splits them), the same values either
way. Each step is the IR numba emits for the plain code: ``max(a, b)`` is ``b > a ? b : a``
and ``min(a, b)`` is ``b < a ? b : a`` (ordered compares), ``np.floor`` is ``llvm.floor``,
and no fast-math flag is set, so LLVM changes no rounding. One step is fused: ``k - 6 *
floor(k / 6)`` is one multiply-add (``llvm.fma``), as the product is exact (``6 f``, ``f``
whole and below ``2**21``: ``|k|`` is about ``|turn| + 10`` at most, so any ``|turn| <
10**6`` keeps it), so its one rounding is the subtraction's.

:func:`hue_pixel` is the definition (torchvision's ``_rgb2hsv``, shift, ``_hsv2rgb``, in the
branch-free form :mod:`.colour` describes); :func:`hue16_plain` applies it to sixteen pixels,
and the tests compare the two kinds bit for bit. :func:`~ffcv_pairs.kernels.twins.pick` binds
:func:`hue16` to one kind (``FFCV_PAIRS_PLAIN_KERNELS=1``: the twin).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from .llvmir import element_pointer, splat
from .twins import pick

__all__ = [
    "HUE_LANES",
    "SUM_LANES",
    "hue16",
    "hue16_intrinsic",
    "hue16_plain",
    "hue_pixel",
    "lane_sums",
    "lane_sums_intrinsic",
    "lane_sums_plain",
]

HUE_LANES = 16  # pixels a call
SUM_LANES = 64  # running sums of lane_sums
_V = ir.VectorType(ir.FloatType(), HUE_LANES)
_SUM_PART = 8  # running sums a register: <8 x double>


@nb.njit(cache=True, nogil=True)
def hue_pixel(x, y, z, turn):  # pragma: no cover - JIT
    """R, G, B (float32 ``x, y, z``) with the HSV hue plus ``turn`` sixths of a turn: with
    ``v`` the largest and ``spread`` = ``v`` - the smallest, channel ``n`` (R 5, G 3, B 1) is
    ``v - spread * clamp(min(k, 4 - k), 0, 1)``, ``k = (n + h) mod 6``, spelled
    ``min(spread * max(w, 0), spread)`` (the same value: rounding is monotone, ``spread >= 0``)."""
    zero, four = np.float32(0.0), np.float32(4.0)
    six, sixth = np.float32(6.0), np.float32(1.0 / 6.0)
    v, low = max(x, max(y, z)), min(x, min(y, z))
    spread = v - low
    # torchvision's cases: R largest first, then G, then B
    num = y - z if v == x else (z - x if v == y else x - y)
    base = zero if v == x else (np.float32(2.0) if v == y else np.float32(4.0))
    h = base + num / (spread if spread > zero else np.float32(1.0)) + turn
    k = h + np.float32(5.0)
    k = k - six * np.floor(k * sixth)
    r = v - min(spread * max(min(k, four - k), zero), spread)
    k = h + np.float32(3.0)
    k = k - six * np.floor(k * sixth)
    g = v - min(spread * max(min(k, four - k), zero), spread)
    k = h + np.float32(1.0)
    k = k - six * np.floor(k * sixth)
    b = v - min(spread * max(min(k, four - k), zero), spread)
    return r, g, b


def _splat(value: float) -> ir.Constant:
    return ir.Constant(_V, [float(np.float32(value))] * HUE_LANES)


@intrinsic
def hue16_intrinsic(typingctx, r, g, b, j, turn):  # pragma: no cover - JIT
    """Pixels ``j .. j + 15`` of the float32 C-contiguous 1-d arrays ``r``, ``g``, ``b``
    (each at least ``j + 16`` long: unchecked) through :func:`hue_pixel` with ``turn``
    (float32), in place, as ``<16 x float>`` vectors."""
    row = types.Array(types.float32, 1, "C")
    if (r, g, b) != (row, row, row) or not isinstance(j, types.Integer) or turn != types.float32:
        raise TypingError(f"hue16 takes three float32[::1] rows, an index, a float32; got {r}")
    sig = types.void(r, g, b, j, turn)

    def codegen(context, builder, signature, args):
        index = context.cast(builder, args[3], signature.args[3], types.intp)
        ptrs = [
            element_pointer(context, builder, signature.args[c], args[c], index, _V)
            for c in range(3)
        ]
        x, y, z = (builder.load(p, align=4) for p in ptrs)

        def most(a, c):  # numba's max(a, c)
            return builder.select(builder.fcmp_ordered(">", c, a), c, a)

        def least(a, c):  # numba's min(a, c)
            return builder.select(builder.fcmp_ordered("<", c, a), c, a)

        floor = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_V, [_V]), "llvm.floor.v16f32"
        )
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_V, [_V, _V, _V]), "llvm.fma.v16f32"
        )
        v, low = most(x, most(y, z)), least(x, least(y, z))
        spread = builder.fsub(v, low)
        is_x, is_y = builder.fcmp_ordered("==", v, x), builder.fcmp_ordered("==", v, y)
        num = builder.select(
            is_x, builder.fsub(y, z), builder.select(is_y, builder.fsub(z, x), builder.fsub(x, y))
        )
        base = builder.select(is_x, _splat(0.0), builder.select(is_y, _splat(2.0), _splat(4.0)))
        den = builder.select(builder.fcmp_ordered(">", spread, _splat(0.0)), spread, _splat(1.0))
        h = builder.fadd(
            builder.fadd(base, builder.fdiv(num, den)), splat(builder, args[4], HUE_LANES)
        )
        for p, n in zip(ptrs, (5.0, 3.0, 1.0)):
            k = builder.fadd(h, _splat(n))
            turns = builder.call(floor, [builder.fmul(k, _splat(1.0 / 6.0))])
            k = builder.call(fma, [_splat(-6.0), turns, k])  # k - 6 turns: the product exact
            w = most(least(k, builder.fsub(_splat(4.0), k)), _splat(0.0))
            builder.store(builder.fsub(v, least(builder.fmul(spread, w), spread)), p, align=4)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def hue16_plain(r, g, b, j, turn):  # pragma: no cover - JIT
    """:func:`hue16_intrinsic`'s twin: :func:`hue_pixel` on each of the sixteen pixels."""
    for i in range(j, j + HUE_LANES):
        r[i], g[i], b[i] = hue_pixel(r[i], g[i], b[i], turn)


hue16 = pick(hue16_intrinsic, hue16_plain)


@intrinsic
def lane_sums_intrinsic(typingctx, row, a, chunks, acc):  # pragma: no cover - JIT
    """``acc[k] += row[a + 64 * i + k]`` (float32 widened to float64) for ``i`` in
    ``range(chunks)``, then ``k``: each of the 64 running sums in the order of its values, as
    :func:`lane_sums_plain`, but held in eight ``<8 x double>`` registers across the loop
    (numba's loop loads and stores them for every 64 values). ``row``: float32, ``acc``:
    float64, both C-contiguous 1-d, unchecked (``row`` at least ``a + 64 * chunks`` long,
    ``acc`` 64)."""
    row_t, acc_t = types.Array(types.float32, 1, "C"), types.Array(types.float64, 1, "C")
    ints = isinstance(a, types.Integer) and isinstance(chunks, types.Integer)
    if (row, acc) != (row_t, acc_t) or not ints:
        raise TypingError(f"lane_sums takes float32[::1], two ints, float64[::1]; got {row}")
    sig = types.void(row, a, chunks, acc)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        part_f = ir.VectorType(ir.FloatType(), _SUM_PART)
        part_d = ir.VectorType(ir.DoubleType(), _SUM_PART)
        start = context.cast(builder, args[1], signature.args[1], types.intp)
        count = context.cast(builder, args[2], signature.args[2], types.intp)
        ptrs = [
            element_pointer(context, builder, acc_t, args[3], ir.Constant(i64, m), part_d)
            for m in range(0, SUM_LANES, _SUM_PART)
        ]
        first = [builder.load(p, align=8) for p in ptrs]
        entry = builder.block
        head = builder.append_basic_block("lane_sums.head")
        body = builder.append_basic_block("lane_sums.body")
        done = builder.append_basic_block("lane_sums.done")
        builder.branch(head)
        builder.position_at_end(head)
        i = builder.phi(i64)
        sums = [builder.phi(part_d) for _ in ptrs]
        i.add_incoming(ir.Constant(i64, 0), entry)
        for s, v in zip(sums, first):
            s.add_incoming(v, entry)
        builder.cbranch(builder.icmp_signed("<", i, count), body, done)
        builder.position_at_end(body)
        base = builder.add(start, builder.mul(i, ir.Constant(i64, SUM_LANES)))
        added = []
        for m, s in enumerate(sums):
            at = builder.add(base, ir.Constant(i64, m * _SUM_PART))
            x = builder.load(element_pointer(context, builder, row_t, args[0], at, part_f), align=4)
            added.append(builder.fadd(s, builder.fpext(x, part_d)))
        i.add_incoming(builder.add(i, ir.Constant(i64, 1)), body)
        for s, v in zip(sums, added):
            s.add_incoming(v, body)
        builder.branch(head)
        builder.position_at_end(done)
        for p, s in zip(ptrs, sums):
            builder.store(s, p, align=8)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def lane_sums_plain(row, a, chunks, acc):  # pragma: no cover - JIT
    """:func:`lane_sums_intrinsic`'s twin: the definition, a value at a time."""
    for i in range(chunks):
        for k in range(SUM_LANES):
            acc[k] += row[a + SUM_LANES * i + k]


lane_sums = pick(lane_sums_intrinsic, lane_sums_plain)
