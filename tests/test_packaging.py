"""The install story: environment.yml agrees with pyproject.toml, and the CLI entrypoints exist."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).parents[1]
CONDA_NAMES = {"torch": "pytorch"}


def _split(spec: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$", spec)
    assert m, spec
    return m.group(1).lower(), m.group(3).replace(" ", "")


def test_environment_yml_pins_match_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    specs: dict[str, str] = {}
    for dep in env["dependencies"]:
        for item in dep["pip"] if isinstance(dep, dict) else [dep]:
            if item.startswith("-e"):
                continue
            name, version = _split(
                item.replace("=", "==", 1) if re.match(r"^[\w-]+=\d", item) else item
            )
            specs[name] = version
    for dep in project["dependencies"]:
        name, version = _split(dep)
        conda_name = CONDA_NAMES.get(name, name)
        assert conda_name in specs, f"{name} is in pyproject.toml but not in environment.yml"
        assert specs[conda_name] == version, (
            f"{name}: pyproject.toml says {version!r}, environment.yml says {specs[conda_name]!r}"
        )
    assert "-e .[dev,demo,bench,remote]" in env["dependencies"][-1]["pip"]


def _readme_commands() -> list[str]:
    """The command lines of the README's shell blocks."""
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    lines = [line.split("#")[0].strip() for b in blocks for line in b.splitlines()]
    return [line for line in lines if line]


def test_every_command_the_readme_shows_exists() -> None:
    """``make X`` is a Makefile target, ``python -m M`` a module, ``ffcv-pairs SUB`` a
    subcommand and ``python some/file.py`` a file; the first block is the two commands."""
    import importlib.util

    from ffcv_pairs.cli import main

    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    commands = _readme_commands()
    assert commands[:2] == ["make demo", "make test"], commands[:2]
    for line in commands:
        words = line.split()
        if words[0] == "make":
            assert words[1] in targets, line
        elif words[:2] == ["python", "-m"] or words[1:3] == ["python", "-m"]:
            module = words[words.index("-m") + 1]
            assert importlib.util.find_spec(module) is not None, line
        elif words[0] == "ffcv-pairs":
            with pytest.raises(SystemExit) as e:
                main([words[1], "--help"])
            assert e.value.code == 0, line
        elif words[0] == "python" and words[1].endswith(".py"):
            assert (REPO / words[1]).is_file(), line
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_pip_installs_the_ffcv_pairs_command() -> None:
    import subprocess
    import sys

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"ffcv-pairs": "ffcv_pairs.cli:main"}
    command = Path(sys.executable).with_name("ffcv-pairs")
    assert command.exists(), f"{command}: not installed (pip install -e . makes it)"
    proc = subprocess.run([command, "verify", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ffcv-pairs verify")


UPSTREAM_IMPORT = """
import sys
import numba.typed
import ffcv_pairs
from ffcv.fields import rgb_image
assert "cv2" not in sys.modules, "cv2 imported eagerly"
assert isinstance(rgb_image.IMAGE_MODES, dict), type(rgb_image.IMAGE_MODES)
assert numba.typed.Dict is not dict, "numba.typed.Dict not restored"
import numpy as np
jpeg = rgb_image.encode_jpeg(np.zeros((8, 8, 3), np.uint8), 90)
assert len(jpeg) > 0 and "cv2" in sys.modules
import cv2
assert cv2.imdecode(jpeg, cv2.IMREAD_COLOR).shape == (8, 8, 3)
print("ok")
"""


def test_upstream_import_is_lean_and_still_works() -> None:
    """ffcv is imported without its typed-dict compile and without OpenCV, and both still
    work when upstream code (or the user) needs them."""
    import subprocess
    import sys

    for prelude in ("", "import torch\n"):  # torch first, or imported from inside ffcv
        out = subprocess.run(
            [sys.executable, "-c", prelude + UPSTREAM_IMPORT],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


UPSTREAM_LOADER_BESIDE_KERNELS = """
import sys
if sys.argv[1] == "ffcv-first":
    import ffcv.loader  # noqa: F401  (upstream imported before ffcv_pairs: still guarded)
import numba as nb, numpy as np
import ffcv_pairs  # noqa: F401
from ffcv.memory_managers import OSCacheManager, ProcessCacheManager

@nb.njit
def total(x, k):
    return x.sum() + k

canon = [nb.uint8[::1], nb.uint8[:, ::1], nb.uint64[::1], nb.uint32[::1]]
hashes = [hash(t) for t in canon]
total(np.zeros(4, np.uint8), 1)  # uint8[::1] is now a key of total's overload table
# what building an upstream Loader does (upstream's os_cache/process-cache state types)
OSCacheManager.state_type.fget(None)
ProcessCacheManager.state_type.fget(None)
total(np.zeros(4, np.uint8), 1.5)  # a new overload: typing lists the table's signatures
assert [hash(t) for t in canon] == hashes and all(t.mutable for t in canon), canon
print("ok")
"""


@pytest.mark.parametrize("order", ["ffcv_pairs-first", "ffcv-first"])
def test_an_upstream_loader_leaves_numba_types_alone(order: str) -> None:
    """Upstream's state types mutate numba's interned array types (their hash changes while
    they key every dispatcher's overloads: a later compile fails with a KeyError)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", UPSTREAM_LOADER_BESIDE_KERNELS, order],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def _ci_run(tmp_path: Path, free_mb: int) -> subprocess.CompletedProcess[str]:
    """A copy of `.ci/run`, run with `df` reporting `free_mb` and `make` stubbed."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((REPO / ".ci" / "run").read_text())
    (tmp_path / ".venv").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shims = {
        "df": f"echo 'Filesystem 1048576-blocks Used Available Capacity Mounted'\n"
        f"echo 'disk 99999 1 {free_mb} 1% /'",
        "make": 'echo "make $*" > "$(dirname "$0")/../make-ran"',
    }
    for name, body in shims.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    return subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True
    )


def test_ci_says_a_full_disk_before_the_suite(tmp_path: Path) -> None:
    done = _ci_run(tmp_path, free_mb=287)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"ci: only 287 MB free in {tmp_path}, and a test run's files (about 1.3 GB) "
        "needs about 2000 MB; free some space first"
    )
    assert not (tmp_path / "make-ran").exists()


def test_ci_runs_make_test_given_room(tmp_path: Path) -> None:
    done = _ci_run(tmp_path, free_mb=50_000)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "make-ran").read_text() == "make test\n"
