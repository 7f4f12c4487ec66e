"""The loader's settings, checked once: :class:`LoaderConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy.typing as npt

from ..augment.config import PairAugment
from .order import ORDERS, OrderKind

__all__ = ["DEFAULT_PREFETCH", "DEFAULT_WINDOW_BYTES", "LoaderConfig"]


#: The quasi-random window: 32 pages of 8 MiB.
DEFAULT_WINDOW_BYTES = 256 << 20

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
    device: str | None = None
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
        if self.order not in ORDERS:
            raise ValueError(f"order {self.order!r} is not supported; must be one of {ORDERS}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.batches_ahead < 1:
            raise ValueError(f"batches_ahead must be at least 1, got {self.batches_ahead}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be non-negative (0 disables it), got {self.prefetch}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {self.num_threads}")
        if self.window_bytes < 1:
            raise ValueError(f"window_bytes must be positive, got {self.window_bytes}")
        if self.augment is not None and not isinstance(self.augment, PairAugment):
            raise TypeError(f"augment must be a PairAugment or None, got {type(self.augment)}")
