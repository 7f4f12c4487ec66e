"""The loader's settings, checked once: :class:`LoaderConfig`."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import numba
import numpy.typing as npt
import torch
from ffcv.pipeline.operation import Operation

from .._checks import SEED_LIMIT, flag, integer, number, one_of, optional
from ..augment.batch_ops import BatchOp, check_batch_ops
from ..augment.config import PairAugment
from ..augment.units import check_units, dequantizing
from ..format.schema import PairSchema
from .cache_plan import parse_bytes
from .field_ops import check_field_ops
from .order import ORDERS, PARTITIONS, OrderKind, Partition

__all__ = [
    "DEFAULT_PREFETCH",
    "DEFAULT_WINDOW_BYTES",
    "BatchOp",
    "LoaderConfig",
    "make_loader_doc",
    "options_doc",
]


#: The quasi-random window: 32 pages of 8 MiB.
DEFAULT_WINDOW_BYTES = 256 << 20

#: Largest batch_size, and largest batches_ahead or prefetch (buffer slots, batches ahead).
MAX_BATCH = 2**24
MAX_AHEAD = 1024

#: Batches the page prefetch stays ahead (measured: 4 was the fastest cold, bench/tables/cold.py).
DEFAULT_PREFETCH = 4


def option(doc: str, default: Any = MISSING) -> Any:
    """A :class:`LoaderConfig` field: its default and its documentation, declared once."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class LoaderConfig:
    """Everything :class:`~ffcv_pairs.load.loader.PairLoader` needs besides the file.

    The one declaration of the loader's options: their names, types, defaults,
    documentation (:func:`options_doc`) and checks. :func:`~ffcv_pairs.make_loader`
    and :class:`~ffcv_pairs.PairDataModule` take the same options, and a test fails
    if their signatures drift from these fields.
    """

    batch_size: int = option("Samples per batch on this rank.")
    order: OrderKind = option(
        '``"quasi_random"`` (default), ``"random"`` or ``"sequential"``.', "quasi_random"
    )
    os_cache: bool = option(
        "Read through the OS page cache (shared by all ranks on a node). False: upstream's "
        "process cache (private page buffers filled by reader threads).",
        True,
    )
    distributed: bool | None = option(
        "Shard across ranks. ``None``: if ``torch.distributed`` is initialised.", None
    )
    seed: int = option("Order (and augmentation) seed, the same on every rank.", 0)
    drop_last: bool = option(
        "Equal, whole batches on every rank; without it nothing is dropped.", True
    )
    augment: PairAugment | None = option(
        "A :class:`~ffcv_pairs.augment.config.PairAugment`, or None.", None
    )
    batch_ops: Sequence[BatchOp] | None = option(
        "Ops over each whole batch, applied in order on its device after ``augment`` (and "
        "its ``swap``): :class:`~ffcv_pairs.augment.batch_ops.BatchOp` objects, such as "
        ":class:`~ffcv_pairs.augment.mixup.MixUp` and :class:`~ffcv_pairs.augment.mixup."
        "CutMix`, each drawing per-sample parameters from the counter-based keys (see "
        "docs/batch-ops.md).",
        None,
    )
    device: str | None = option(
        "Where batches go (a name or a ``torch.device``); default ``cuda:LOCAL_RANK`` (or "
        "the current GPU) when there is one, else the CPU (see "
        ":func:`~ffcv_pairs.load.devices.resolve_device`).",
        None,
    )
    num_threads: int | None = option(
        "JIT threads; default: the node's cores over its local ranks.", None
    )
    batches_ahead: int = option(
        "Batches prepared ahead of the consumer (buffer slots: this + 3).", 2
    )
    prefetch: int = option(
        "With ``os_cache``, request each 8 MiB page from storage this many batches before "
        "the batch that first reads it (``madvise(MADV_WILLNEED)`` from a helper thread; see "
        ":mod:`~ffcv_pairs.load.prefetch`). 0 disables it. Never changes the batches; helps "
        "cold (larger than RAM) epochs. A ``random`` order over a file larger than half the "
        "RAM requests each image's bytes instead of whole pages.",
        DEFAULT_PREFETCH,
    )
    window_bytes: int = option(
        "The quasi-random window (default 256 MiB): randomness against read locality (see "
        ":mod:`~ffcv_pairs.load.order`).",
        DEFAULT_WINDOW_BYTES,
    )
    rank: int | None = option("Explicit sharding, with ``world_size``, instead of "
                              "``torch.distributed``'s.", None)  # fmt: skip
    world_size: int | None = option("Ranks in the explicit sharding (with ``rank``).", None)
    indices: npt.ArrayLike | None = field(
        default=None,
        compare=False,
        metadata={
            "doc": "Read only these sample ids (unique, in range), or a boolean mask of one "
            "entry per sample."
        },
    )
    verify: bool = option("Check every checksum of the file on open.", False)
    dequantize: bool = option(
        "On a file written with ``quantize``: hand back floats in the quantized range "
        "(float32 unless ``augment.out_dtype`` says otherwise; ``normalize_mean``/``std`` "
        "and ``noise_std`` in the floats' units, a mean outside the range refused). False: "
        "the stored uint8 codes. No effect on other files.",
        True,
    )
    jpeg_downscale: bool = option(
        "On JPEG fields under a ``resized_crop``: decode each image at turbojpeg's 1/2, 1/4 "
        "or 1/8 where the sample's region still spans the output that many times over (the "
        "same draws; each reduced pixel is about the mean of a block, then the region is "
        "resized from it). Fewer pixels decoded for large images cropped small. False: "
        "always decode at full size (batches then equal those of a raw file of the decoded "
        "pixels). No effect on other files or ops.",
        True,
    )
    max_ram_gb: float | None = option(
        "Refuse a loader whose node-wide RAM estimate exceeds it.", None
    )
    partition: Partition = option(
        "``global``: every rank draws from the whole dataset; ``node``: each node from its "
        "own stretch of it, the same every epoch (see :mod:`~ffcv_pairs.load.node_order`).",
        "global",
    )
    canonical_nodes: int | None = option(
        "With ``partition='node'``, the buckets the dataset is cut into (default: the "
        "nodes); keep it fixed, a multiple of every node count you run on.",
        None,
    )
    node_window: bool = option(
        "With ``partition='node'`` and the quasi-random order, the node's ranks share one "
        "window of ``window_bytes`` over the node's pages taken shard by shard, and are "
        "dealt its samples in turn: the node reads a few shards at a time, so a "
        "``cache_limit`` of its share holds two batches' shards at 16-64 nodes (see "
        "``docs/remote.md``). False: each rank its own window over its own run of pages.",
        False,
    )
    epoch_size: int | None = option(
        "With a mixture of streams given as ``path``, samples per epoch (across ranks) that "
        "their proportions share out (default: their total); see :mod:`~ffcv_pairs.load."
        "mixing`.",
        None,
    )
    field_ops: Mapping[str, Sequence[Operation]] | None = field(
        default=None,
        compare=False,
        metadata={
            "doc": "Upstream FFCV ``Operation``\\ s appended per field (``{'A': [MyOp()]}``), "
            "after this package's CPU ops and before ``ToTensor``. Not paired, and not keyed by "
            "sample: their draws change with threads and resumes (see ``docs/user-ops.md``)."
        },
    )

    cache_dir: str | None = option(
        "With ``path`` a URL (``s3://bucket/train.json``, ``gs://``, ``file://``, any "
        "protocol fsspec knows): the node-local folder its shards are downloaded to, "
        "shared by the node's ranks (see ``docs/remote.md``).",
        None,
    )
    cache_limit: int | str | None = option(
        "Bytes the shards in ``cache_dir`` may take (an integer, or ``'100GB'``, "
        "``'512MiB'``); the shard used furthest in the future is evicted first. Default: "
        "no limit.",
        None,
    )

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
        put("batch_ops", check_batch_ops("batch_ops", self.batch_ops))
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
        put("dequantize", flag("dequantize", self.dequantize))
        put("jpeg_downscale", flag("jpeg_downscale", self.jpeg_downscale))
        put("max_ram_gb", optional(number)("max_ram_gb", self.max_ram_gb, above=0))
        put("epoch_size", optional(integer)("epoch_size", self.epoch_size, 1))
        put("partition", one_of("partition", self.partition, PARTITIONS))
        put("canonical_nodes", optional(integer)("canonical_nodes", self.canonical_nodes, 1))
        put("node_window", flag("node_window", self.node_window))
        put("field_ops", check_field_ops(self.field_ops))
        if self.cache_dir is not None and not isinstance(self.cache_dir, str | os.PathLike):
            raise TypeError(f"cache_dir must be a folder's path or None, got {self.cache_dir!r}")
        put("cache_dir", None if self.cache_dir is None else os.fspath(self.cache_dir))
        put("cache_limit", optional(parse_bytes)("cache_limit", self.cache_limit))

    def for_file(self, schema: PairSchema) -> LoaderConfig:
        """These options for a file of ``schema``: on a quantized file with ``dequantize``,
        the augmentation whose normalisation maps the codes back
        (:func:`~ffcv_pairs.augment.units.dequantizing`); on others, checked for a
        ``normalize_mean`` outside the values' range (uint8: 0..255).

        Raises:
            ValueError: a ``normalize_mean`` outside the values' range, or see
                :func:`~ffcv_pairs.augment.units.dequantizing`.
        """
        q = schema.quantized
        if q is None or not self.dequantize:
            if self.augment is not None:
                check_units(self.augment, schema)
            return self
        augment = dequantizing(self.augment or PairAugment(), q, schema)
        return replace(self, augment=augment)


