"""docs/user-ops.md's worked example (a vignette) runs as printed, and prints what the page
says it prints."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "user-ops.md"


def _blocks(text: str) -> list[str]:
    """The fenced code blocks of ``text``, in order (their bodies)."""
    return [body for _, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.DOTALL | re.M)]


def test_the_vignette_example_runs_as_documented(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = _blocks(DOC.read_text())
    script = next(b for b in blocks if b.startswith("# vignette.py"))
    printed = blocks[blocks.index(script) + 1]
    path = tmp_path / "vignette.py"
    path.write_text(script)
    spec = importlib.util.spec_from_file_location("vignette_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports the documented file, as `python vignette.py`
    (tmp_path / "data").mkdir()
    module.main(tmp_path / "data")
    assert capsys.readouterr().out == printed
