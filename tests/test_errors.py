"""One base for every exception the package defines: ``except FfcvPairsError`` catches any
of them, and each keeps its built-in base, so ``except ValueError`` keeps working too."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import ffcv_pairs
from ffcv_pairs import FfcvPairsError

PACKAGE = Path(ffcv_pairs.__file__).parent


def _defined_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in the package, by ``module.Class``: the modules that
    define a class (found by walking the files, so a new module is not missed) are imported
    and their classes checked; ``__main__`` would run the command line."""
    found: dict[str, type[BaseException]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        tree = ast.parse(path.read_text())
        if not any(isinstance(node, ast.ClassDef) for node in ast.walk(tree)):
            continue
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(["ffcv_pairs", *(p for p in parts if p != "__init__")])
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, BaseException):
                found[f"{name}.{cls_name}"] = cls
    return found


EXCEPTIONS = _defined_exceptions()


def test_the_walk_finds_the_known_ones() -> None:
    """A walk that found nothing would pass the tests below vacuously."""
    names = {cls.__name__ for cls in EXCEPTIONS.values()}
    assert {"SourceError", "WriteError", "BetonError", "LoaderError"} <= names, names


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_exception_is_an_ffcv_pairs_error(name: str) -> None:
    assert issubclass(EXCEPTIONS[name], FfcvPairsError), f"{name} is not an FfcvPairsError"


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_public_exception_is_exported(name: str) -> None:
    """Public: listed in its module's ``__all__``; then also in the package's."""
    module_name, cls_name = name.rsplit(".", 1)
    if cls_name not in getattr(importlib.import_module(module_name), "__all__", ()):
        pytest.skip(f"{name} is private to its module")
    assert cls_name in ffcv_pairs.__all__, f"{cls_name} is missing from ffcv_pairs.__all__"
    assert getattr(ffcv_pairs, cls_name) is EXCEPTIONS[name]


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("SourceError", ValueError),
        ("BetonError", ValueError),
        ("BetonChangedError", ValueError),
        ("MemoryBudgetError", ValueError),
        ("WriteError", RuntimeError),
        ("WriteInterrupted", RuntimeError),
        ("LoaderError", RuntimeError),
        ("StatsWarning", UserWarning),
    ],
)
def test_each_keeps_its_builtin_base(name: str, builtin: type[BaseException]) -> None:
    cls = getattr(ffcv_pairs, name)
    assert issubclass(cls, builtin)
    with pytest.raises(builtin):  # what callers written before the common base catch
        raise cls("x") if name != "WriteInterrupted" else cls(15)


def test_a_source_error_from_the_writer_is_caught_by_the_base(tmp_path: Path) -> None:
    from ffcv_pairs import write_pairs

    with pytest.raises(FfcvPairsError, match="source is empty"):
        write_pairs([], tmp_path / "out.beton", progress=False)
