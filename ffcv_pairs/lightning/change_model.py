"""A small siamese UNet for change detection: which pixels of B differ from A.

Both images go through one shared encoder (two scales); each scale's features are fused
as ``|f(A) - f(B)|`` beside ``f(A)``, and a decoder with skip connections gives per-pixel
logits. Trained with cross-entropy that ignores the mask's ``ignore_index`` (the dense
field's fill: pixels from outside the image after a padded crop). Validation reports the
intersection over union of the "changed" class, accumulated over the epoch.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["SiameseChangeUNet"]


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class SiameseChangeUNet(L.LightningModule):
    """Per-pixel change between A and B (classes 0: unchanged, 1: changed).

    Args:
        in_channels: Channels per image.
        width: Channels of the first scale (doubled at the second).
        lr: AdamW learning rate.
        ignore_index: Mask value that no loss or metric counts.
    """

    def __init__(
        self, in_channels: int = 3, width: int = 16, lr: float = 3e-3, ignore_index: int = 255
    ):
        super().__init__()
        if in_channels < 1 or width < 1:
            raise ValueError(f"in_channels and width must be positive, got {in_channels}, {width}")
        self.save_hyperparameters()
        w = width
        self.enc1, self.enc2 = _block(in_channels, w), _block(w, 2 * w)
        self.dec2 = _block(4 * w, 2 * w)
        self.dec1 = _block(2 * w + 2 * w, w)
        self.head = nn.Conv2d(w, 2, 1)
        self._counts = torch.zeros(2, dtype=torch.long)  # intersection, union

    def _encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.enc1(x)
        return f1, self.enc2(F.max_pool2d(f1, 2))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        (a1, a2), (b1, b2) = self._encode(a.float()), self._encode(b.float())
        d2 = self.dec2(torch.cat([a2, (a2 - b2).abs()], 1))
        up = F.interpolate(d2, size=a1.shape[-2:], mode="nearest")
        d1 = self.dec1(torch.cat([up, a1, (a1 - b1).abs()], 1))
        return self.head(d1)

    def _loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, b, mask = batch[:3]
        mask = mask.long()
        logits = self(a, b)
        ignore = int(self.hparams["ignore_index"])
        return F.cross_entropy(logits, mask, ignore_index=ignore), logits, mask

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, _, _ = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._counts = torch.zeros(2, dtype=torch.long)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, logits, mask = self._loss(batch)
        valid = mask != int(self.hparams["ignore_index"])
        pred, truth = logits.argmax(1) == 1, mask == 1
        self._counts += torch.stack(
            [(pred & truth & valid).sum(), ((pred | truth) & valid).sum()]
        ).cpu()
        self.log("val_loss", loss, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        inter, union = (int(c) for c in self._counts)
        self.log("val_iou", inter / union if union else 1.0, prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=float(self.hparams["lr"]))
