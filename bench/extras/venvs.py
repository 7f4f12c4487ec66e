"""Optional rivals in their own virtual environments: LitData and MosaicML Streaming.

Neither is a dependency of ffcv-pairs. Each gets a venv under ``bench/`` and runs
as a subprocess there, so that its pins (Streaming wants ``numpy<2.2``) never touch
the project's ``.venv``. Create both with either of::

    make bench-extras
    .venv/bin/python -m bench --setup-extras

What goes in, and why:

* ``bench/.venv-litdata``: ``torch==2.13.0`` (the CPU wheel on this machine's
  disk, the same torch as ``.venv``), then ``litdata`` with ``--no-deps`` and its
  dependencies but torchvision. LitData imports torchvision lazily, only for
  image/video serializers the benchmark does not use; letting pip resolve it
  would replace torch with a multi-GB CUDA 2.14.1 build.
* ``bench/.venv-streaming``: ``torch==2.14.1`` + ``torchvision==0.29.1``, then
  ``mosaicml-streaming``. ``import streaming`` imports torchvision and
  transformers unconditionally; PyPI's torchvision is a CUDA build that fails
  beside the CPU torch 2.13.0 (``operator torchvision::nms does not exist``),
  and 2.14.1/0.29.1 is the pair known to import on this CPU machine (pip takes
  both from local disk; the venv is about 5.5 GB).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.settings import BENCH_DIR

__all__ = [
    "CHECKS",
    "EXTRAS",
    "Extra",
    "extra_env",
    "extras_status",
    "installed",
    "probe",
    "setup_extras",
    "venv_size",
]

log = logging.getLogger(__name__)


#: LitData's requirements without torch and torchvision (litdata 0.2.76).
_LITDATA_DEPS = (
    "lightning-utilities",
    "filelock",
    "numpy",
    "boto3",
    "requests",
    "urllib3>=1.26",
    "tifffile",
    "obstore",
)


@dataclass(frozen=True)
class Extra:
    """One optional rival: its venv, how to fill it, and how to tell that it works.

    Attributes:
        name: ``litdata`` or ``streaming``.
        venv: The venv folder under ``bench/``.
        steps: ``pip install`` argument lists, run in order.
        module: The module the benchmark imports (its ``__version__`` is reported).
        dist: Its distribution name in ``site-packages`` (``*.dist-info``).
    """

    name: str
    venv: Path
    steps: tuple[tuple[str, ...], ...]
    module: str
    dist: str

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


EXTRAS: dict[str, Extra] = {
    "litdata": Extra(
        name="litdata",
        venv=BENCH_DIR / ".venv-litdata",
        steps=(
            ("torch==2.13.0",),
            ("--no-deps", "litdata==0.2.76"),
            _LITDATA_DEPS,
        ),
        module="litdata",
        dist="litdata",
    ),
    "streaming": Extra(
        name="streaming",
        venv=BENCH_DIR / ".venv-streaming",
        steps=(
            ("torch==2.14.1", "torchvision==0.29.1"),
            ("mosaicml-streaming==0.13.0",),
        ),
        module="streaming",
        dist="mosaicml_streaming",
    ),
}


#: Venvs of the optional checks, made by the same steps (not benchmark rivals: the bench does
#: not list them): ``bench/.venv-torchvision`` for ``make translators-check``
#: (:mod:`bench.extras.translators_check`), torch 2.14.1 and torchvision 0.29.1 only, the
#: project's other packages seen from ``.venv``.
CHECKS: dict[str, Extra] = {
    "torchvision": Extra(
        name="torchvision",
        venv=BENCH_DIR / ".venv-torchvision",
        steps=(("torch==2.14.1", "torchvision==0.29.1"),),
        module="torchvision",
        dist="torchvision",
    ),
}


def _base_python() -> str:
    """A Python 3.11 that is not inside a venv (venvs are made from it)."""
    found = shutil.which("python3.11")
    return found or getattr(sys, "_base_executable", sys.executable)


def extra_env() -> dict[str, str]:
    """The environment every extra runs in: no online version checks, no GPU."""
    env = dict(os.environ)
    env["LITDATA_DISABLE_VERSION_CHECK"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _missing(extra: Extra) -> str:
    return (
        f"venv {extra.venv.relative_to(BENCH_DIR.parent)} is missing "
        f"(create it with `make bench-extras`)"
    )


def installed(extra: Extra) -> dict[str, str | None]:
    """Versions of ``extra`` and of torch in its venv, read from ``*.dist-info`` names.

    Cheap (no interpreter starts); whether it imports shows when it runs.
    Returns ``{"version": ..., "torch": ..., "why": ...}``; ``version`` None if missing.
    """
    if not extra.python.exists():
        return {"version": None, "torch": None, "why": _missing(extra)}
    found: dict[str, str | None] = {"version": None, "torch": None, "why": None}
    for key, dist in (("version", extra.dist), ("torch", "torch")):
        for info in extra.venv.glob(f"lib/python*/site-packages/{dist}-*.dist-info"):
            found[key] = info.name[len(dist) + 1 : -len(".dist-info")]
    if found["version"] is None:
        found["why"] = f"{extra.dist} is not installed in {extra.venv.name}"
    return found


def probe(extra: Extra) -> tuple[str | None, str | None]:
    """``(version, None)`` if ``extra`` imports in its venv, else ``(None, why)``."""
    if not extra.python.exists():
        return None, _missing(extra)
    code = f"import {extra.module} as m; print(m.__version__)"
    proc = subprocess.run(
        [str(extra.python), "-c", code],
        capture_output=True,
        text=True,
        env=extra_env(),
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return None, f"`import {extra.module}` failed: {lines[-1] if lines else proc.returncode}"
    return proc.stdout.strip().splitlines()[-1], None


def venv_size(extra: Extra) -> int:
    """Bytes under the venv folder (0 if it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(extra.venv):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def setup_extras(names: tuple[str, ...] = tuple(EXTRAS)) -> dict[str, str]:
    """Create (or complete) the venvs of ``names``; returns name -> status line.

    A failure of one extra is reported in its status and does not stop the other.
    """
    status: dict[str, str] = {}
    for name in names:
        known = {**EXTRAS, **CHECKS}
        if name not in known:
            raise ValueError(f"unknown extra {name!r}; must be one of {sorted(known)}")
        extra = known[name]
        try:
            if not extra.python.exists():
                log.info("%s: creating %s", name, extra.venv)
                subprocess.run([_base_python(), "-m", "venv", str(extra.venv)], check=True)
            for step in extra.steps:
                log.info("%s: pip install %s", name, " ".join(step))
                cmd = [str(extra.python), "-m", "pip", "install", "-q", *step]
                subprocess.run(cmd, check=True, env=extra_env())
        except subprocess.CalledProcessError as e:
            status[name] = f"setup failed: {' '.join(map(str, e.cmd))} exited {e.returncode}"
            continue
        version, why = probe(extra)
        size = venv_size(extra) / 2**20
        status[name] = f"{extra.module} {version}, {size:,.0f} MiB" if version else str(why)
        log.info("%s: %s", name, status[name])
    return status


def extras_status(enabled: bool) -> dict[str, dict[str, Any]]:
    """Per extra: ``version`` when it imports in its venv, else ``why`` it cannot run."""
    if not enabled:
        return {name: {"version": None, "why": "extras disabled (--no-extras)"} for name in EXTRAS}

    out: dict[str, dict[str, Any]] = {}
    for name, extra in EXTRAS.items():
        out[name] = {**installed(extra), "venv_mib": venv_size(extra) / 2**20}
    return out
