"""The colour jitter's vector steps as inline LLVM, each with its plain-numba twin: the hue
shift of sixteen RGB pixels, the jitter's parts on 64 pixels in registers, and the contrast
mean's running sums.

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

:func:`parts64_intrinsic` runs the jitter's parts in their drawn order on 64 pixels (four
such vectors a channel) loaded once: a pass a part loaded and stored every value once a part.
:func:`lane_sums_intrinsic` keeps the contrast mean's 64 running sums in registers across a
block. :func:`hue_pixel` is the hue's definition (torchvision's ``_rgb2hsv``, shift,
``_hsv2rgb``, in the branch-free form :mod:`.colour` describes); the ``*_plain`` twins apply
the definitions a value at a time, and the tests compare the two kinds bit for bit.
:func:`~ffcv_pairs.kernels.twins.pick` binds :func:`hue16`, :func:`parts64` and
:func:`lane_sums` to one kind (``FFCV_PAIRS_PLAIN_KERNELS=1``: the twins)."""

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
    "B_CLAMP",
    "B_NONE",
    "B_TOP",
    "C_CLAMP",
    "C_TOP",
    "HUE",
    "HUE_LANES",
    "PARTS_LANES",
    "SKIP",
    "SUM_LANES",
    "S_CLAMP",
    "S_TOP",
    "hue16",
    "hue16_intrinsic",
    "hue16_plain",
    "hue_pixel",
    "lane_sums",
    "lane_sums_intrinsic",
    "lane_sums_plain",
    "parts64",
    "parts64_intrinsic",
    "parts64_plain",
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


def _most(builder, a, c):  # numba's max(a, c)
    return builder.select(builder.fcmp_ordered(">", c, a), c, a)


def _least(builder, a, c):  # numba's min(a, c)
    return builder.select(builder.fcmp_ordered("<", c, a), c, a)


def _hue_ir(builder, x, y, z, turn):
    """:func:`hue_pixel`'s steps on ``<16 x float>`` values: the new R, G, B."""
    floor = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_V, [_V]), "llvm.floor.v16f32"
    )
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_V, [_V, _V, _V]), "llvm.fma.v16f32"
    )
    v, low = _most(builder, x, _most(builder, y, z)), _least(builder, x, _least(builder, y, z))
    spread = builder.fsub(v, low)
    is_x, is_y = builder.fcmp_ordered("==", v, x), builder.fcmp_ordered("==", v, y)
    num = builder.select(
        is_x, builder.fsub(y, z), builder.select(is_y, builder.fsub(z, x), builder.fsub(x, y))
    )
    base = builder.select(is_x, _splat(0.0), builder.select(is_y, _splat(2.0), _splat(4.0)))
    den = builder.select(builder.fcmp_ordered(">", spread, _splat(0.0)), spread, _splat(1.0))
    h = builder.fadd(builder.fadd(base, builder.fdiv(num, den)), turn)
    out = []
    for n in (5.0, 3.0, 1.0):
        k = builder.fadd(h, _splat(n))
        turns = builder.call(floor, [builder.fmul(k, _splat(1.0 / 6.0))])
        k = builder.call(fma, [_splat(-6.0), turns, k])  # k - 6 turns: the product exact
        w = _most(builder, _least(builder, k, builder.fsub(_splat(4.0), k)), _splat(0.0))
        out.append(builder.fsub(v, _least(builder, builder.fmul(spread, w), spread)))
    return out


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
        turn = splat(builder, args[4], HUE_LANES)
        for p, value in zip(ptrs, _hue_ir(builder, x, y, z, turn)):
            builder.store(value, p, align=4)
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


#: The codes of :func:`parts64`'s stages, a row ``(code, factor, value, 0)`` each (``value``:
#: the contrast's ``(1 - c) * mean``, the saturation's ``1 - s``, the hue's turn): brightness
#: ``f t`` as it is, up to 1, clamped; contrast ``f t + value`` up to 1, clamped; saturation
#: up to 1, clamped; hue; and the end of the stages.
B_NONE, B_TOP, B_CLAMP, C_TOP, C_CLAMP, S_TOP, S_CLAMP, HUE, SKIP = range(9)
_GRAY = (0.2989, 0.587, 0.114)  # as kernels/colour
_GROUPS = 4  # <16 x float> vectors a channel a call of parts64
PARTS_LANES = HUE_LANES * _GROUPS  # pixels a call of parts64


def _clamp_ir(builder, v, low):
    """numba's ``min(max(v, 0), 1)`` (``low``), or ``min(v, 1)``."""
    return _least(builder, _most(builder, v, _splat(0.0)) if low else v, _splat(1.0))


def _part_ir(builder, case, f, value, x, y, z):
    """Stage ``case`` (not :data:`SKIP`) on the ``<16 x float>`` values of R, G, B: the
    operations of :func:`parts64_plain`, in its order."""
    if case == HUE:
        return _hue_ir(builder, x, y, z, value)
    if case >= S_TOP:  # saturation: the gray from the three channels first
        total = builder.fadd(builder.fmul(_splat(_GRAY[0]), x), builder.fmul(_splat(_GRAY[1]), y))
        gray = builder.fmul(value, builder.fadd(total, builder.fmul(_splat(_GRAY[2]), z)))
        return [_clamp_ir(builder, builder.fadd(builder.fmul(f, c), gray), case == S_CLAMP)
                for c in (x, y, z)]  # fmt: skip
    out = [builder.fmul(f, c) for c in (x, y, z)]
    if case >= C_TOP:
        out = [builder.fadd(c, value) for c in out]
    if case == B_NONE:
        return out
    return [_clamp_ir(builder, c, case in (B_CLAMP, C_CLAMP)) for c in out]


