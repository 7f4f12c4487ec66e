"""MosaicML Streaming as a contestant (runs in ``bench/.venv-streaming`` only).

``MDSWriter`` writes uncompressed MDS shards; a shuffled local ``StreamingDataset``
under ``StreamingDataLoader`` reads them with workers = cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["build", "prepare"]


def prepare(spec: dict[str, Any]) -> None:
    """Write the ``.npy`` pairs as MDS shards into ``spec["out_dir"]``."""
    from streaming import MDSWriter

    a, b, labels = (
        np.load(f"{spec['npy_dir']}/{k}.npy", mmap_mode="r") for k in ("A", "B", "labels")
    )
    shape = ",".join(str(s) for s in a.shape[1:])
    columns = {
        "a": f"ndarray:{a.dtype.name}:{shape}",
        "b": f"ndarray:{b.dtype.name}:{shape}",
        "label": "int64",
    }
    with MDSWriter(out=spec["out_dir"], columns=columns, size_limit="64mb") as writer:
        for i in range(spec["n"]):
            writer.write({"a": np.array(a[i]), "b": np.array(b[i]), "label": int(labels[i])})


class _Source:
    def __init__(self, spec: dict[str, Any]):
        from streaming import StreamingDataLoader, StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        ds = StreamingDataset(
            local=spec["out_dir"],
            shuffle=True,
            shuffle_seed=spec["seed"],
            batch_size=spec["batch_size"],
        )
        self.loader = StreamingDataLoader(
            ds,
            batch_size=spec["batch_size"],
            num_workers=spec["workers"],
            drop_last=True,
            persistent_workers=True,
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
