"""``PairAugment(swap=p)``: A and B change places, per sample, with probability ``p``.

The draw is ``uniform(sample_key(seed, epoch, sample, OP_SWAP, 0), 0) < p``: the same
for a sample in every run, thread count, world size and resume. It runs as a batch op,
on the batch's device, before the loader's own ``batch_ops``: the swapped rows of A and B
are exchanged in place (only those rows are copied). The label is left alone unless
``swap_label`` says how a swap changes it: a function ``(label, swapped) -> label`` of the
batch's label and a bool tensor ``(n,)`` on its device, or its import path
``"package.module.function"`` (what a YAML file gives).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .._checks import shown
from ..kernels.row_swap import swap_rows
from ..kernels.stand_in import kernel_ready
from .batch_ops import BatchOp, replaced, to_batch_device

__all__ = ["LabelSwap", "SwapAB", "label_swap"]

#: How a swap changes a label: ``(label, swapped) -> label``.
LabelSwap = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def label_swap(name: str, given: Any) -> LabelSwap | None:
    """``given`` (None, a callable, or a ``"module.function"`` import path) as a callable.

    Raises:
        TypeError: neither. ValueError: the path does not import, or names no callable.
    """
    if given is None or callable(given):
        return given
    if not isinstance(given, str):
        raise TypeError(
            f"{name} must be a function (label, swapped) -> label, its import path "
            f"'module.function', or None, got {shown(given)} ({type(given).__name__})"
        )
    module, _, attr = given.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), attr) if module else None
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{name}={given!r} does not import: {e}") from None
    if not callable(found):
        raise ValueError(f"{name}={given!r} must name a function 'module.function'")
    return found


class SwapAB(BatchOp):
    """A and B exchanged in the rows whose draw is below ``p``; the label changed by
    ``label`` when given (see the module docstring)."""

    draws = 1

    def __init__(self, p: float, label: LabelSwap | str | None = None) -> None:
        self.p = p
        self.label = label_swap("augment swap_label", label)

    def params(self, u: np.ndarray, batch: Any) -> torch.Tensor:
        """The swapped rows' indices (int64, on the batch's device)."""
        rows = np.flatnonzero(u[:, 0] < self.p)
        return to_batch_device(torch.from_numpy(rows), batch)

    def apply(self, batch: Any, params: Any) -> Any:
        a, b = batch[0], batch[1]
        if len(params) and a.device.type == "cpu":
            _swap_cpu(a, b, params.numpy())
        elif len(params):
            held = a.index_select(0, params)
            a.index_copy_(0, params, b.index_select(0, params))
            b.index_copy_(0, params, held)
        if self.label is None:
            return batch
        swapped = torch.zeros(len(a), dtype=torch.bool, device=a.device)
        swapped[params] = True
        return replaced(batch, {2: self.label(batch[2], swapped)})


def _swap_cpu(a: torch.Tensor, b: torch.Tensor, rows: np.ndarray) -> None:
    """Rows ``rows`` of CPU tensors ``a`` and ``b`` exchanged in place: by
    :func:`~ffcv_pairs.kernels.row_swap.swap_rows` (one pass a row) once it is compiled and
    where both are C-contiguous rows of whole 8-byte words, else row by row through a held
    row (torch's CPU ``index_select`` of uint8 images runs at about 50 MB/s here: 106 ms for
    32 rows of 3x224x224; a row's ``copy_`` at memory speed)."""
    n = len(a)
    size = a[0].numel() * a.element_size()
    shaped = a.is_contiguous() and b.is_contiguous() and a.dtype == b.dtype
    if shaped and size % 8 == 0 and a.shape == b.shape and n:
        rows64 = np.ascontiguousarray(rows, dtype=np.int64)
        words_a = a.numpy().reshape(n, -1).view(np.uint64)
        words_b = b.numpy().reshape(n, -1).view(np.uint64)
        if kernel_ready(swap_rows, words_a, words_b, rows64):
            swap_rows(words_a, words_b, rows64)
            return
    held = torch.empty_like(a[0])
    for i in rows.tolist():
        held.copy_(a[i])
        a[i].copy_(b[i])
        b[i].copy_(held)
