"""What the numbers were measured on: cores, RAM, CPU model and library versions."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

__all__ = ["describe_machine"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    """The repository's commit, with ``+changes`` if ``ffcv_pairs/`` differs from it."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "ffcv_pairs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" +uncommitted changes in ffcv_pairs/" if dirty else "")


def describe_machine() -> dict[str, Any]:
    import torch

    return {
        "cores": len(os.sched_getaffinity(0)),
        "ram_gib": psutil.virtual_memory().total / 2**30,
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "ffcv": _version("ffcv"),
        "ffcv-pairs": _version("ffcv-pairs"),
        "commit": _git_commit(),
    }
