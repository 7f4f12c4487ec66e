"""Batch ops: a function over the whole batch, where the batch is (GPU or CPU), with
per-sample random parameters from the same counter-based keys as every other op.

A batch op is a :class:`BatchOp`: how many uniforms it draws per sample (``draws``), how
it turns them into its parameters on the host (:meth:`BatchOp.params`, the draw) and how
it applies them to the batch (:meth:`BatchOp.apply`, the work)::

    class Vignette(BatchOp):
        draws = 1  # one uniform per sample

        def __init__(self, strength: float = 0.5) -> None:
            self.strength = strength

        def apply(self, batch, params):
            # params: float32 (n, 1) on the batch's device (the default params()).
            a, b = batch[0], batch[1]
            h, w = a.shape[-2:]
            y = torch.linspace(-1, 1, h, device=a.device)[:, None]
            x = torch.linspace(-1, 1, w, device=a.device)[None, :]
            k = self.strength * params[:, 0].view(-1, 1, 1, 1)
            gain = (1 - k * (x * x + y * y)).clamp_min(0).to(a.dtype)
            return replaced(batch, {0: a * gain, 1: b * gain})  # one draw: A and B alike

    loader = make_loader("train.beton", batch_size=64, batch_ops=[Vignette(0.4)])

The loader applies its ``batch_ops`` in order to each batch it hands out, after the batch
reached its device (normalised there when ``augment`` normalises) and after ``PairAugment``'s
``swap``. Row ``i`` of the uniforms comes from ``sample_key(seed, epoch, id_i, OP_BATCH + j,
0)`` for the op at position ``j`` (:func:`~ffcv_pairs.kernels.hashing.batch_uniforms`):
the same for a sample in every run, thread count, world size and resume, and never
shared with another op (or with the same op at another position).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .._checks import integer

__all__ = [
    "MAX_BATCH_OPS",
    "MAX_DRAWS",
    "BatchOp",
    "check_batch_ops",
    "on_device",
    "replaced",
    "to_batch_device",
]

#: Most ops in one loader's ``batch_ops``, and most uniforms one op draws per sample.
MAX_BATCH_OPS = 64
MAX_DRAWS = 1 << 16


def to_batch_device(host: torch.Tensor, batch: Sequence[torch.Tensor]) -> torch.Tensor:
    """A host tensor moved to the device of ``batch``'s first field without waiting for
    the device: to a GPU through pinned memory (a copy from pageable memory may wait for
    the stream's queued work, a training step's; PyTorch keeps a pinned block until its
    copy ran)."""
    device = batch[0].device
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def on_device(values: np.ndarray, batch: Sequence[torch.Tensor]) -> torch.Tensor:
    """``values`` as a float32 tensor on the device of ``batch``'s first field."""
    return to_batch_device(torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)), batch)


def replaced(batch: Any, changes: dict[int, torch.Tensor]) -> Any:
    """``batch`` (a named tuple, or a tuple) with field ``i`` replaced by ``changes[i]``:
    0 and 1 are A and B, 2 the label, 3 on the extra fields."""
    values = [changes.get(i, value) for i, value in enumerate(batch)]
    return type(batch)(*values) if hasattr(batch, "_fields") else tuple(values)


class BatchOp(ABC):
    """An op over a whole batch. Subclass it, set :attr:`draws` and write :meth:`apply`.

    The batch is the loader's named tuple (``PairBatch(A, B, label, *extras)``):
    ``batch[0]`` and ``batch[1]`` are A and B, ``batch[2]`` the label; ``apply`` returns a
    batch of the same fields (:func:`replaced`, or the named tuple's ``_replace``), which
    may change their dtype or shape (MixUp turns class ids into soft targets). In YAML
    (LightningCLI), an op is given as ``class_path`` and ``init_args``, so its
    ``__init__`` arguments are typed.
    An op must pickle (spawned workers, ``ddp_spawn``): keep lambdas out of it.
    """

    #: Uniforms drawn per sample (0: the op draws nothing).
    draws: int = 0

    def params(self, u: np.ndarray, batch: Any) -> Any:
        """The draw, on the host: this batch's parameters from its uniforms ``u``, float64
        ``(n, draws)`` in ``[0, 1)``, row ``i`` for row ``i`` of the batch. ``batch`` is for
        its shapes and device only: reading a GPU tensor's values here would wait for the GPU.

        Default: ``u`` as float32 on the batch's device, each value rounded down to a
        multiple of ``2**-24`` (so still below 1). Whatever this returns, :meth:`apply` gets.
        """
        return on_device(np.floor(u * 2.0**24) * 2.0**-24, batch)

    @abstractmethod
    def apply(self, batch: Any, params: Any) -> Any:
        """The work: ``batch`` changed by ``params`` (from :meth:`params`), on the batch's
        device. May change the batch's tensors in place."""

    def __call__(self, batch: Any, u: np.ndarray) -> Any:
        """``apply(batch, params(u, batch))``: the op on one batch, for tests of an op."""
        return self.apply(batch, self.params(u, batch))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def check_batch_ops(name: str, ops: Any) -> tuple[BatchOp, ...] | None:
    """``ops`` (a list or tuple of :class:`BatchOp`, or None) as a tuple, checked.

    Raises:
        TypeError: not a list or tuple, or an item is not a BatchOp. ValueError: too many
            ops, or an op's ``draws`` out of range.
    """
    if ops is None:
        return None
    if not isinstance(ops, list | tuple):
        raise TypeError(f"{name} must be a list of BatchOp or None, got {type(ops).__name__}")
    if len(ops) > MAX_BATCH_OPS:
        raise ValueError(f"{name} takes at most {MAX_BATCH_OPS} ops, got {len(ops)}")
    for i, op in enumerate(ops):
        if not isinstance(op, BatchOp):
            raise TypeError(
                f"{name}[{i}] must be a BatchOp (ffcv_pairs.augment.batch_ops: draws, "
                f"params, apply), got {op!r} ({type(op).__name__})"
            )
        integer(f"{name}[{i}].draws", op.draws, 0, MAX_DRAWS)
    return tuple(ops)
