"""Where batches go: a device name resolved to one definite ``torch.device``.

A bare ``"cuda"`` means "the current device" wherever it is used, and in a job
of several processes that have not called ``torch.cuda.set_device`` that is GPU 0
for every rank: all ranks' batches (and CUDA contexts) pile onto one GPU. So the
default resolves to ``cuda:LOCAL_RANK`` (torchrun, Lightning and SLURM launchers
set it), or the current device in a single process, never to a bare ``"cuda"``.
``"cpu"`` (and any other non-CUDA device) is returned without touching CUDA, so
it creates no CUDA context.
"""

from __future__ import annotations

import os

import torch

__all__ = ["resolve_device"]


def _local_rank() -> int | None:
    value = os.environ.get("LOCAL_RANK")
    if value is None or value.strip() == "":
        return None
    try:
        rank = int(value)
    except ValueError:
        raise ValueError(f"LOCAL_RANK={value!r} must be a non-negative integer") from None
    if rank < 0:
        raise ValueError(f"LOCAL_RANK={value!r} must be a non-negative integer")
    return rank


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The definite device for ``device``.

    Args:
        device: ``None`` (a GPU when there is one, else the CPU), ``"cuda"`` (a GPU,
            which one as for ``None``), or a definite name such as ``"cpu"`` or
            ``"cuda:1"``, returned as it is.

    Returns:
        ``cpu``, or ``cuda:i`` with an index: ``LOCAL_RANK`` modulo the visible GPUs
        when ``LOCAL_RANK`` is set (one process per GPU, or each process seeing only
        its own GPU), else ``torch.cuda.current_device()``.

    Raises:
        ValueError: ``device`` is not a device name, ``"cuda"`` was asked for without
            a usable GPU, or ``LOCAL_RANK`` is not a non-negative integer.
    """
    if device is not None:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device={device!r} is not a torch device ({e})") from None
        if dev.type != "cuda" or dev.index is not None:
            return dev
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} needs a CUDA GPU, but none is available")
    elif not torch.cuda.is_available():
        return torch.device("cpu")
    rank = _local_rank()
    if rank is not None:
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())
