"""One rank of a 2-node DDP fit on CPU that reads a dataset from S3 (moto's server in the
test), each node through its own cache, recording every sample id it trains on.

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank R --master-addr 127.0.0.1 \
        --master-port PORT tests/scripts/remote_fit.py OUT_DIR s3://bucket/train.json CACHE BATCH

The node's cache is ``CACHE/node<R>``; the rank writes ``OUT_DIR/rank<rank>.json`` with the
ids of each batch and the shards its node's cache holds at the end. The labels of the
dataset are the sample ids.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning as L

from ffcv_pairs.lightning.datamodule import PairDataModule
from ffcv_pairs.lightning.model import SiamesePairClassifier


class Record(L.Callback):
    """The ids of every batch this rank trains on."""

    def __init__(self) -> None:
        self.ids: list[list[int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.ids.append(batch[2].tolist())


def main() -> None:
    out, url, cache, batch = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    node = os.environ["GROUP_RANK"]
    dm = PairDataModule(
        train_path=url,
        batch_size=batch,
        seed=5,
        window_bytes=8192,
        num_threads=1,
        partition="node",
        cache_dir=str(cache / f"node{node}"),
    )
    record = Record()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        num_nodes=2,
        strategy="ddp",
        max_epochs=1,
        callbacks=[record],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=str(out),
    )
    trainer.fit(SiamesePairClassifier(num_classes=240, width=4), datamodule=dm)
    held = sorted(p.name for p in (cache / f"node{node}").glob("*/data/*.beton"))
    summary = {"ids": record.ids, "held": held}
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
