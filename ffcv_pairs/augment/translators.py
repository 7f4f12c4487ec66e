"""The two translators (:mod:`.translate`) by library: ``PairAugment.from_torchvision`` and
``PairAugment.from_albumentations`` call :func:`from_library`; the YAML form
(``PairAugment(torchvision=[...])``, ``albumentations=[...]``) calls :func:`spec_options`,
which imports the library to build the transforms with its own defaults (:func:`build_spec`).

A YAML entry is ``{ClassName: {argument: value}}`` (or a bare class name). The class must have
a row in the library's table; its arguments must be ones its constructor takes; ``transforms:``
(torchvision's ``RandomApply``) is a list of entries, built the same way; a torchvision
``dtype`` may be written as a name (``float32`` or ``torch.float32``). Each error is one line
naming the class and the bad value, before or instead of the library's own.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from typing import Any

from .translate import Row, translate, translated_options
from .translate_albumentations import ALBUMENTATIONS, check_targets
from .translate_torchvision import TORCHVISION

__all__ = [
    "CHECKS",
    "LIBRARIES",
    "TABLES",
    "build_spec",
    "fill_in",
    "from_library",
    "spec_options",
]

#: Each library's rows, by class name.
TABLES: dict[str, Mapping[str, Row]] = {
    "torchvision": TORCHVISION,
    "albumentations": ALBUMENTATIONS,
}
#: A library's check of the pipeline as a whole, beside its rows (Albumentations' targets).
CHECKS: dict[str, Callable[[Any], None]] = {"albumentations": check_targets}
#: The module whose classes the YAML form builds, and how to install it.
LIBRARIES = {
    "torchvision": ("torchvision.transforms.v2", "pip install torchvision"),
    "albumentations": ("albumentations", "pip install 'ffcv-pairs[peers]'"),
}
_ENTRY = "{ClassName: {argument: value}}"


def from_library(
    cls: type, library: str, pipeline: Any, overrides: Mapping[str, Any], value_max: float
) -> Any:
    """``cls`` (PairAugment) from ``pipeline`` of ``library``, ``overrides`` over it."""
    check = CHECKS.get(library)
    if check is not None:
        check(pipeline)
    return translate(cls, pipeline, TABLES[library], library, overrides, value_max)


def spec_options(library: str, spec: Any, value_max: float = 255.0) -> dict[str, Any]:
    """The options of a YAML spec ``[{ClassName: {argument: value}}, ...]`` of ``library``.

    Raises:
        ModuleNotFoundError: the library is not installed (with how to install it).
        ValueError, TypeError: see :func:`build_spec` and
            :func:`~.translate.translated_options`.
    """
    module_name, hint = LIBRARIES[library]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f"augment {library}: reading this block builds the transforms with {library}, "
            f"which is not installed ({hint})"
        ) from e
    transforms = build_spec(spec, module, library)
    return translated_options(transforms, TABLES[library], library, value_max)


def build_spec(spec: Any, module: Any, library: str) -> list[Any]:
    """The transforms of a YAML spec ``[{ClassName: {argument: value}}, ...]`` (or bare
    names), built by the library's own classes from ``module`` (so its defaults hold).

    Raises:
        TypeError: ``spec`` is not a list of such entries (one line: the shape expected).
        ValueError: a class without a row (named, with the supported ones, before it is
            built), an argument its constructor does not take, or one it refuses (one line
            naming the class, the argument and the library's reason).
    """
    if isinstance(spec, str | bytes | Mapping) or not isinstance(spec, Iterable):
        raise TypeError(f"augment {library}: a list of {_ENTRY}, got {spec!r}")
    return [_build(item, module, library) for item in spec]


def _build(item: Any, module: Any, library: str) -> Any:
    name, kwargs = (item, {}) if isinstance(item, str) else _one_entry(item, library)
    table = TABLES[library]
    if name not in table:
        found = isinstance(getattr(module, name, None), type)
        what = f"{name} is not supported" if found else f"has no transform {name!r}"
        raise ValueError(f"{library} {what}; supported: {', '.join(sorted(table))}")
    cls = getattr(module, name)
    _check_arguments(cls, name, kwargs, library)
    built = {k: _argument(k, v, name, module, library) for k, v in kwargs.items()}
    try:
        return cls(**built)
    except (TypeError, ValueError) as e:
        fields_named = _validation_errors(e)
        if fields_named is not None:
            raise ValueError(f"{library} {name}: {fields_named}") from None
        given = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"{library} {name}({given}): {' '.join(str(e).split())}") from None


def _one_entry(item: Any, library: str) -> tuple[str, dict[str, Any]]:
    if isinstance(item, Mapping) and len(item) == 1:
        ((name, kwargs),) = item.items()
        if kwargs is None or isinstance(kwargs, Mapping):
            return str(name), dict(kwargs or {})
    raise TypeError(
        f"augment {library}: each entry is {_ENTRY}, a class name and a mapping of its "
        f"arguments, got {item!r}"
    )


def _check_arguments(cls: type, name: str, kwargs: Mapping[str, Any], library: str) -> None:
    """Refuse an argument ``cls``'s constructor does not name (Albumentations would only
    warn, and drop it)."""
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    takes = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in kwargs if k not in takes]
    if unknown:
        raise ValueError(
            f"{library} {name}: unknown argument(s) {', '.join(map(repr, unknown))}; it "
            f"takes {', '.join(takes) or 'none'}"
        )


def _argument(key: str, value: Any, name: str, module: Any, library: str) -> Any:
    """An argument as the constructor takes it: nested entries built, a dtype's name made
    torch's dtype."""
    if key == "transforms" and isinstance(value, list):
        return build_spec(value, module, library)
    if key == "dtype" and library == "torchvision" and isinstance(value, str):
        torch = importlib.import_module("torch")
        dtype = getattr(torch, value.removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(
                f"{library} {name}: dtype={value!r} is not a torch dtype (float32, uint8, ...)"
            )
        return dtype
    return value


def _validation_errors(error: Exception) -> str | None:
    """Pydantic's errors behind ``error`` (Albumentations' ``InitSchema``, re-raised as a
    ValueError) in one line, ``field=input: message; ...``; None if there are none."""
    errors = getattr(error.__cause__, "errors", None)
    if not callable(errors):
        return None
    parts = []
    for e in errors():
        field = ".".join(str(x) for x in e.get("loc", ()))
        given = "" if e.get("type") == "missing" or "input" not in e else f"={e['input']!r}"
        parts.append(f"{field}{given}: {e['msg']}" if field else str(e["msg"]))
    return "; ".join(parts)


def fill_in(aug: Any, options: Mapping[str, Any]) -> None:
    """Translated ``options`` into the fields of ``aug`` (a PairAugment being made) still at
    their defaults: the options given beside a translated block win over it.

    Raises:
        ValueError: an option this PairAugment does not have.
    """
    defaults = {f.name: f.default for f in fields(aug)}
    missing = sorted(set(options) - set(defaults))
    if missing:
        raise ValueError(f"augment: the pipeline needs option(s) {missing}, not in this version")
    for key, value in options.items():
        if getattr(aug, key) == defaults[key]:
            object.__setattr__(aug, key, value)