def _stage_loop(builder, vals, cell):
    """The loop over the stages on the values ``vals`` (``<16 x float>``, R's groups, then
    G's, then B's): a branch on each code, to :data:`SKIP` or the fourth; the values after."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    entry = builder.block
    head, pick_, work, merge, done = (
        builder.append_basic_block(f"parts64.{name}")
        for name in ("head", "pick", "work", "merge", "done")
    )
    builder.branch(head)
    builder.position_at_end(head)
    k = builder.phi(i64)
    now = [builder.phi(_V) for _ in vals]
    k.add_incoming(ir.Constant(i64, 0), entry)
    for phi, v in zip(now, vals):
        phi.add_incoming(v, entry)
    builder.cbranch(builder.icmp_signed("<", k, ir.Constant(i64, 4)), pick_, done)
    builder.position_at_end(pick_)
    code = builder.fptosi(cell(k, 0), i32)
    builder.cbranch(builder.icmp_signed("<", code, ir.Constant(i32, SKIP)), work, done)
    builder.position_at_end(work)
    f, value = (splat(builder, cell(k, field), HUE_LANES) for field in (1, 2))
    switch = builder.switch(code, merge)
    outs = [(work, now)]
    for case in range(SKIP):
        block = builder.append_basic_block(f"parts64.case{case}")
        switch.add_case(ir.Constant(i32, case), block)
        builder.position_at_end(block)
        new = list(now)
        for q in range(_GROUPS):
            rgb = _part_ir(builder, case, f, value, *now[q::_GROUPS])
            new[q::_GROUPS] = rgb
        outs.append((builder.block, new))
        builder.branch(merge)
    builder.position_at_end(merge)
    for c, phi in enumerate(now):
        joined = builder.phi(_V)
        for block, new in outs:
            joined.add_incoming(new[c], block)
        phi.add_incoming(joined, merge)
    k.add_incoming(builder.add(k, ir.Constant(i64, 1)), merge)
    builder.branch(head)
    builder.position_at_end(done)
    return now


@intrinsic
def parts64_intrinsic(typingctx, r, g, b, j, stages):  # pragma: no cover - JIT
    """Pixels ``j .. j + 63`` of the float32 rows ``r``, ``g``, ``b`` (C-contiguous, each at
    least ``j + 64`` long: unchecked) through the ``stages`` (float32 ``(4, 4)``, see
    :data:`B_NONE`) in order, loaded once and stored once: the values stay in twelve ``<16 x
    float>`` registers from one part to the next, where a pass a part loads and stores them
    each time. A stage is a branch on its code (the same for a whole image: predicted); each
    part is :func:`parts64_plain`'s operations, in its order."""
    row = types.Array(types.float32, 1, "C")
    table = types.Array(types.float32, 2, "C")
    if (r, g, b) != (row, row, row) or not isinstance(j, types.Integer) or stages != table:
        raise TypingError(f"parts64 takes three float32[::1] rows, an index, a table; got {r}")
    sig = types.void(r, g, b, j, stages)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        index = context.cast(builder, args[3], signature.args[3], types.intp)
        ptrs = [
            element_pointer(
                context, builder, row, args[c], builder.add(index, ir.Constant(i64, 16 * q)), _V
            )
            for c in range(3)
            for q in range(_GROUPS)
        ]

        def cell(k, field):
            at = builder.add(builder.mul(k, ir.Constant(i64, 4)), ir.Constant(i64, field))
            ptr = element_pointer(context, builder, table, args[4], at, ir.FloatType())
            return builder.load(ptr)

        vals = _stage_loop(builder, [builder.load(p, align=4) for p in ptrs], cell)
        for p, v in zip(ptrs, vals):
            builder.store(v, p, align=4)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def parts64_plain(r, g, b, j, stages):  # pragma: no cover - JIT
    """:func:`parts64_intrinsic`'s twin, a pixel at a time: the definition (the stages up
    to the first :data:`SKIP`)."""
    zero, one = np.float32(0.0), np.float32(1.0)
    wr, wg, wb = np.float32(_GRAY[0]), np.float32(_GRAY[1]), np.float32(_GRAY[2])
    for i in range(j, j + PARTS_LANES):
        x, y, z = r[i], g[i], b[i]
        for k in range(4):
            code, f, value = int(stages[k, 0]), stages[k, 1], stages[k, 2]
            if code >= SKIP:
                break
            if code == HUE:
                x, y, z = hue_pixel(x, y, z, value)
                continue
            if code >= S_TOP:
                gray = value * (wr * x + wg * y + wb * z)
                x, y, z = f * x + gray, f * y + gray, f * z + gray
            elif code >= C_TOP:
                x, y, z = f * x + value, f * y + value, f * z + value
            else:
                x, y, z = f * x, f * y, f * z
            if code in (B_CLAMP, C_CLAMP, S_CLAMP):
                x, y, z = max(x, zero), max(y, zero), max(z, zero)
            if code != B_NONE:
                x, y, z = min(x, one), min(y, one), min(z, one)
        r[i], g[i], b[i] = x, y, z


parts64 = pick(parts64_intrinsic, parts64_plain)
