"""float32 -> the bits of float16 and bfloat16, inline, so a conversion loop vectorises.

numba cannot type float16 or bfloat16 arrays, so kernels write their bits into
``uint16`` arrays that the caller views as ``float16`` (numpy) or
``torch.bfloat16``. Both round to nearest, ties to even, as numpy's and
torch's own casts do.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

__all__ = ["bfloat16_bits", "float16_bits", "float32_bits"]


@intrinsic
def float32_bits(typingctx, x):  # pragma: no cover - JIT
    """The IEEE bits of a float32, as uint32 (a bit cast: no conversion)."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@intrinsic
def float16_bits(typingctx, x):  # pragma: no cover - JIT
    """The bits of ``float16(x)`` for a float32 ``x``, as uint16 (LLVM's ``fptrunc``:
    one F16C instruction for 8 or 16 values where the CPU has it)."""
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(half, ir.IntType(16))

    return sig, codegen


@nb.njit(cache=True, nogil=True, inline="always")
def bfloat16_bits(x):  # pragma: no cover - JIT
    """The bits of ``bfloat16(x)`` for a float32 ``x``: the top 16 bits, rounded to nearest
    even; a NaN stays a (quiet) NaN."""
    u = float32_bits(x)
    if x != x:
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    rounded = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(rounded >> np.uint32(16))
