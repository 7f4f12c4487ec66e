"""Paired MixUp and CutMix: batch ops with one weight (and one box) per pair, shared by A and B.

Each sample draws from its own counter-based key, so a sample's weight and box are the
same in every run, thread count, world size and resume; its partner is its neighbour in
the batch (:func:`~ffcv_pairs.augment.blending.partner`), so it changes only when the
batches do (another world or batch size). Per sample, with probability ``p``:

* **MixUp**: ``lam ~ Beta(alpha, alpha)``; A becomes ``lam * A_i + (1 - lam) * A_partner``,
  B the same with the same ``lam``; the label is mixed with ``lam``.
* **CutMix**: ``lam ~ Beta(alpha, alpha)``; a box centred at a uniform pixel ``(cy, cx)``
  with half sides ``floor(H * sqrt(1 - lam) / 2)`` and ``floor(W * sqrt(1 - lam) / 2)``,
  clipped to the image, is taken from the partner's A into A and from the partner's B
  into B; ``lam`` becomes ``1 - box area / (H * W)``, the label is mixed with it, and a
  dense label takes the box too.

Uniforms, per sample: ``u0 < p`` decides whether the op applies (``lam = 1`` otherwise),
``lam = F^-1(u1)`` by Beta's inverse CDF (:func:`~ffcv_pairs.kernels.betas.beta_quantile`),
and for CutMix ``cy = floor(u2 * H)``, ``cx = floor(u3 * W)``. See docs/batch-ops.md for
the differences from torchvision v2's MixUp and CutMix.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from .._checks import integer, number, one_of, optional
from ..format.schema import PairSchema
from ..kernels.betas import beta_quantile
from .batch_ops import BatchOp, on_device, replaced, to_batch_device
from .blending import (
    Channels,
    blend_rows,
    dense_axes,
    field_name,
    mixed_label,
    partner,
    spatial_size,
)

__all__ = ["Boxes", "CutMix", "MixUp", "cut_boxes"]


class _PairMix(BatchOp):
    """What MixUp and CutMix share: their options, checked, and the weight draw."""

    def __init__(
        self,
        num_classes: int | None,
        alpha: float = 1.0,
        p: float = 1.0,
        channels: Channels = "auto",
    ) -> None:
        op = type(self).__name__
        self.num_classes = optional(integer)(f"{op} num_classes", num_classes, 1)
        self.alpha = number(f"{op} alpha", alpha, above=0.0, most=1e6)
        self.p = number(f"{op} p", p, 0.0, 1.0)
        self.channels: Channels = one_of(f"{op} channels", channels, ["auto", "first", "last"])  # type: ignore[assignment]

    def weights(self, u: np.ndarray) -> np.ndarray:
        """Each row's ``lam`` (float64): ``F^-1(u1)`` where ``u0 < p``, else 1."""
        a = float(self.alpha)
        lam = beta_quantile(np.ascontiguousarray(u[:, 1]), a, a)
        return np.where(u[:, 0] < self.p, lam, 1.0)

    def _label(self, batch: Any, lam: torch.Tensor) -> torch.Tensor:
        op, name = type(self).__name__, field_name(batch, 2)
        return mixed_label(batch[2], lam, self.num_classes, op, name)


class MixUp(_PairMix):
    """Paired MixUp: per sample, with probability ``p``, A and B blended with their
    partner's A and B by one ``lam ~ Beta(alpha, alpha)``; the label mixed with ``lam``.

    Args:
        num_classes: Classes of an integer label (ids ``0 .. num_classes - 1``), which comes
            back as soft targets ``(n, num_classes)``; None for float or vector labels.
        alpha: Beta's parameter (torchvision's default, 1.0: ``lam`` uniform).
        p: Probability that a sample is mixed.
        channels: Where the images' channels are, for telling a dense label:
            ``auto`` (from the shape), ``first`` or ``last``.

    A dense label (per-pixel, the images' ``H, W``) is refused: its values would blend.
    """

    draws = 2

    def params(self, u: np.ndarray, batch: Any) -> torch.Tensor:
        return on_device(self.weights(u), batch)

    def apply(self, batch: Any, params: Any) -> Any:
        label = batch[2]
        h, w = spatial_size(batch[0], self.channels, "MixUp")[:2] if label.ndim >= 3 else (0, 0)
        if label.ndim >= 3 and dense_axes(label, (h, w)) is not None:
            raise ValueError(
                f"MixUp cannot blend the dense label field {field_name(batch, 2)!r} of shape "
                f"{tuple(label.shape)} (a per-pixel map of the {h}x{w} images); use CutMix"
            )
        a, b = blend_rows(batch[0], params), blend_rows(batch[1], params)
        return replaced(batch, {0: a, 1: b, 2: self._label(batch, params)})


