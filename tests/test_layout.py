"""The package's layout rules: imports point one way along the data path, no circles,
no module over about 400 lines, no two modules with one basename, kernels free of
configuration classes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ffcv_pairs

PACKAGE = Path(ffcv_pairs.__file__).parent

# What each folder may import from the package (besides itself and the roots).
ALLOWED = {
    "format": set(),
    "kernels": set(),
    "write": {"format", "kernels"},  # kernels.hashing: the --shuffle permutation
    "augment": {"format", "kernels"},
    "load": {"format", "kernels", "augment"},
    "lightning": {"format", "augment", "load"},
}
ROOTS = {"_version", "_upstream", "_checks", "errors"}  # importable from anywhere


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(["ffcv_pairs", *parts])] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    """Package modules ``name`` imports, anywhere in the file (function bodies too)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("ffcv_pairs"):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ffcv_pairs"))
    modules = _modules()
    return {t for t in found if t in modules and t != name}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else parts[-1]


def test_imports_point_one_way() -> None:
    bad = []
    for name, path in _modules().items():
        folder = _folder(name)
        if folder not in ALLOWED:
            continue  # the top: command-line faces and the public API
        for target in _imports(name, path):
            other = _folder(target)
            if other in ROOTS:
                continue
            if other != folder and other not in ALLOWED[folder]:
                bad.append(f"{name} imports {target}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    graph = {name: _imports(name, path) for name, path in _modules().items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state and name != "ffcv_pairs":
            visit(name, [])


def test_modules_are_small() -> None:
    big = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not big, big


def test_no_two_modules_share_a_basename() -> None:
    """One name per idea: ``write/pages.py`` next to ``kernels/pages.py`` says nothing."""
    homes: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            homes.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    shared = {name: sorted(paths) for name, paths in homes.items() if len(paths) > 1}
    assert not shared, shared


def test_kernels_know_no_configuration() -> None:
    for path in (PACKAGE / "kernels").glob("*.py"):
        for target in _imports(f"ffcv_pairs.kernels.{path.stem}", path):
            assert target.startswith("ffcv_pairs.kernels"), f"{path.name} imports {target}"


def test_no_function_takes_many_positional_parameters() -> None:
    """Keyword-only arguments (``make_loader``'s options) do not count."""
    many = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                names = [a.arg for a in args.posonlyargs + args.args]
                n = len([a for a in names if a not in ("self", "cls")])
                if n > 8:
                    many.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({n})")
    assert not many, many
