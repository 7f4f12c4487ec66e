"""The two translators (:mod:`.translate`) by library: ``PairAugment.from_torchvision`` and
``PairAugment.from_albumentations`` call :func:`from_library`; the YAML form
(``PairAugment(torchvision=[...])``, ``albumentations=[...]``) calls :func:`spec_options`,
which imports the library to build the transforms with its own defaults."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from .translate import Row, build_spec, translate, translated_options
from .translate_albumentations import ALBUMENTATIONS
from .translate_torchvision import TORCHVISION

__all__ = ["LIBRARIES", "TABLES", "fill_in", "from_library", "spec_options"]

#: Each library's rows, by class name.
TABLES: dict[str, Mapping[str, Row]] = {
    "torchvision": TORCHVISION,
    "albumentations": ALBUMENTATIONS,
}
#: The module whose classes the YAML form builds, and how to install it.
LIBRARIES = {
    "torchvision": ("torchvision.transforms.v2", "pip install torchvision"),
    "albumentations": ("albumentations", "pip install 'ffcv-pairs[peers]'"),
}


def from_library(
    cls: type, library: str, pipeline: Any, overrides: Mapping[str, Any], value_max: float
) -> Any:
    """``cls`` (PairAugment) from ``pipeline`` of ``library``, ``overrides`` over it."""
    return translate(cls, pipeline, TABLES[library], library, overrides, value_max)


def spec_options(library: str, spec: Any, value_max: float = 255.0) -> dict[str, Any]:
    """The options of a YAML spec ``[{ClassName: {argument: value}}, ...]`` of ``library``.

    Raises:
        ModuleNotFoundError: the library is not installed (with how to install it).
        ValueError, TypeError: see :func:`~.translate.translated_options`.
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
