"""LLVM IR pieces every intrinsic of the kernels needs: a typed pointer to an array element,
and a vector of one run-time value or of one constant."""

from __future__ import annotations

from llvmlite import ir

__all__ = ["element_pointer", "lane_constant", "splat"]


def element_pointer(context, builder, arr_t, arr, index, elem_t):
    """``&arr[index]`` as an ``elem_t`` pointer; ``index`` counts elements of ``arr``'s
    dtype from the start of its data (a flat index into a C-contiguous array of any shape)."""
    data = context.make_array(arr_t)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [index]), elem_t.as_pointer())


def splat(builder, value, count):
    """A vector of ``count`` copies of the run-time scalar ``value``."""
    i32 = ir.IntType(32)
    vec = builder.insert_element(
        ir.Constant(ir.VectorType(value.type, count), None), value, ir.Constant(i32, 0)
    )
    return builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(i32, count), [0] * count))


def lane_constant(vec_t, value):
    """A vector of type ``vec_t`` with ``value`` in every lane."""
    return ir.Constant(vec_t, [ir.Constant(vec_t.element, value)] * vec_t.count)
