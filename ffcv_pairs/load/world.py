"""Where a loader runs: its rank in the job and its threads (the device: ``devices``)."""

from __future__ import annotations

import os

import numba
import torch

__all__ = ["default_num_threads", "local_ranks", "resolve_world"]


def resolve_world(
    rank: int | None, world_size: int | None, distributed: bool | None
) -> tuple[int, int]:
    """``(rank, world_size)``: as given, from ``torch.distributed``, or ``(0, 1)``.

    Raises:
        ValueError: only one of ``rank`` and ``world_size`` given, or
            ``distributed=True`` without an initialised process group.
    """
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise ValueError("pass both rank and world_size, or neither")
        return rank, world_size
    dist = torch.distributed
    initialised = dist.is_available() and dist.is_initialized()
    if distributed and not initialised:
        raise ValueError(
            "distributed=True needs an initialised torch.distributed process group "
            "(or pass rank= and world_size=)"
        )
    if (distributed is None and initialised) or distributed:
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def local_ranks(world_size: int) -> int:
    """Ranks on this node: ``LOCAL_WORLD_SIZE`` (torchrun), ``SLURM_NTASKS_PER_NODE``, or
    the whole world (one node).

    Raises:
        ValueError: the variable is set to something other than a positive integer (named).
    """
    for name in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        local = os.environ.get(name)
        if local:
            if not local.strip().isdigit() or int(local) < 1:
                raise ValueError(f"{name}={local!r}: the ranks on this node, a positive integer")
            return int(local)
    return max(1, world_size)


def default_num_threads(ranks_on_node: int) -> int:
    """The node's cores split across its local ranks, at most numba's limit
    (``NUMBA_NUM_THREADS``: numba refuses more threads than its pool holds)."""
    most = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    return max(1, min(most, len(os.sched_getaffinity(0)) // max(1, ranks_on_node)))
