"""Fit on CPU with Lightning DDP (2 ranks, gloo) and record every sample id each rank trains on.

    python tests/scripts/ddp_fit.py OUT_DIR TRAIN.beton MODE [DEVICES]

MODE ``full`` trains 2 epochs; ``part`` stops mid-epoch 1 and saves a checkpoint;
``resume`` continues that checkpoint to the end of epoch 1. Lightning's DDP
launcher runs this script once per rank.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ffcv_pairs import PairAugment
from ffcv_pairs.lightning.datamodule import PairDataModule
from ffcv_pairs.lightning.model import SiamesePairClassifier


class Record(L.Callback):
    def __init__(self) -> None:
        self.ids: list[list[int]] = []
        self.epochs: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.ids.append(batch[2].tolist())
        self.epochs.append(trainer.current_epoch)


def main() -> None:
    out, train, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    devices = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    L.seed_everything(0, workers=False, verbose=False)
    dm = PairDataModule(
        train_path=train,
        global_batch_size=16 * devices,
        seed=5,
        augment=PairAugment(hflip=0.5),
        window_bytes=8192,
        num_threads=1,
    )
    model = SiamesePairClassifier(num_classes=500, width=4)  # labels are the sample ids
    record = Record()
    batches_per_epoch = 500 // (16 * devices)
    stop = batches_per_epoch + 3  # mid-epoch 1
    callbacks: list[L.Callback] = [record]
    if mode == "part":  # a checkpoint written during training, as a pre-empted job has
        callbacks.append(
            ModelCheckpoint(
                dirpath=out,
                filename="mid",
                every_n_train_steps=stop,
                save_top_k=-1,
                enable_version_counter=False,
            )
        )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        max_steps=stop if mode == "part" else -1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=mode == "part",
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=str(out),
    )
    ckpt = str(out / "mid.ckpt") if mode == "resume" else None
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
    rank = trainer.global_rank
    (out / f"{mode}-rank{rank}.json").write_text(
        json.dumps(
            {
                "ids": record.ids,
                "epochs": record.epochs,
                "world": trainer.world_size,
                "steps": trainer.global_step,
            }
        )
    )
    torch.distributed.barrier() if torch.distributed.is_initialized() else None


if __name__ == "__main__":
    main()
