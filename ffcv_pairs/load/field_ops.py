"""Upstream FFCV ``Operation``\\ s appended per field, as FFCV users write them today::

    make_loader(path, batch_size=64, field_ops={'A': [MyOp()], 'label': [OtherOp()]})

Each field's ops run, in order, after this package's CPU ops (the decoder, the built-in
augmentation and any ``user_ops``) and before ``ToTensor``; normalisation and the output dtype
come after them, so they see the stored dtype. They run as upstream's pipeline runs them: an
op whose state is ``jit_mode`` has its code compiled by numba (in every process: upstream's
ops are closures that numba cannot cache), others are called as they are.

What they lose, against the package's own ops and ``user_ops``: nothing pairs them (an op on
``A`` and one on ``B`` draw apart: ``numpy.random`` per call), and their random numbers are
not keyed by sample, so they change with the thread count, the batch composition and a
resume. See ``docs/user-ops.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numba as nb
from ffcv.pipeline.compiler import Compiler
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

from .._checks import shown

__all__ = ["FieldOps", "UpstreamOp", "check_field_ops", "field_ops_of"]

#: Per field name, the upstream ops appended to it.
FieldOps = Mapping[str, Sequence[Operation]]


def check_field_ops(value: Any) -> dict[str, tuple[Operation, ...]] | None:
    """``field_ops`` as given, checked: None, or a mapping of field names to lists of upstream
    ``Operation`` instances (the names are checked against the file when it is opened).

    Raises:
        TypeError: not such a mapping, naming the entry.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            f"field_ops must be a mapping of field names to lists of ffcv Operations, got "
            f"{shown(value)} ({type(value).__name__})"
        )
    out: dict[str, tuple[Operation, ...]] = {}
    for name, ops in value.items():
        if not isinstance(name, str):
            raise TypeError(f"field_ops keys must be field names, got {shown(name)}")
        if isinstance(ops, Operation) or not isinstance(ops, Sequence):
            raise TypeError(
                f"field_ops[{name!r}] must be a list of ffcv Operations, got {shown(ops)} "
                f"({type(ops).__name__})"
            )
        for op in ops:
            if not isinstance(op, Operation):
                raise TypeError(
                    f"field_ops[{name!r}] holds {shown(op)} ({type(op).__name__}), not an "
                    f"ffcv.pipeline.operation.Operation"
                )
        out[name] = tuple(ops)
    return out


def field_ops_of(
    field_ops: Mapping[str, Sequence[Operation]] | None, fields: Sequence[str], path: object
) -> dict[str, list[Operation]]:
    """Each of ``fields``' appended ops, wrapped in :class:`UpstreamOp` (empty: none).

    Raises:
        ValueError: ``field_ops`` names a field the file at ``path`` lacks.
    """
    given = dict(field_ops or {})
    missing = sorted(set(given) - set(fields))
    if missing:
        raise ValueError(
            f"{path}: field_ops names field(s) {missing} the file lacks; its fields: {list(fields)}"
        )
    return {name: [UpstreamOp(op) for op in given.get(name, ())] for name in fields}


class UpstreamOp(Operation):
    """``op`` run as upstream's pipeline would: its code compiled by numba where its state
    says ``jit_mode`` (this package's pipeline compiles nothing itself, see
    :mod:`~ffcv_pairs.load.pipeline`), parallel where it says ``is_parallel`` and upstream's
    ``Compiler`` has more than one thread."""

    def __init__(self, op: Operation):
        super().__init__()
        self.op, self.jit = op, False
        #: The numba dispatcher of the op's code, once generated in ``jit_mode`` (else None).
        self.compiled: Any = None

    def accept_field(self, field: Any) -> None:
        self.op.accept_field(field)

    def accept_globals(self, metadata: Any, memory_read: Any) -> None:
        self.op.accept_globals(metadata, memory_read)

    def declare_shared_memory(self, previous_state: State) -> Any:
        return self.op.declare_shared_memory(previous_state)

    def declare_state_and_memory(self, previous_state: State) -> Any:
        state, memory = self.op.declare_state_and_memory(previous_state)
        self.jit = bool(state.jit_mode)
        return state, memory

    def generate_code_for_shared_state(self) -> Callable | None:
        code = self.op.generate_code_for_shared_state()
        return None if code is None else self._compiled(code)

    def generate_code(self) -> Callable:
        return self._compiled(self.op.generate_code())

    def _compiled(self, code: Callable) -> Callable:
        if not self.jit:
            return code
        parallel = bool(getattr(code, "is_parallel", False)) and Compiler.num_threads > 1
        jitted = nb.njit(fastmath=True, nogil=True, error_model="numpy", parallel=parallel)(code)
        self.compiled = jitted

        def run(*args: Any) -> Any:
            return jitted(*args)

        run.with_indices = getattr(code, "with_indices", False)  # type: ignore[attr-defined]
        return run
