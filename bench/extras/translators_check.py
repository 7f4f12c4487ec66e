"""``make translators-check``: the translator and policy tests against the real torchvision.

torchvision cannot install beside the project's torch 2.13 (its PyPI wheel needs torch
2.14.1, a CUDA build). This makes ``bench/.venv-torchvision`` (torch 2.14.1 and torchvision
0.29.1, about 5.5 GB from pip's local cache; :data:`bench.extras.venvs.CHECKS`), lets it see
the project's ``.venv`` packages after its own (a ``.pth`` line: numba, FFCV, Albumentations
when installed), and runs there::

    tests/test_translate.py tests/test_policy_torchvision.py tests/test_policy_ops.py
    tests/test_policy_draws.py

Run it with either of::

    make translators-check
    .venv/bin/python -m bench.extras.translators_check
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from bench.extras.venvs import CHECKS, extra_env, setup_extras

__all__ = ["TESTS", "main"]

ROOT = Path(__file__).resolve().parents[2]
TESTS = (
    "tests/test_translate.py",
    "tests/test_policy_torchvision.py",
    "tests/test_policy_ops.py",
    "tests/test_policy_draws.py",
)


def main() -> int:
    """Make (or complete) the venv, link the project's packages, run the tests; their exit
    status."""
    extra = CHECKS["torchvision"]
    status = setup_extras(("torchvision",))["torchvision"]
    print(f"torchvision venv: {status}", flush=True)
    found = list(extra.venv.glob("lib/python*/site-packages"))
    if not found:
        print(f"no site-packages under {extra.venv}", file=sys.stderr)
        return 2
    link = found[0] / "zz-ffcv-pairs-project.pth"  # after the venv's own torch
    link.write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**extra_env(), "PYTHONPATH": str(ROOT)}
    cmd = [str(extra.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
