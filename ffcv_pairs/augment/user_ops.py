"""Ops of the user's own: a numba function plus a small declaration, :class:`PairOp`.

Example (see ``docs/user-ops.md`` for the whole vignette)::

    @numba.njit(cache=True)
    def vignette(image, u, tag):   # image: (planes, height, width, pixel), in place
        ...

    PairAugment(hflip=0.5, user_ops=[PairOp(vignette, draws=1)])

or in the ``augment:`` block of a LightningCLI YAML::

    user_ops:
      - fn: mypackage.ops.vignette
        draws: 1

The function gets one sample's image, as a 4-d view ``(planes, height, width, pixel)``
whatever the field's axes (``(C, H, W)`` is ``(C, H, W, 1)``, ``(H, W, C)`` is ``(1, H, W, C)``,
``(H, W)`` is ``(1, H, W, 1)``), in the dtype it has there (uint8, or float32 for float
files), ``u``: its ``draws`` uniforms in ``[0, 1)``, and ``tag``: 0 for A, 1 for B. It
works in place and returns nothing. Its uniforms are hashes of ``(seed, epoch, sample, op)``,
the op's id being ``OP_USER`` plus its position in ``user_ops``: the same for every thread
count, rank and resume; a paired op's are A's and B's alike.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from numba.core.dispatcher import Dispatcher

from .._checks import flag, integer, one_of, shown
from ..kernels.hashing import OP_USER
from ..kernels.user_driver import UserDraws, user_op_signature

__all__ = ["KINDS", "MAX_DRAWS", "PairOp", "check_compiles", "pair_ops", "user_draws"]

KINDS = ("photometric", "geometric")
#: Most uniforms one op may draw per sample.
MAX_DRAWS = 1024


def _resolved(fn: Any) -> Any:
    """``fn``, or the object its import path ``'package.module.function'`` names; a numba
    dispatcher (``@numba.njit``) either way."""
    given = fn
    if isinstance(fn, str):
        module, _, attr = fn.rpartition(".")
        if not module:
            raise ValueError(
                f"user op fn={fn!r} is not an import path: give 'package.module.function'"
            )
        try:
            fn = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise ValueError(f"user op fn={fn!r}: cannot import {module!r} ({e})") from None
        except AttributeError:
            raise ValueError(f"user op fn={fn!r}: module {module!r} has no {attr!r}") from None
    if not isinstance(fn, Dispatcher):
        raise TypeError(
            f"user op fn={shown(given)} must be a numba function (decorated with "
            f"@numba.njit), got {type(fn).__name__}"
        )
    return fn


@dataclass(frozen=True)
class PairOp:
    """An op of the user's own, run on every sample after the built-in ops (geometry and
    photometric) and before normalisation and the output dtype. See the module docstring.

    Args:
        fn: ``fn(image, u, tag)``, a numba function (``@numba.njit``; ``cache=True`` saves its
            compile in later processes), or its import path ``'package.module.function'``.
        kind: ``photometric`` (values only) or ``geometric`` (moves pixels: always paired;
            refused on files with image-shaped label or extra fields, which it would not move).
        paired: A and B get the same ``u`` (and so, for a function that ignores ``tag``, the
            same change); False: each image draws its own.
        draws: Uniforms per sample (0 to :data:`MAX_DRAWS`).
        name: What messages call it; default the function's name.
    """

    fn: str | Callable[..., Any]
    kind: Literal["photometric", "geometric"] = "photometric"
    paired: bool = True
    draws: int = 0
    name: str | None = None

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("fn", _resolved(self.fn))
        put("kind", one_of("user op kind", self.kind, KINDS))
        put("paired", flag("user op paired", self.paired))
        put("draws", integer("user op draws", self.draws, 0, MAX_DRAWS))
        name = self.name if self.name is not None else self.fn.py_func.__name__  # type: ignore[union-attr]
        if not isinstance(name, str) or not name:
            raise TypeError(f"user op name must be a non-empty string, got {shown(name)}")
        put("name", name)
        if self.kind == "geometric" and not self.paired:
            raise ValueError(
                f"user op {name!r}: a geometric op is always paired (A and B must move "
                f"together), got paired=False; use kind='photometric' for a per-image op"
            )

    @classmethod
    def from_value(cls, value: Any) -> PairOp:
        """A :class:`PairOp`, or one from a mapping of its fields (a YAML ``user_ops`` entry)."""
        if isinstance(value, PairOp):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"augment user_ops entries must be PairOp or a mapping of fn, kind, paired, "
                f"draws, name; got {shown(value)} ({type(value).__name__})"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown user op option(s) {unknown}; known: {sorted(known)}")
        if "fn" not in value:
            raise ValueError(f"user op {shown(dict(value))} has no fn")
        return cls(**value)


def pair_ops(value: Any) -> tuple[PairOp, ...]:
    """``PairAugment.user_ops`` as given (a sequence of :class:`PairOp` or mappings), checked."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise TypeError(
            f"augment user_ops must be a list of PairOp (or of their options), got "
            f"{shown(value)} ({type(value).__name__})"
        )
    return tuple(PairOp.from_value(v) for v in value)


def user_draws(position: int, op: PairOp, tag: int) -> UserDraws:
    """The draws of the op at ``position`` of ``user_ops`` on field ``tag`` (0: A, 1: B)."""
    return UserDraws(OP_USER + position, 0 if op.paired else tag, tag, op.draws)


def check_compiles(op: PairOp, dtype: str) -> None:
    """Compile ``op``'s function for images of ``dtype`` (a no-op when it already is).

    Raises:
        TypeError: it does not compile for ``(image, u, tag)``, or it returns a value.
    """
    sig = user_op_signature(dtype)
    fn: Any = op.fn
    try:
        fn.compile(sig.args)
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise TypeError(
            f"user op {op.name!r} does not compile for (image: {dtype}[planes, height, width, "
            f"pixel], u: float64[draws], tag: int64): {' '.join(lines[:3])}"
        ) from e
    returns = fn.overloads[sig.args].signature.return_type
    if returns != sig.return_type:
        raise TypeError(
            f"user op {op.name!r} returns {returns}: it must change the image in place and "
            f"return nothing"
        )
