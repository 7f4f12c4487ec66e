"""Argument checks at the boundary: each names the argument, the value given and what is
allowed, and returns the value in its plain Python form (``np.int64(3)`` -> ``3``).

Every public entry point (``make_loader``/``LoaderConfig``, ``PairAugment``,
``PairDataModule``, ``write_pairs``) checks its arguments with these, where they
enter, so a wrong type or range never surfaces as a raw error from deep inside.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "SEED_LIMIT",
    "flag",
    "integer",
    "number",
    "one_of",
    "optional",
    "pair",
    "sequence_of",
    "shown",
]

#: Seeds are hashed as 64-bit integers: ``0 <= seed < 2**63``.
SEED_LIMIT = 2**63
T = TypeVar("T")


def _plain_repr(value: Any) -> str:
    """``repr``, but a numpy scalar reads as the number it holds (``0.89``, not
    ``np.float32(0.89)``), also inside a list, tuple or dict."""
    if isinstance(value, np.floating):
        return str(value)  # numpy's shortest form: 0.89, nan, inf
    if isinstance(value, np.generic):
        return repr(value.item())
    if type(value) in (list, tuple):
        items = [_plain_repr(v) for v in value]
        if type(value) is list:
            return f"[{', '.join(items)}]"
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if type(value) is dict:
        inner = ", ".join(f"{_plain_repr(k)}: {_plain_repr(v)}" for k, v in value.items())
        return "{" + inner + "}"
    return repr(value)


def shown(value: Any) -> str:
    """``value`` as a message shows it: its ``repr``, numpy scalars as plain numbers, cut
    to 60 characters."""
    text = _plain_repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _got(value: Any) -> str:
    return f"got {shown(value)} ({type(value).__name__})"


def integer(name: str, value: Any, least: int | None = None, most: int | None = None) -> int:
    """An ``int`` (or numpy integer, not a bool or a float) in ``[least, most]``.

    Raises:
        TypeError: not an integer. ValueError: out of range.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, {_got(value)}")
    value = int(value)
    if (least is not None and value < least) or (most is not None and value > most):
        if most is None:
            raise ValueError(f"{name} must be at least {least}, got {value}")
        if least is None:
            raise ValueError(f"{name} must be at most {most}, got {value}")
        raise ValueError(f"{name} must be between {least} and {most}, got {value}")
    return value


def number(
    name: str,
    value: Any,
    least: float | None = None,
    most: float | None = None,
    above: float | None = None,
    below: float | None = None,
) -> float:
    """A finite real number (int or float, not a bool) with the bounds given: ``least``
    and ``most`` inclusive, ``above`` and ``below`` exclusive.

    Raises:
        TypeError: not a number. ValueError: not finite, or out of range.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, {_got(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    rules = [
        (least, f">= {least}", lambda v, b: v >= b),
        (above, f"> {above}", lambda v, b: v > b),
        (most, f"<= {most}", lambda v, b: v <= b),
        (below, f"< {below}", lambda v, b: v < b),
    ]
    given = [(bound, text, ok) for bound, text, ok in rules if bound is not None]
    if not all(ok(value, bound) for bound, _, ok in given):
        allowed = " and ".join(text for _, text, _ in given)
        if least is not None and most is not None and above is None and below is None:
            allowed = f"between {least} and {most}"
        raise ValueError(f"{name} must be {allowed}, got {value}")
    return value


def flag(name: str, value: Any) -> bool:
    """A ``bool`` (or numpy bool); ``0``, ``1`` or ``"yes"`` are refused.

    Raises:
        TypeError: anything else.
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, {_got(value)}")
    return bool(value)


def one_of(name: str, value: Any, options: Sequence[str]) -> str:
    """One of the strings ``options``.

    Raises:
        TypeError: not a string. ValueError: not one of them.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {list(options)}, {_got(value)}")
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {shown(value)}")
    return value


def optional(check: Callable[..., T]) -> Callable[..., T | None]:
    """``check``, letting ``None`` through."""

    def maybe(name: str, value: Any, *args: Any, **kwargs: Any) -> T | None:
        return None if value is None else check(name, value, *args, **kwargs)

    return maybe


def sequence_of(
    name: str, value: Any, check: Callable[..., T], length: int | None = None, **bounds: Any
) -> tuple[T, ...]:
    """A list or tuple (not a string) whose items pass ``check`` (with ``bounds``), of
    ``length`` items when given.

    Raises:
        TypeError: not a sequence, or an item of the wrong type. ValueError: the wrong
            length, or an item out of range.
    """
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
        what = f"a sequence of {length} values" if length else "a sequence of values"
        raise TypeError(f"{name} must be {what}, {_got(value)}")
    items = list(value)
    if length is not None and len(items) != length:
        raise ValueError(f"{name} must have {length} values, got {len(items)}: {shown(value)}")
    if not items:
        raise ValueError(f"{name} must not be empty")
    return tuple(check(f"{name}[{i}]", item, **bounds) for i, item in enumerate(items))


def pair(name: str, value: Any, check: Callable[..., T], **bounds: Any) -> tuple[T, T]:
    """Two values that pass ``check`` (with ``bounds``)."""
    low, high = sequence_of(name, value, check, 2, **bounds)
    return low, high
