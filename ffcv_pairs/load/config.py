"""The loader's settings, checked once: :class:`LoaderConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy.typing as npt
import torch

from .._checks import SEED_LIMIT, flag, integer, number, one_of, optional
from ..augment.config import PairAugment
from .order import ORDERS, OrderKind

__all__ = ["DEFAULT_PREFETCH", "DEFAULT_WINDOW_BYTES", "LoaderConfig"]


#: The quasi-random window: 32 pages of 8 MiB.
DEFAULT_WINDOW_BYTES = 256 << 20

#: Largest batch_size, and largest batches_ahead or prefetch (buffer slots, batches ahead).
MAX_BATCH = 2**24
MAX_AHEAD = 1024

#: Batches the page prefetch stays ahead (measured: 4 was the fastest cold, bench/cold.py).
DEFAULT_PREFETCH = 4


@dataclass(frozen=True)
class LoaderConfig:
    """Everything :class:`PairLoader` needs besides the file. See :func:`make_loader`."""

    batch_size: int
    order: OrderKind = "quasi_random"
    os_cache: bool = True
    distributed: bool | None = None
    seed: int = 0
    drop_last: bool = True
    augment: PairAugment | None = None
    device: str | torch.device | None = None
    num_threads: int | None = None
    batches_ahead: int = 2
    prefetch: int = DEFAULT_PREFETCH
    window_bytes: int = DEFAULT_WINDOW_BYTES
    rank: int | None = None
    world_size: int | None = None
    indices: npt.ArrayLike | None = field(default=None, compare=False)
    verify: bool = False
    max_ram_gb: float | None = None

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("batch_size", integer("batch_size", self.batch_size, 1, MAX_BATCH))
        put("order", one_of("order", self.order, ORDERS))
        put("os_cache", flag("os_cache", self.os_cache))
        put("distributed", optional(flag)("distributed", self.distributed))
        put("seed", integer("seed", self.seed, 0, SEED_LIMIT - 1))
        put("drop_last", flag("drop_last", self.drop_last))
        if self.augment is not None and not isinstance(self.augment, PairAugment):
            raise TypeError(f"augment must be a PairAugment or None, got {self.augment!r}")
        if self.device is not None and not isinstance(self.device, str | torch.device):
            raise TypeError(
                f"device must be a device name such as 'cpu' or 'cuda:0', a torch.device or "
                f"None, got {self.device!r} ({type(self.device).__name__})"
            )
        most = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
        try:
            put("num_threads", optional(integer)("num_threads", self.num_threads, 1, most))
        except ValueError as e:
            raise ValueError(f"{e} (numba's NUMBA_NUM_THREADS is {most})") from None
        put("batches_ahead", integer("batches_ahead", self.batches_ahead, 1, MAX_AHEAD))
        put("prefetch", integer("prefetch", self.prefetch, 0, MAX_AHEAD))
        put("window_bytes", integer("window_bytes", self.window_bytes, 1))
        put("rank", optional(integer)("rank", self.rank, 0))
        put("world_size", optional(integer)("world_size", self.world_size, 1))
        if self.rank is not None and self.world_size is not None and self.rank >= self.world_size:
            raise ValueError(f"rank must be below world_size {self.world_size}, got {self.rank}")
        put("verify", flag("verify", self.verify))
        put("max_ram_gb", optional(number)("max_ram_gb", self.max_ram_gb, above=0))