def options_doc(names: list[str] | None = None, indent: int = 8) -> str:
    """Google-style ``Args:`` entries for :class:`LoaderConfig`'s fields (``names``: those,
    in that order; default all), wrapped to 92 columns."""
    docs = {f.name: f.metadata["doc"] for f in fields(LoaderConfig)}
    lines: list[str] = []
    for name in names or list(docs):
        wrapped = textwrap.wrap(f"{name}: {docs[name]}", 92 - indent, subsequent_indent="    ")
        lines += [" " * indent + line for line in wrapped]
    return "\n".join(lines)


def make_loader_doc() -> str:
    """:func:`~ffcv_pairs.make_loader`'s docstring, its ``Args`` made from the fields."""
    return f"""A loader over the pair `.beton` at ``path``.

    Args:
        path: A file written by :func:`~ffcv_pairs.write_pairs` (or upstream FFCV
            with fields ``A``, ``B`` (NDArrayField), ``label`` and any extra fields
            (IntField, FloatField or NDArrayField each); batches are ``(a, b, label,
            *extras)``); or a dataset manifest (``.json``, see :mod:`~ffcv_pairs.format.
            shards`; or its URL, with ``cache_dir``) of such files, read as one: sample
            ``g`` is sample ``g - offset`` of the shard holding it; or a mixture: a list of
            streams (:class:`~ffcv_pairs.load.mixing.Stream`, paths, or ``(path,
            proportion)`` pairs), each epoch's samples drawn from them by their weights
            (see :mod:`~ffcv_pairs.load.mixing`).
{options_doc()}

    Raises:
        BetonError: the file is not a readable pair `.beton`, or fails its checksums; a
            manifest is unreadable, or a shard differs from its entry (both named).
        MemoryBudgetError: the loaders of this node would not fit in RAM.
        TypeError, ValueError: a bad argument, named with the value given.
    """
