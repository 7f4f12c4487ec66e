"""Fit on CPU with Lightning (DDP on gloo when DEVICES > 1), recording every sample id each
rank trains on.

    python tests/scripts/ddp_fit.py OUT_DIR TRAIN.beton MODE DEVICES BATCH

BATCH is the per-device batch size. MODE:

* ``full``: train 2 epochs.
* ``part``: stop after step STOP (3 batches into epoch 1) with the checkpoint
  ``OUT_DIR/mid.ckpt`` written by ``ModelCheckpoint(every_n_train_steps=STOP)``.
* ``kill``: the same checkpoint, then training goes on, and at the next step rank 1
  writes its pid to ``OUT_DIR/victim.pid`` and waits for the test to SIGKILL it.
* ``resume``: continue ``OUT_DIR/mid.ckpt`` to the end of epoch 1, on DEVICES ranks
  with BATCH per device (neither need match the run that wrote it).

Every rank appends one JSON line per batch (ids, epoch, step) to
``OUT_DIR/MODE-DEVICES-rankR.jsonl`` as it goes, so a killed run leaves its record;
a run that finishes adds ``OUT_DIR/MODE-DEVICES-rankR.json``. The labels of the
training file are the sample ids. Lightning's DDP launcher runs this script once
per rank.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ffcv_pairs import PairAugment
from ffcv_pairs.lightning.datamodule import PairDataModule
from ffcv_pairs.lightning.model import SiamesePairClassifier

SAMPLES = 500


class Record(L.Callback):
    """One line per batch, flushed: what this rank trained on, and at which step."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        line = {"ids": batch[2].tolist(), "epoch": trainer.current_epoch}
        line["step"] = trainer.global_step
        with open(f"{self.prefix}-rank{trainer.global_rank}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")


class Victim(L.Callback):
    """Rank 1, at the step after the checkpoint: say so, and wait to be killed."""

    def __init__(self, out: Path, step: int) -> None:
        self.out, self.step = out, step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_rank == 1 and trainer.global_step == self.step:
            tmp = self.out / "victim.tmp"
            tmp.write_text(str(os.getpid()))
            tmp.rename(self.out / "victim.pid")  # the checkpoint is on disk by now
            threading.Event().wait(300)
            os._exit(3)  # not killed: the test has gone


def main() -> None:
    out, train, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    devices, batch = int(sys.argv[4]), int(sys.argv[5])
    L.seed_everything(0, workers=False, verbose=False)
    dm = PairDataModule(
        train_path=train,
        batch_size=batch,
        seed=5,
        augment=PairAugment(hflip=0.5),
        window_bytes=8192,
        num_threads=1,
    )
    model = SiamesePairClassifier(num_classes=SAMPLES, width=4)  # labels are the sample ids
    stop = SAMPLES // devices // batch + 3  # 3 batches into epoch 1
    callbacks: list[L.Callback] = [Record(str(out / f"{mode}-{devices}"))]
    if mode in ("part", "kill"):  # a checkpoint written during training, as a pre-empted job has
        callbacks.append(
            ModelCheckpoint(
                dirpath=out,
                filename="mid",
                every_n_train_steps=stop,
                save_top_k=-1,
                enable_version_counter=False,
            )
        )
    if mode == "kill":
        callbacks.append(Victim(out, stop))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=2,
        max_steps=stop if mode == "part" else -1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=mode in ("part", "kill"),
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=str(out),
    )
    ckpt = str(out / "mid.ckpt") if mode == "resume" else None
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
    summary = {"world": trainer.world_size, "steps": trainer.global_step}
    name = f"{mode}-{devices}-rank{trainer.global_rank}.json"
    (out / name).write_text(json.dumps(summary))
    torch.distributed.barrier() if torch.distributed.is_initialized() else None


if __name__ == "__main__":
    main()
