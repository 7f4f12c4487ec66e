"""The reference tests again, with the plain-numba twins of the LLVM intrinsics bound
(``FFCV_PAIRS_PLAIN_KERNELS=1``, see ``ffcv_pairs/kernels/twins.py``).

The kind is chosen once per process, so this runs them in a pytest subprocess: the
twins' binding and comparisons, and the tests that check every twin through the
pipeline against ``tests/reference.py`` or numpy (geometry: the byte moves; resize: the
vector steps and the prefetch; photometric and image statistics: the sums;
float16/bfloat16: the float bits). The other kernel tests run both kinds in this
process already, and test_kernel_identity compares the two kinds' whole-pipeline bytes.

It is marked ``long``: ``make test-long`` runs it, ``make test`` leaves it out for its
10-minute budget (about 1 minute on one core with an empty numba cache), where
test_kernel_identity and test_kernel_twins check both kinds. Run it alone::

    .venv/bin/python -m pytest tests/test_plain_pass.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ffcv_pairs.kernels import twins

REPO = Path(__file__).resolve().parents[1]
FILES = ("test_kernel_twins.py", "test_augment.py", "test_stats.py", "test_augops.py")
SELECT = "kernel_twins or equals_reference or image_stats_kernel or bfloat16_bits"


def plain_pass_command(tmp: Path) -> list[str]:
    """The pytest command line of the plain pass (its cache and tmp dirs under ``tmp``)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "--basetemp",
        str(tmp / "basetemp"),
        *(str(REPO / "tests" / f) for f in FILES),
        "-k",
        SELECT,
    ]


@pytest.mark.long
@pytest.mark.skipif(twins.PLAIN, reason="this process runs the plain kernels already")
def test_reference_tests_pass_with_the_plain_kernels(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["FFCV_PAIRS_PLAIN_KERNELS"] = "1"
    proc = subprocess.run(
        plain_pass_command(tmp_path),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 80, summary  # 95 when this was written
    assert "failed" not in summary and "deselected" in summary, summary
