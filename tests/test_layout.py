"""The package's layout rules: imports point one way along the data path, no circles,
no module over about 400 lines, no two modules with one basename, kernels free of
configuration classes, and arguments grouped for kernels in named tuples, not bare ones."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import ffcv_pairs

PACKAGE = Path(ffcv_pairs.__file__).parent
REPO = PACKAGE.parent

# What each folder may import from the package (besides itself and the roots).
ALLOWED = {
    "format": set(),
    "kernels": set(),
    "write": {"format", "kernels"},  # kernels.hashing: the --shuffle permutation
    "augment": {"format", "kernels"},
    "load": {"format", "kernels", "augment"},
    "lightning": {"format", "augment", "load"},
}
ROOTS = {"_version", "_upstream", "_checks", "_fileio", "errors"}  # importable from anywhere


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


def test_package_docstring_lists_the_folders_in_import_order() -> None:
    listed = re.findall(r"^    (\w+)/", ffcv_pairs.__doc__ or "", re.MULTILINE)
    assert sorted(listed) == sorted(ALLOWED), listed
    for i, folder in enumerate(listed):
        assert ALLOWED[folder] <= set(listed[:i]), f"{folder}/ is listed before what it imports"


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


@pytest.mark.parametrize("tree", [PACKAGE, REPO / "bench"], ids=["package", "bench"])
def test_no_two_modules_share_a_basename(tree: Path) -> None:
    """One name per idea: ``write/pages.py`` next to ``kernels/pages.py`` says nothing."""
    homes: dict[str, list[str]] = {}
    for path in tree.rglob("*.py"):
        if path.name != "__init__.py" and not path.relative_to(tree).parts[0].startswith("."):
            homes.setdefault(path.name, []).append(str(path.relative_to(tree)))
    shared = {name: sorted(paths) for name, paths in homes.items() if len(paths) > 1}
    assert not shared, shared


def test_kernels_know_no_configuration() -> None:
    """Kernels import kernels only; the version string keys their cache folder."""
    for path in (PACKAGE / "kernels").glob("*.py"):
        for target in _imports(f"ffcv_pairs.kernels.{path.stem}", path):
            ok = target.startswith("ffcv_pairs.kernels") or target == "ffcv_pairs._version"
            assert ok, f"{path.name} imports {target}"


def _is_jitted(node: ast.FunctionDef) -> bool:
    return any(
        "jit" in ast.unparse(d) or "intrinsic" in ast.unparse(d) for d in node.decorator_list
    )


def _numba_callees(trees: dict[Path, ast.Module]) -> set[str]:
    """Names that reach numba: jitted functions (``njit``, ``intrinsic``), the factories
    that build them (``make_blend8``), what is assigned from either (``blend8 = pick(...)``)
    and the named tuples of ``kernels/``, which carry values into kernels."""
    nodes = [(path, node) for path, tree in trees.items() for node in ast.walk(tree)]
    callees = {n.name for _, n in nodes if isinstance(n, ast.FunctionDef) and _is_jitted(n)}
    callees |= {
        n.name
        for path, n in nodes
        if path.parent.name == "kernels"
        and isinstance(n, ast.ClassDef)
        and any(ast.unparse(b) == "NamedTuple" for b in n.bases)
    }
    callees |= {
        n.name
        for _, n in nodes
        if isinstance(n, ast.FunctionDef)
        and not _is_jitted(n)
        and any(isinstance(m, ast.FunctionDef) and _is_jitted(m) for m in ast.walk(n))
    }
    for tree in trees.values():
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            if {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} & callees:
                callees.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return callees


def _bare_tuple_calls(scope: ast.AST, callees: set[str]) -> list[ast.Call]:
    """Calls in ``scope`` of ``callees`` (or of a local bound to one, ``kernel = a if c
    else b``) with an argument that is a tuple written there or a local bound to one."""
    tuples, aliases = set(), set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value, target = node.value, node.targets[0].id
            if isinstance(value, ast.Tuple):
                tuples.add(target)
            options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            if any(isinstance(v, ast.Name) and v.id in callees for v in options):
                aliases.add(target)
    return [
        node
        for node in ast.walk(scope)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in callees | aliases
        and any(
            isinstance(arg, ast.Tuple) or (isinstance(arg, ast.Name) and arg.id in tuples)
            for arg in [*node.args, *(k.value for k in node.keywords)]
        )
    ]


def test_kernels_take_named_tuples_not_bare_ones() -> None:
    """Arguments grouped for numba are named tuples, unpacked by name (``rows.start``), not
    bare tuples read by position (``rows[0]``): no call into a kernel passes a tuple
    written at the call (``(ya, yb)``, or a local bound to one), and no named tuple of
    ``kernels/`` declares a field as a bare ``tuple``."""
    trees = {path: ast.parse(path.read_text()) for path in PACKAGE.rglob("*.py")}
    callees = _numba_callees(trees)
    assert callees >= {"decode_pairs", "blend8", "move_plane", "FieldPair"}, sorted(callees)
    bare = set()
    for path, tree in trees.items():
        scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]
        for call in (c for scope in scopes for c in _bare_tuple_calls(scope, callees)):
            bare.add(f"{path.relative_to(PACKAGE)}:{call.lineno} {ast.unparse(call)[:80]}")
        if path.parent.name != "kernels":
            continue
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            fields = [f for f in cls.body if isinstance(f, ast.AnnAssign) and cls.name in callees]
            for field in fields:
                if ast.unparse(field.annotation).startswith("tuple"):
                    bare.add(f"{path.relative_to(PACKAGE)}:{field.lineno} {cls.name} field")
    assert not bare, sorted(bare)
