"""The last step before the caller: a batch's values as its named tuple, then the batch
ops, in order, on the batch's device.

First ``PairAugment``'s ``swap`` (:class:`~ffcv_pairs.augment.swap.SwapAB`, drawing with
``OP_SWAP``), then the loader's ``batch_ops`` (the op at position ``j`` drawing with
``OP_BATCH + j``). Each op's uniforms are those of the batch's sample ids under the
loader's ``[seed, epoch]`` clock (:func:`~ffcv_pairs.kernels.hashing.batch_uniforms`), so a
sample's draws never depend on its batch, rank, thread count or a resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..augment.batch_ops import BatchOp
from ..augment.swap import SwapAB
from ..format.schema import PairSchema
from ..kernels.hashing import OP_BATCH, OP_SWAP, batch_uniforms
from .batches import batch_type, named_batch
from .options import LoaderConfig

__all__ = ["Handout", "batch_op_ids"]


def batch_op_ids(config: LoaderConfig) -> list[tuple[int, BatchOp]]:
    """``(op id, op)`` of every batch op of ``config``, in the order they run."""
    ops: list[tuple[int, BatchOp]] = []
    augment = config.augment
    if augment is not None and augment.swap:
        ops.append((OP_SWAP, SwapAB(augment.swap, augment.swap_label)))
    ops += [(OP_BATCH + j, op) for j, op in enumerate(config.batch_ops or ())]
    return ops


class Handout:
    """Makes each batch the caller gets: ``handout(values, ids)``.

    Args:
        schema: The file's schema (the batch's named tuple type).
        config: The loader's options (``augment.swap``, ``batch_ops``).
        clock: The loader's ``[seed, epoch]``, read at each batch.
        copy: Clone the label and extras (the CPU path's reused slots).
    """

    def __init__(
        self, schema: PairSchema, config: LoaderConfig, clock: np.ndarray, copy: bool
    ) -> None:
        self.kind = batch_type(schema)
        self.ops = batch_op_ids(config)
        self.clock = clock
        self.copy = copy

    def __call__(self, values: Sequence[torch.Tensor], ids: np.ndarray) -> Any:
        batch = named_batch(self.kind, values, self.copy)
        if not self.ops:
            return batch
        assert len(ids) == len(batch[0]), (len(ids), len(batch[0]))
        seed, epoch = int(self.clock[0]), int(self.clock[1])
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        for op_id, op in self.ops:
            u = batch_uniforms(seed, epoch, ids, op_id, int(op.draws))
            out = op.apply(batch, op.params(u, batch))
            if not isinstance(out, tuple) or len(out) != len(batch):
                raise TypeError(
                    f"batch op {op!r} returned {type(out).__name__}; it must return the batch "
                    f"with its {len(batch)} fields (ffcv_pairs.augment.batch_ops.replaced)"
                )
            batch = out
        return batch
