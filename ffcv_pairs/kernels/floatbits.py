"""float32 -> the bits of float16 and bfloat16, inline, so a conversion loop vectorises.

numba cannot type float16 or bfloat16 arrays, so kernels write their bits into
``uint16`` arrays that the caller views as ``float16`` (numpy) or
``torch.bfloat16``. Both round to nearest, ties to even, as numpy's and
torch's own casts do.

The two intrinsics (``*_intrinsic``: a bit cast, and LLVM's ``fptrunc`` to half) have
plain-numba twins (``*_plain``: numba's scalar ``view``, and the rounding spelt out on
the bits), which the tests compare with them on every float16 rounding boundary;
:func:`~ffcv_pairs.kernels.twins.pick` binds :func:`float32_bits` and
:func:`float16_bits` to one kind at import (``FFCV_PAIRS_PLAIN_KERNELS=1``: the twins).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .twins import pick

__all__ = [
    "bfloat16_bits",
    "float16_bits",
    "float16_bits_intrinsic",
    "float16_bits_plain",
    "float32_bits",
    "float32_bits_intrinsic",
    "float32_bits_plain",
]


@intrinsic
def float32_bits_intrinsic(typingctx, x):  # pragma: no cover - JIT
    """The IEEE bits of a float32, as uint32 (a bit cast: no conversion)."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@intrinsic
def float16_bits_intrinsic(typingctx, x):  # pragma: no cover - JIT
    """The bits of ``float16(x)`` for a float32 ``x``, as uint16 (LLVM's ``fptrunc``:
    one F16C instruction for 8 or 16 values where the CPU has it)."""
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(half, ir.IntType(16))

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def float32_bits_plain(x):  # pragma: no cover - JIT
    """:func:`float32_bits_intrinsic`'s twin: numba's bit view of a numpy scalar."""
    return np.float32(x).view(np.uint32)


@nb.njit(cache=True, nogil=True)
def float16_bits_plain(x):  # pragma: no cover - JIT
    """:func:`float16_bits_intrinsic`'s twin: IEEE round to nearest even on the bits. A NaN
    keeps its sign and top 10 payload bits and becomes quiet, as x86's F16C and LLVM's
    software conversion do (numpy keeps a signalling NaN signalling)."""
    u = float32_bits_plain(x)
    sign, a = (u >> np.uint32(16)) & np.uint32(0x8000), u & np.uint32(0x7FFFFFFF)
    if a > np.uint32(0x7F800000):  # NaN
        h = np.uint32(0x7E00) | ((a >> np.uint32(13)) & np.uint32(0x3FF))
    elif a >= np.uint32(0x477FF000):  # 65520 and up (a tie goes up from 65504): inf
        h = np.uint32(0x7C00)
    elif a >= np.uint32(0x38800000):  # a normal float16: rebias, then round off 13 bits
        odd = (a >> np.uint32(13)) & np.uint32(1)
        h = (a - np.uint32(112 << 23) + np.uint32(0xFFF) + odd) >> np.uint32(13)
    else:  # subnormal or zero: the value in units of 2**-24, rounded
        shift = np.uint32(126) - (a >> np.uint32(23))
        h = np.uint32(0)
        if shift <= np.uint32(24):  # from 2**-25 up (below it: zero)
            m = (a & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
            h, half = m >> shift, np.uint32(1) << (shift - np.uint32(1))
            rest = m & ((np.uint32(1) << shift) - np.uint32(1))
            if rest > half or (rest == half and (h & np.uint32(1)) != np.uint32(0)):
                h += np.uint32(1)
    return np.uint16(sign | h)


float32_bits = pick(float32_bits_intrinsic, float32_bits_plain)
float16_bits = pick(float16_bits_intrinsic, float16_bits_plain)


@nb.njit(cache=True, nogil=True, inline="always")
def bfloat16_bits(x):  # pragma: no cover - JIT
    """The bits of ``bfloat16(x)`` for a float32 ``x``: the top 16 bits, rounded to nearest
    even; a NaN stays a (quiet) NaN."""
    u = float32_bits(x)
    if x != x:
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    rounded = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(rounded >> np.uint32(16))
