"""The benchmark's settings: one typed dataclass, three presets (default, ``--quick``,
``--smoke``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BENCH_DIR", "BenchConfig", "default_config", "quick_config", "smoke_config"]

BENCH_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BenchConfig:
    """What to generate and how long to measure.

    Attributes:
        n: Pairs in the main data set.
        shape: Shape of each image (A and B alike).
        dtype: Image dtype (``uint8``; ``float16``/``float32`` also work).
        num_classes: Labels are drawn uniformly from ``[0, num_classes)``.
        seed: Seed of the data and of every loader order.
        batch_size: Batch size of every throughput contestant.
        rounds: Rounds of the interleaved throughput measurement.
        min_epochs: Epochs per contestant per round (fast contestants).
        min_seconds: A fast contestant keeps adding epochs until this much time passed.
        time_box: Seconds after which a slow contestant stops, mid-epoch if need be.
        slow_batch_size: Batch size of the time-boxed ``.pt`` pack rows (see the report).
        pack_size: Samples per ``.pt`` pack (the "1000 per file" advice).
        lru_packs: Packs each worker keeps open in the LRU variant.
        rank_epochs: Epochs per round in each simulated rank.
        world_size: Simulated ranks.
        startup_sizes: Sample counts of the start-up table (tiny samples).
        startup_shape: Image shape of the start-up files.
        writer_sizes: Sample counts of the writer table, smallest first (its own
            generated per-sample ``.pt`` folder, independent of ``n``).
        memory_workers: DataLoader workers per rank in the memory table.
        memory_seconds: How long each configuration of the memory table runs at least.
        memory_min_batches: ...and batches each rank must receive first (0: stop at the
            time box even before the first batch, a lower bound on memory).
        model_samples: Samples in the virtual file of the read-amplification model.
        model_batches: Batches per chunk in the read-amplification model.
        readahead: Readahead window (bytes) of the read-amplification model.
        extras: Run LitData and Streaming when their venvs exist.
        cold_cache: Try to drop the page cache for the cold-cache row.
        cold_gib: Size of the file of the cold-epoch table (bench/tables/cold.py).
        keep_data: Keep the generated data under the work dir afterwards.
        work: Where data is generated.
        out: Where results go.
        label: ``default``, ``quick`` or ``smoke``, written into the report.
        augops_pairs: Pairs of the augmentation-ops table at 64x64 and at 224x224 (64
            batches an epoch at 224: with 16, every measured epoch also paid its boundary's
            pipeline drain and refill, which a training epoch of millions of samples does
            not; the next run at 4,096 measured plain decoding 11% faster, the ops -18% to
            +35%: this host varies by up to 40% between runs).
    """

    n: int = 16384
    shape: tuple[int, ...] = (3, 64, 64)
    dtype: str = "uint8"
    num_classes: int = 10
    seed: int = 0
    batch_size: int = 256
    rounds: int = 3
    min_epochs: int = 3
    min_seconds: float = 2.0
    time_box: float = 10.0
    slow_batch_size: int = 1
    pack_size: int = 1000
    lru_packs: int = 4
    rank_epochs: int = 4
    world_size: int = 4
    startup_sizes: tuple[int, ...] = (30_000, 300_000, 3_000_000)
    startup_shape: tuple[int, ...] = (1, 2, 2)
    writer_sizes: tuple[int, ...] = (16384, 100_000)
    memory_workers: tuple[int, ...] = (4, 12)
    memory_seconds: float = 8.0
    memory_min_batches: int = 2
    model_samples: int = 1_000_000
    model_batches: tuple[int, ...] = (1, 10, 100)
    readahead: int = 128 << 10
    extras: bool = True
    cold_cache: bool = True
    cold_gib: float = 2.0
    keep_data: bool = True
    work: Path = field(default=BENCH_DIR / ".work")
    out: Path = field(default=BENCH_DIR / "results")
    label: str = "default"
    augops_pairs: tuple[int, int] = (8192, 4096)

    def __post_init__(self) -> None:
        if self.n < self.world_size * self.batch_size:
            raise ValueError(
                f"n must be at least world_size * batch_size = "
                f"{self.world_size * self.batch_size}, got {self.n}"
            )
        if self.rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {self.rounds}")
        if self.dtype not in ("uint8", "float16", "float32"):
            raise ValueError(f"dtype must be one of uint8, float16, float32, got {self.dtype!r}")
        if not self.writer_sizes or min(self.writer_sizes) < 1:
            raise ValueError(f"writer_sizes must be positive counts, got {self.writer_sizes}")

    def replace(self, **changes: object) -> BenchConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def default_config() -> BenchConfig:
    """About 16 minutes on a 2-core machine with the LitData and Streaming extras."""
    return BenchConfig()


def quick_config() -> BenchConfig:
    """About 3.5 minutes on 2 cores: small data, one round, the 3M start-up row left out."""
    return BenchConfig(
        n=2048,
        rounds=1,
        min_epochs=2,
        min_seconds=0.5,
        time_box=2.0,
        rank_epochs=2,
        startup_sizes=(30_000, 300_000),
        writer_sizes=(1024, 2048),
        memory_workers=(4,),
        memory_seconds=2.0,
        memory_min_batches=0,
        model_samples=200_000,
        cold_gib=0.125,
        label="quick",
        augops_pairs=(1024, 128),
    )


def smoke_config() -> BenchConfig:
    """Every row and table at the smallest sizes, about 100 s on 2 cores: the test
    suite's check that a report is whole. Its figures mean nothing (one start-up size,
    two epochs, time boxes of a second, a 16 MiB cold file)."""
    return quick_config().replace(
        n=1024,
        min_seconds=0.0,
        time_box=1.0,
        startup_sizes=(30_000,),
        writer_sizes=(256, 512),
        memory_seconds=1.0,
        model_samples=50_000,
        cold_gib=1 / 64,
        label="smoke",
        augops_pairs=(512, 128),
    )
