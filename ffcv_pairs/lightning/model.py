"""A small siamese CNN pair classifier: one shared encoder, fused spatial features.

Both images go through the same encoder; the feature maps are fused as
``[f(A), f(B), |f(A) - f(B)|]`` and a small head decides. Because the fusion is
spatial, the model can see *where* A and B differ, which is what "did B change?"
needs, and exactly what unpaired geometric augmentation destroys.

Works for any channel count (read from the `.beton` when ``in_channels`` is not
given) and image size (global pooling), CHW or HWC, uint8 or float input.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

__all__ = ["SiamesePairClassifier"]


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class SiamesePairClassifier(L.LightningModule):
    """Classify an (A, B) pair.

    Args:
        num_classes: Number of labels (labels are ``0 .. num_classes - 1``).
        in_channels: Channels per image; default: from the datamodule's file, at setup.
        width: Channels of the encoder's first block (doubled once).
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        max_epochs_hint: Epochs for the one-cycle schedule (use the trainer's
            ``max_epochs``); 0 disables the schedule.
    """

    def __init__(
        self,
        num_classes: int = 2,
        in_channels: int | None = None,
        width: int = 32,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        max_epochs_hint: int = 0,
    ):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {num_classes}")
        self.save_hyperparameters()
        w = width
        self.encoder: nn.Sequential | None = None
        if in_channels is not None:
            self._build_encoder(in_channels)
        self.fuse = nn.Sequential(_block(6 * w, 2 * w), _block(2 * w, 2 * w))
        self.head = nn.Linear(4 * w, num_classes)
        self.metrics = nn.ModuleDict(
            {
                split: MulticlassAccuracy(num_classes=num_classes, average="micro")
                for split in ("train_acc", "val_acc", "test_acc")
            }
        )

    def _build_encoder(self, in_channels: int) -> None:
        if in_channels < 1:
            raise ValueError(f"in_channels must be at least 1, got {in_channels}")
        w = self.hparams["width"]
        self.hparams["in_channels"] = in_channels
        self.encoder = nn.Sequential(
            _block(in_channels, w),
            _block(w, w),
            nn.MaxPool2d(2),
            _block(w, 2 * w),
            _block(2 * w, 2 * w),
            nn.MaxPool2d(2),
        )

    def setup(self, stage: str) -> None:
        """Size the first layer from the data (before DDP wraps the model)."""
        if self.encoder is not None:
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "input_channels"):
            raise ValueError(
                "SiamesePairClassifier needs in_channels, or a PairDataModule to read it from"
            )
        self._build_encoder(datamodule.input_channels())

    @staticmethod
    def prepare(x: torch.Tensor) -> torch.Tensor:
        """Any stored image batch -> float (B, C, H, W), standardised per image."""
        if x.ndim == 3:
            x = x.unsqueeze(1)
        elif x.ndim == 4 and x.shape[-1] < min(x.shape[1], x.shape[2]):
            x = x.permute(0, 3, 1, 2)  # HWC -> CHW
        x = x.float()
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        std = x.std(dim=(1, 2, 3), keepdim=True).clamp_min(1e-3)
        return (x - mean) / std

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.encoder is None:
            raise RuntimeError("call setup() (or pass in_channels) before forward()")
        fa = self.encoder(self.prepare(a))
        fb = self.encoder(self.prepare(b))
        fused = self.fuse(torch.cat([fa, fb, (fa - fb).abs()], dim=1))
        pooled = torch.cat([fused.amax(dim=(2, 3)), fused.mean(dim=(2, 3))], dim=1)
        return self.head(pooled)

    def _step(self, batch: Any, split: str) -> torch.Tensor:
        a, b, label = batch[:3]  # any extra fields after the label are not this model's
        logits = self(a, b)
        # Soft targets (MixUp, CutMix: float (n, classes)) are probabilities cross_entropy
        # takes as they are; accuracy counts each row's larger share as its class.
        loss = nn.functional.cross_entropy(logits, label)
        metric: MulticlassAccuracy = self.metrics[f"{split}_acc"]  # type: ignore[assignment]
        metric(logits, label.argmax(1) if label.is_floating_point() else label)
        on_step = split == "train"
        self.log(
            f"{split}/loss",
            loss,
            prog_bar=split != "train",
            on_step=on_step,
            on_epoch=True,
            sync_dist=not on_step,
            batch_size=len(label),
        )
        self.log(
            f"{split}/acc",
            metric,
            prog_bar=True,
            on_step=on_step,
            on_epoch=True,
            batch_size=len(label),
        )
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(
            self.parameters(), lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"]
        )
        epochs = self.hparams["max_epochs_hint"]
        if not epochs:
            return opt
        steps = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=self.hparams["lr"], total_steps=max(1, int(steps))
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
