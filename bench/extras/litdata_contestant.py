"""LitData as a contestant (runs in ``bench/.venv-litdata`` only).

``litdata.optimize`` writes the pairs into chunks; ``StreamingDataset`` (shuffled)
under ``StreamingDataLoader`` reads them with workers = cores.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["build", "prepare"]

_ARRAYS: tuple[np.ndarray, ...] | None = None
_NPY: str = ""


def _arrays() -> tuple[np.ndarray, ...]:
    global _ARRAYS
    if _ARRAYS is None:
        npy = os.environ.get("BENCH_NPY_DIR", _NPY)
        _ARRAYS = tuple(np.load(f"{npy}/{k}.npy", mmap_mode="r") for k in ("A", "B", "labels"))
    return _ARRAYS


def _sample(i: int) -> dict[str, Any]:
    a, b, labels = _arrays()
    return {"a": np.array(a[i]), "b": np.array(b[i]), "label": int(labels[i])}


def prepare(spec: dict[str, Any]) -> None:
    """Optimize the ``.npy`` pairs into ``spec["out_dir"]`` with 2 workers."""
    global _NPY
    from litdata import optimize

    _NPY = spec["npy_dir"]
    os.environ["BENCH_NPY_DIR"] = _NPY
    optimize(
        fn=_sample,
        inputs=list(range(spec["n"])),
        output_dir=spec["out_dir"],
        chunk_bytes="64MB",
        num_workers=spec["workers"],
        mode="overwrite",
    )


class _Source:
    def __init__(self, spec: dict[str, Any]):
        from litdata import StreamingDataLoader, StreamingDataset

        ds = StreamingDataset(spec["out_dir"], shuffle=True, drop_last=True, seed=spec["seed"])
        self.loader = StreamingDataLoader(
            ds,
            batch_size=spec["batch_size"],
            num_workers=spec["workers"],
            drop_last=True,
        )

    def epoch(self, index: int) -> Any:
        return iter(self.loader)

    def count(self, batch: Any) -> int:
        return int(batch["label"].shape[0])

    def close(self) -> None:
        self.loader = None


def build(spec: dict[str, Any]) -> _Source:
    if not (Path(spec["out_dir"]) / "index.json").exists():
        raise FileNotFoundError(f"{spec['out_dir']}: no index.json; prepare did not run")
    return _Source(spec)
