"""Compile every kernel a configuration needs, ahead: for a container image's build step.

A fresh machine's first batch waits for numba to compile the kernels it needs (tens of
seconds for an augmenting pipeline). They are cached per user and package version (see
:mod:`ffcv_pairs.kernels.cache_dir`), so a container image that runs this once at build time,
or a cluster node's job prologue, starts every later job with warm kernels::

    ffcv-pairs warmup                                   # plain decoding
    ffcv-pairs warmup --augment configs/ddp_4gpu.yaml   # its data.augment block, and eval
    ffcv-pairs warmup --augment aug.yaml --codec jpeg --shape 3,224,224

It writes a small file of the given stored shape, dtype and codec in a temporary folder
and reads one batch of it with each pipeline the configuration runs (its augmentation, its
evaluation twin and plain decoding), both with one thread and with several, since
the loader calls a serial kernel on one thread and a parallel one otherwise. Kernels are
typed, not sized: a file of another image size or sample count uses the same machine code.
The batch ops' draws (the batch's uniforms, Beta's quantile for MixUp and CutMix) are
compiled too, whatever the configuration.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .augment.config import PairAugment, image_axes
from .augment.evaluation import eval_pipeline
from .format.schema import ArraySpec, PairSchema

__all__ = ["WarmupReport", "augment_from_config", "warmup"]


@dataclass(frozen=True)
class WarmupReport:
    """What :func:`warmup` ran: ``pipelines`` (names), ``threads`` and ``seconds``."""

    pipelines: tuple[str, ...]
    threads: tuple[int, ...]
    seconds: float

    def summary(self) -> str:
        from .kernels.cache_dir import cache_root

        where = cache_root() or "NUMBA_CACHE_DIR"
        return (
            f"warmup: {len(self.pipelines)} pipeline(s) ({', '.join(self.pipelines)}) on "
            f"{'/'.join(map(str, self.threads))} thread(s) in {self.seconds:.1f} s; kernels "
            f"cached under {where}"
        )


def augment_from_config(path: str | os.PathLike[str]) -> PairAugment:
    """A :class:`PairAugment` from a YAML file: its options, an ``augment:`` block, or a
    LightningCLI config's ``data.augment`` block."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: expected a mapping of augment options, got {type(data).__name__}"
        )
    if isinstance(data.get("data"), dict) and "augment" in data["data"]:
        data = data["data"]
    block = data.get("augment", data)
    if not isinstance(block, dict):
        raise ValueError(f"{path}: 'augment' must be a mapping of options, got {block!r}")
    return PairAugment.from_dict(block)


def warmup(
    augment: PairAugment | None = None,
    *,
    codec: str | None = None,
    shape: tuple[int, ...] = (3, 48, 48),
    dtype: str = "uint8",
    threads: tuple[int, ...] | None = None,
) -> WarmupReport:
    """Compile (or load) every kernel that ``augment`` on such a file needs.

    Args:
        augment: The training augmentation (None: plain decoding only).
        codec: The file's codec (``"jpeg"`` or None for raw arrays).
        shape: One stored image's shape (its axes matter, not its size).
        dtype: The stored images' dtype.
        threads: Thread counts to run with (default: 1 and every core, within numba's
            ``NUMBA_NUM_THREADS``).
    """
    from .load.loader import make_loader
    from .load.world import default_num_threads
    from .write.sources import ArraySource
    from .write.writer import write_pairs

    if threads is None:  # the serial kernels, and the parallel ones where they can run
        threads = tuple(sorted({1, default_num_threads(1)}))
    started = time.perf_counter()
    pipelines = _pipelines(augment)
    with tempfile.TemporaryDirectory(prefix="ffcv-pairs-warmup-") as folder:
        path = Path(folder) / "warmup.beton"
        a, b = _images(32, shape, dtype)
        label = PairSchema.LABEL_FIELD
        fields = {label: np.arange(32), **_dense_fields(augment, shape, dtype, 32)}
        source = ArraySource(a, b, fields.pop(label), "warmup", **fields)
        write_pairs(source, path, workers=1, codec=codec, progress=False)
        for aug in pipelines.values():
            for n in threads:
                loader = make_loader(
                    path, batch_size=8, augment=aug, order="sequential", num_threads=n
                )
                _settle(loader)
    _batch_draws()
    return WarmupReport(tuple(pipelines), tuple(threads), time.perf_counter() - started)


def _settle(loader: Any) -> None:
    """Read batches until every kernel the loader calls is compiled and cached: the first
    batches may come from numpy stand-ins or serial twins while the kernels compile in the
    background (:mod:`~ffcv_pairs.kernels.stand_in`)."""
    from .kernels.stand_in import settled, wait_for_compiles

    for _epoch in range(100):
        for _batch in loader:
            wait_for_compiles()
            if settled():
                return


def _pipelines(augment: PairAugment | None) -> dict[str, PairAugment | None]:
    """The pipelines a job with ``augment`` runs: training, evaluation (its deterministic
    twin, as :class:`~ffcv_pairs.lightning.PairDataModule` validates by default) and plain
    decoding."""
    pipelines = {"augment": augment, "eval": eval_pipeline(augment), "plain": None}
    return {name: aug for name, aug in pipelines.items() if aug is not None or name == "plain"}


def _dense_fields(
    augment: PairAugment | None, shape: tuple[int, ...], dtype: str, n: int
) -> dict[str, np.ndarray]:
    """A field for each of ``augment``'s dense fields (the label among them, by name), of
    the images' height and width: float64 masks (any fill is one of their values), float32
    disparities and flows."""
    if augment is None or not augment.dense_fields:
        return {}
    axes = image_axes(ArraySpec(shape, dtype), augment.channels)
    size: tuple[int, ...] = (n, axes.height, axes.width)
    made: dict[str, tuple[tuple[int, ...], str]] = {
        "mask": (size, "float64"),
        "disparity": (size, "float32"),
    }
    made["flow"] = ((n, 2, axes.height, axes.width), "float32")
    return {name: np.zeros(*made[dense.kind]) for name, dense in augment.dense_fields.items()}


def _batch_draws() -> None:
    """The kernels batch ops draw with, called with the types the loader passes."""
    from .kernels.betas import beta_quantile
    from .kernels.hashing import OP_BATCH, batch_uniforms

    u = batch_uniforms(0, 0, np.arange(2, dtype=np.int64), OP_BATCH, 2)
    beta_quantile(np.ascontiguousarray(u[:, 1]), 1.0, 1.0)


def _images(n: int, shape: tuple[int, ...], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Smooth seeded images (a JPEG of noise is needlessly large)."""
    grid = np.indices(shape).sum(axis=0).astype(np.float64)
    rng = np.random.default_rng(0)
    base = (grid[None] + rng.integers(0, 64, (n,) + (1,) * len(shape))) % 256
    a = base.astype(dtype)
    return a, a[..., ::-1].copy()
