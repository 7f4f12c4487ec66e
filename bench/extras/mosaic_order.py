"""Mosaic Streaming's epoch order, computed by its own code in its own venv.

:func:`mosaic_epochs` (run from the project's venv) writes, for each epoch, the array
Mosaic's ``generate_work_random_batching`` builds: ``get_partitions`` (``relaxed``, which
is ``orig`` on a first run) over the samples, then ``get_shuffle`` (``py1e``) over the
shard sizes, the partition's ids mapped through the shuffle. The array's shape is
(physical nodes, ranks per node, workers per rank, batches per worker, batch size), with
``-1`` for padding, as in Mosaic. It runs this file in a venv with Mosaic::

    bench/.work/venv-mosaic-order/bin/python bench/extras/mosaic_order.py SPEC_JSON

The venv is ``bench/.venv-streaming`` (``make bench-extras``) when it exists, otherwise
a small one under ``bench/.work/`` with numpy and ``mosaicml-streaming`` without its
dependencies (torch, torchvision, transformers: none of them is used by the partition and
shuffle modules). Either way the script imports ``streaming.base.partition`` and
``streaming.base.shuffle`` without running ``streaming/__init__.py``, which imports torch,
torchvision and transformers; the functions are Mosaic's, unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["MARK", "MOSAIC_VERSION", "main", "mosaic_epochs", "mosaic_python"]

MARK = "@@MOSAIC "
MOSAIC_VERSION = "0.13.0"
_VENV = ".work/venv-mosaic-order"


def mosaic_python() -> tuple[Path | None, str | None]:
    """``(python, None)`` of a venv with Mosaic Streaming (made if need be), else
    ``(None, why)``."""
    import shutil

    from bench.core.settings import BENCH_DIR
    from bench.extras.venvs import EXTRAS, extra_env

    if EXTRAS["streaming"].python.exists():
        return EXTRAS["streaming"].python, None
    venv = BENCH_DIR / _VENV
    python = venv / "bin" / "python"
    if list(venv.glob(f"lib/python*/site-packages/mosaicml_streaming-{MOSAIC_VERSION}.dist-info")):
        return python, None
    steps = (("numpy<2.2",), ("--no-deps", f"mosaicml-streaming=={MOSAIC_VERSION}"))
    try:
        if not python.exists():
            base = shutil.which("python3.11") or str(
                getattr(sys, "_base_executable", sys.executable)
            )
            subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True)
        for step in steps:
            cmd = [str(python), "-m", "pip", "install", "-q", *step]
            subprocess.run(cmd, check=True, capture_output=True, env=extra_env(), timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        tail = (getattr(e, "stderr", b"") or b"").decode(errors="replace").strip()
        last = tail.splitlines()[-1] if tail else str(e)
        return None, f"could not install mosaicml-streaming=={MOSAIC_VERSION} in {venv}: {last}"
    return python, None


def mosaic_epochs(python: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Run this file under ``python`` with ``spec``; returns its answer: ``files`` (one
    ``.npy`` per epoch, in ``spec["out"]``), ``version`` and ``block_size``.

    Raises:
        RuntimeError: the process failed (its last line of stderr).
    """
    proc = subprocess.run(
        [str(python), __file__, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    answers = [ln[len(MARK) :] for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not answers:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise RuntimeError(f"Mosaic's order failed: {lines[-1] if lines else proc.returncode}")
    answer: dict[str, Any] = json.loads(answers[-1])
    return answer


def _import_mosaic() -> tuple[Any, Any, str]:
    """Mosaic's ``get_partitions`` and ``get_shuffle``, without ``streaming/__init__.py``."""
    import importlib.metadata
    import importlib.util
    import types

    found = importlib.util.find_spec("streaming")
    if found is None or found.origin is None:
        raise ModuleNotFoundError("mosaicml-streaming is not installed in this venv")
    root = Path(found.origin).parent
    for name, path in (("streaming", root), ("streaming.base", root / "base")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    return get_partitions, get_shuffle, importlib.metadata.version("mosaicml-streaming")


def main(argv: list[str]) -> int:
    """Write ``epoch<e>.npy`` for each of ``spec["epochs"]``; print the answer behind MARK."""
    import numpy as np

    if len(argv) != 2:
        sys.stderr.write("usage: mosaic_order.py SPEC_JSON\n")
        return 2
    spec = json.loads(argv[1])
    get_partitions, get_shuffle, version = _import_mosaic()
    sizes = np.asarray(spec["shard_sizes"], dtype=np.int64)
    canonical, nodes = spec["canonical_nodes"], spec["nodes"]
    # StreamingDataset's default block: max(4_000_000 // canonical nodes, 1 << 18).
    block = max(4_000_000 // canonical, 1 << 18)
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    # The partition depends on no epoch; Mosaic computes it each epoch, to the same ids.
    big = get_partitions(
        "relaxed",
        int(sizes.sum()),
        canonical,
        nodes,
        spec["ranks_per_node"],
        spec["workers_per_rank"],
        spec["batch_size"],
    )
    files = []
    for epoch in spec["epochs"]:
        shuffle = get_shuffle("py1e", sizes, canonical, spec["seed"], epoch, block)
        ids = np.where(big != -1, shuffle[big], -1)
        path = out / f"epoch{epoch}.npy"
        np.save(path, ids)
        files.append(str(path))
    sys.stdout.write(
        MARK + json.dumps({"files": files, "version": version, "block_size": block}) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
