"""Batch ops from LightningCLI YAML (``class_path``/``init_args``), training on soft targets."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch

from ffcv_pairs import ArraySource, CutMix, MixUp, PairAugment, write_pairs


def swap_label(label: torch.Tensor, swapped: torch.Tensor) -> torch.Tensor:
    """A two-class label flips when A and B change places ("did B come after A?")."""
    return torch.where(swapped, 1 - label, label)


class Labels(L.Callback):
    """Keeps the label of every training batch the model gets."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(batch[2].clone())


def test_the_example_model_trains_on_mixup_soft_targets_from_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ffcv_pairs.train import cli_main

    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (96, 3, 12, 12), dtype=np.uint8)
    path = tmp_path / "t.beton"
    write_pairs(ArraySource(a, 255 - a, np.arange(96) % 2), path, page_size=1 << 16, progress=False)
    monkeypatch.setattr(sys, "argv", ["train.py"])  # pytest's own flags are not the CLI's
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data:\n  train_path: {path}\n  val_path: {path}\n  batch_size: 16\n"
        "  augment:\n    swap: 0.5\n    swap_label: test_batch_ops_lightning.swap_label\n"
        "  batch_ops:\n"
        "    - class_path: ffcv_pairs.MixUp\n      init_args: {num_classes: 2, alpha: 0.4}\n"
        "    - class_path: ffcv_pairs.CutMix\n      init_args: {num_classes: 2, p: 0.5}\n"
        "model:\n  num_classes: 2\n  width: 4\n"
        f"trainer:\n  logger: false\n  max_steps: 3\n  limit_val_batches: 1\n"
        "  enable_checkpointing: false\n  enable_progress_bar: false\n"
        f"  enable_model_summary: false\n  default_root_dir: {tmp_path}\n"
    )
    cli = cli_main(["--config", str(config)], run=False)
    dm = cli.datamodule
    assert [type(op) for op in dm.batch_ops] == [MixUp, CutMix]
    assert (dm.batch_ops[0].alpha, dm.batch_ops[1].p) == (0.4, 0.5)
    assert dm.augment == PairAugment(swap=0.5, swap_label=dm.augment.swap_label)
    assert dm.augment.swap_label in ("test_batch_ops_lightning.swap_label", swap_label)
    labels = Labels()
    cli.trainer.callbacks.append(labels)
    cli.trainer.fit(cli.model, datamodule=dm)
    assert cli.trainer.global_step == 3
    assert math.isfinite(float(cli.trainer.callback_metrics["train/loss_step"]))
    for label in labels.seen:
        assert label.dtype == torch.float32 and label.shape == (16, 2)
        assert torch.allclose(label.sum(1), torch.ones(16))
    assert any(((label > 0) & (label < 1)).any() for label in labels.seen)  # mixed
    assert dm.val_dataloader().config.batch_ops is None  # validation reads plain batches


def test_accuracy_counts_a_soft_targets_larger_share() -> None:
    """On soft targets the example model's accuracy compares each row's predicted class
    with its target's larger share (torchmetrics would silently score float targets 0)."""
    from ffcv_pairs import SiamesePairClassifier

    torch.manual_seed(0)
    model = SiamesePairClassifier(num_classes=3, in_channels=3, width=4).eval()
    model.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    a, b = torch.rand(32, 3, 12, 12), torch.rand(32, 3, 12, 12)
    target = torch.softmax(3 * torch.randn(32, 3), 1)
    with torch.no_grad():
        loss = model._step((a, b, target), "train")
        want = (model(a, b).argmax(1) == target.argmax(1)).float().mean()
    assert math.isfinite(float(loss)) and 0 < want < 1
    assert torch.isclose(model.metrics["train_acc"].compute(), want)
