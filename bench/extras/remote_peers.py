"""Mosaic Streaming and LitData reading from S3, each with its own reader, in their own venv.

:func:`peers_python` (run from the project's venv) makes ``bench/.work/venv-remote``: CPU
torch 2.13.0 (the wheel on this machine's disk), ``numpy<2.2``, ``mosaicml-streaming``
0.13.0 and ``litdata`` 0.2.76 without their dependencies, then the modules their S3
readers and formats import (boto3, compression codecs, ...). Not obstore, which LitData
prefers for chunk downloads when it is installed: LitData builds its ``S3Store`` without
``allow_http``, so obstore refuses moto's ``http://`` endpoint ("builder error",
``BadScheme``; ``AWS_ALLOW_HTTP`` is not read there); without it LitData downloads with
boto3, its other S3 path. Mosaic's package
``__init__`` imports torchvision and transformers, which its S3 path never uses; this
script imports ``streaming.base.dataset`` and its writer directly (their code unchanged),
as :mod:`bench.extras.mosaic_order` does. Then :mod:`bench.tables.remote_run` runs::

    bench/.work/venv-remote/bin/python bench/extras/remote_peers.py prepare SPEC_JSON
    bench/.work/venv-remote/bin/python bench/extras/remote_peers.py rank SPEC_JSON

``prepare`` writes the ``.npy`` pairs as MDS shards (``MDSWriter``) and as LitData chunks
(``optimize``), both uncompressed, at the shard size given. ``rank`` reads as one rank of
``spec["world"]`` (the environment carries the ranks the way each library reads them) for
``spec["epochs"]`` epochs and prints, behind :data:`MARK`, each epoch's start, end and
sample count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["MARK", "VERSIONS", "main", "peers_python"]

MARK = "@@PEER "
VERSIONS = {"mosaicml-streaming": "0.13.0", "litdata": "0.2.76"}
_VENV = ".work/venv-remote"
_STEPS: tuple[tuple[str, ...], ...] = (
    ("torch==2.13.0", "numpy<2.2"),
    ("--no-deps", *(f"{name}=={v}" for name, v in VERSIONS.items())),
    ("boto3", "filelock", "pillow", "brotli", "python-snappy", "zstd", "xxhash<4", "catalogue",
     "typing_extensions", "tqdm", "lightning-utilities", "requests", "urllib3>=1.26", "tifffile"),
)  # fmt: skip


def peers_python() -> tuple[Path | None, str | None]:
    """``(python, None)`` of the peers' venv (made if need be), else ``(None, why)``."""
    import shutil

    from bench.core.settings import BENCH_DIR
    from bench.extras.venvs import extra_env

    venv = BENCH_DIR / _VENV
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python, None
    try:
        if not python.exists():
            base = shutil.which("python3.11") or str(
                getattr(sys, "_base_executable", sys.executable)
            )
            subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True)
        for step in _STEPS:
            cmd = [str(python), "-m", "pip", "install", "-q", "--no-compile", *step]
            subprocess.run(cmd, check=True, capture_output=True, env=extra_env(), timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        tail = (getattr(e, "stderr", b"") or b"").decode(errors="replace").strip()
        last = tail.splitlines()[-1] if tail else str(e)
        return None, f"could not install the peers in {venv}: {last}"
    stamp.touch()
    return python, None


def _mosaic() -> tuple[Any, Any]:
    """Mosaic's ``StreamingDataset`` and ``MDSWriter``, without ``streaming/__init__.py``."""
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
    from streaming.base.dataset import StreamingDataset
    from streaming.base.format.mds.writer import MDSWriter

    return StreamingDataset, MDSWriter


def _sample(i: int) -> dict[str, Any]:
    import numpy as np

    npy = os.environ["BENCH_NPY_DIR"]
    a, b, labels = (np.load(f"{npy}/{k}.npy", mmap_mode="r") for k in ("A", "B", "labels"))
    return {"a": np.array(a[i]), "b": np.array(b[i]), "label": int(labels[i])}


def _prepare(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    from litdata import optimize

    npy = spec["npy_dir"]
    os.environ["BENCH_NPY_DIR"] = npy
    a, b, labels = (np.load(f"{npy}/{k}.npy", mmap_mode="r") for k in ("A", "B", "labels"))
    _, writer = _mosaic()
    shape = ",".join(str(s) for s in a.shape[1:])
    columns = {"a": f"ndarray:uint8:{shape}", "b": f"ndarray:uint8:{shape}", "label": "int64"}
    with writer(out=spec["mds"], columns=columns, size_limit=spec["shard_bytes"]) as w:
        for i in range(len(labels)):
            w.write({"a": np.array(a[i]), "b": np.array(b[i]), "label": int(labels[i])})
    optimize(
        fn=_sample,
        inputs=list(range(len(labels))),
        output_dir=spec["litdata"],
        chunk_bytes=spec["shard_bytes"],
        num_workers=1,
        mode="overwrite",
    )
    return {"mosaic": len(list(Path(spec["mds"]).glob("*.mds"))),
            "litdata": len(list(Path(spec["litdata"]).glob("*.bin")))}  # fmt: skip


def _loader(spec: dict[str, Any]) -> Any:
    from torch.utils.data import DataLoader

    if spec["peer"] == "mosaic":
        dataset_cls, _ = _mosaic()
        ds = dataset_cls(
            remote=spec["remote"],
            local=spec["cache"],
            shuffle=True,
            shuffle_seed=spec["seed"],
            batch_size=spec["batch_size"],
            num_canonical_nodes=spec["nodes"],
        )
    else:
        from litdata import StreamingDataset
        from litdata.streaming.resolver import Dir

        ds = StreamingDataset(
            Dir(path=spec["cache"], url=spec["remote"]),
            shuffle=True,
            drop_last=True,
            seed=spec["seed"],
            storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]},
        )
    return ds, DataLoader(ds, batch_size=spec["batch_size"], num_workers=0, drop_last=True)


def _rank(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.time()
    ds, loader = _loader(spec)
    epochs = []
    for epoch in range(spec["epochs"]):
        if spec["peer"] == "litdata":
            ds.set_epoch(epoch + 1)  # LitData counts epochs from 1
        start, count = time.time(), 0
        for batch in loader:
            count += int(batch["label"].shape[0])
        epochs.append({"start": start, "end": time.time(), "samples": count})
    return {"built": t0, "epochs": epochs}


def main(argv: list[str]) -> int:
    """``prepare SPEC`` or ``rank SPEC``; prints the answer behind :data:`MARK`."""
    if len(argv) != 3 or argv[1] not in ("prepare", "rank"):
        sys.stderr.write("usage: remote_peers.py prepare|rank SPEC_JSON\n")
        return 2
    spec = json.loads(argv[2])
    answer = _prepare(spec) if argv[1] == "prepare" else _rank(spec)
    sys.stdout.write(MARK + json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
