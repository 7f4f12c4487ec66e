"""The settings of ``python -m bench --user-scale`` / ``--user-scale-sizes``: one source at the
largest size, every size read from its first ``N`` pairs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.core.settings import BENCH_DIR
from bench.scale.user_data import SourceSpec
from bench.scale.user_targets import FULL

__all__ = ["UserScaleConfig"]


@dataclass(frozen=True)
class UserScaleConfig:
    """Settings of ``--user-scale``.

    Attributes:
        n: Pairs of the source: the largest size (set to ``max(sizes)`` when ``sizes`` is given;
            an ``n`` other than the default must then be that largest size).
        sizes: The sizes to run, ascending (default ``(n,)``): size ``N`` reads the first ``N``
            pairs of the one source, and its own ``.beton`` written with ``--limit N``.
        shape: Image shape (uint8, A and B alike).
        num_classes: Labels uniform in ``[0, num_classes)``.
        seed: Data and order seed.
        pack_size: Samples per ``.pt`` pack.
        world_size: Simulated ranks.
        global_batch: Samples per step over all ranks.
        crop_padding: Padding of the paired crop.
        workers: DataLoader workers per rank, one row of the user's setup each.
        pack_workers: DataLoader workers per rank of the packs row.
        time_box: Seconds each row reads after its first batch.
        start_cap: Seconds a rank may take to import, join the group, build and get its first
            batch; a row ends ``start_cap + time_box`` (ffcv-pairs: ``+ 4 x time_box``, to
            cross an epoch boundary) plus a margin after launch, whatever happened.
        floor_gib: A row is stopped when ``MemAvailable`` drops below this.
        alone_runs: Start-ups of 1 rank alone at the largest size (after every row).
        alone_seconds: Seconds each of them reads after its first batch.
        gen_workers: Processes making the source (each creates files from 8 threads).
        writer_workers: ``--workers`` of the writer.
        writer_cap: Seconds after which the writer is stopped (0: 8 x the target's share of
            15 min per 3M pairs, at least an hour).
        work: Where the data goes (a folder of its own, deleted afterwards).
        out: Where the report goes.
        date: Report name part.
    """

    n: int = FULL
    sizes: tuple[int, ...] = ()
    shape: tuple[int, ...] = (1, 16, 16)
    num_classes: int = 10
    seed: int = 0
    pack_size: int = 1000
    world_size: int = 4
    global_batch: int = 1024
    crop_padding: int = 2
    workers: tuple[int, ...] = (12, 4)
    pack_workers: int = 12
    time_box: float = 60.0
    start_cap: float = 300.0
    floor_gib: float = 2.0
    alone_runs: int = 3
    alone_seconds: float = 2.0
    gen_workers: int = 2
    writer_workers: int = 2
    writer_cap: float = 0.0
    work: Path = field(default=BENCH_DIR / ".work" / "user-scale")
    out: Path = field(default=BENCH_DIR / "results")
    date: str = "today"

    def __post_init__(self) -> None:
        if self.sizes:
            if self.n not in (FULL, max(self.sizes)):
                raise ValueError(f"n={self.n} must be the largest of sizes={self.sizes}")
            object.__setattr__(self, "sizes", tuple(sorted(set(self.sizes))))
            object.__setattr__(self, "n", self.sizes[-1])
        else:
            object.__setattr__(self, "sizes", (self.n,))
        if self.global_batch % self.world_size:
            raise ValueError(
                f"global_batch must be a multiple of world_size={self.world_size}, "
                f"got {self.global_batch}"
            )
        least = max(self.world_size * self.global_batch, self.world_size * self.pack_size)
        if self.sizes[0] < least:
            raise ValueError(
                f"every --user-scale size must be at least {least} pairs, got {self.sizes[0]}"
            )
        if self.time_box <= 0 or self.alone_seconds <= 0:
            raise ValueError(
                f"time_box and alone_seconds must be positive, got {self.time_box}, "
                f"{self.alone_seconds}"
            )
        if self.alone_runs < 0:
            raise ValueError(f"alone_runs must be at least 0, got {self.alone_runs}")

    @property
    def source(self) -> SourceSpec:
        """The one source, at the largest size."""
        return SourceSpec(
            self.n,
            self.shape,
            self.num_classes,
            self.seed,
            self.pack_size,
            self.work / "pt",
            self.work / "packs",
        )

    def beton(self, n: int) -> Path:
        """The `.beton` of size ``n`` (the writer's ``--limit n``)."""
        return self.work / "betons" / str(n) / "train.beton"

    @property
    def image_bytes(self) -> int:
        size = 1
        for d in self.shape:
            size *= d
        return size