class Boxes(NamedTuple):
    """CutMix's parameters on the batch's device: the corrected weights, float32 ``(n,)``,
    and each row's box ``(y1, y2, x1, x2)``, int64 ``(n, 4)`` (empty where not applied)."""

    lam: torch.Tensor
    box: torch.Tensor


def cut_boxes(u: np.ndarray, lam: np.ndarray, height: int, width: int) -> np.ndarray:
    """Each row's box ``(y1, y2, x1, x2)`` (int64): centre ``(floor(u2 H), floor(u3 W))``,
    half sides ``floor(H sqrt(1 - lam) / 2)``, ``floor(W sqrt(1 - lam) / 2)``, clipped."""
    side = np.sqrt(np.clip(1.0 - lam, 0.0, 1.0))
    cy, cx = np.floor(u[:, 2] * height), np.floor(u[:, 3] * width)
    hy, hx = np.floor(0.5 * side * height), np.floor(0.5 * side * width)
    y1, y2 = np.maximum(cy - hy, 0), np.minimum(cy + hy, height)
    x1, x2 = np.maximum(cx - hx, 0), np.minimum(cx + hx, width)
    box = np.stack([y1, y2, x1, x2], axis=1)
    return box.astype(np.int64)


class CutMix(_PairMix):
    """Paired CutMix: per sample, with probability ``p``, one box pasted from the partner's
    A into A and from the partner's B into B; the label mixed by the box's share.

    Args:
        num_classes: Classes of an integer label, which comes back as soft targets
            ``(n, num_classes)``; None for float, vector or dense labels.
        alpha: Beta's parameter for the box's weight (default 1.0: uniform).
        p: Probability that a sample gets a box.
        channels: Where the images' channels are: ``auto`` (from the shape), ``first`` or
            ``last``.

    A dense label (per-sample shape ``(H, W)``, ``(C, H, W)`` or ``(H, W, C)`` with the
    images' ``H, W``) takes the box from the partner's label, whatever its dtype.
    """

    draws = 4

    def params(self, u: np.ndarray, batch: Any) -> Boxes:
        h, w, _ = spatial_size(batch[0], self.channels, "CutMix")
        hb, wb, _ = spatial_size(batch[1], self.channels, "CutMix", PairSchema.IMAGE_FIELDS[1])
        if (hb, wb) != (h, w):
            raise ValueError(f"CutMix needs A and B of one size, got {(h, w)} and {(hb, wb)}")
        box = cut_boxes(u, self.weights(u), h, w)
        lam = 1.0 - (box[:, 1] - box[:, 0]) * (box[:, 3] - box[:, 2]) / float(h * w)
        return Boxes(on_device(lam, batch), to_batch_device(torch.from_numpy(box), batch))

    def apply(self, batch: Any, params: Any) -> Any:
        a = batch[0]
        h, w, where = spatial_size(a, self.channels, "CutMix")
        inside = _box_mask(params.box, h, w)
        image = {"first": inside[:, None], "last": inside[..., None], "none": inside}[where]
        label = batch[2]
        dense = dense_axes(label, (h, w))
        if dense is None:
            label = self._label(batch, params.lam)
        else:  # the box, broadcast over the label's other axes
            ones = [1] * (label.ndim - 3)
            shape = (-1, *ones, h, w) if dense == "last" else (-1, h, w, *ones)
            label = torch.where(inside.view(shape), partner(label), label)
        b = batch[1]
        pasted = torch.where(image, partner(a), a), torch.where(image, partner(b), b)
        return replaced(batch, {0: pasted[0], 1: pasted[1], 2: label})


def _box_mask(box: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bool ``(n, H, W)``: True inside each row's box."""
    ys = torch.arange(height, device=box.device)
    xs = torch.arange(width, device=box.device)
    rows = (ys >= box[:, 0:1]) & (ys < box[:, 1:2])
    cols = (xs >= box[:, 2:3]) & (xs < box[:, 3:4])
    return rows[:, :, None] & cols[:, None, :]
