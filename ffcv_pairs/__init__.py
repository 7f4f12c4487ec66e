"""ffcv-pairs: train on huge image-pair datasets fast and cheap in memory.

Write ``(A, B, label)`` pairs into one FFCV ``.beton`` with :func:`write_pairs`,
then stream it with :func:`make_loader`.

The package is laid out along the data path, and imports point one way: a folder
imports only those above it (``write`` and ``augment`` do not import each other)::

    format/     the file: schema, page layout, reader, checksum sidecar, integrity
    kernels/    numba kernels: hashing, byte moves, geometry, decode, photometric
    write/      sources (.pt files, arrays; source_kinds), the writer (plan, tasks,
                shuffle), comparison with sources
    augment/    PairAugment, its image axes, op placement and FFCV ops; batch ops
                (BatchOp, MixUp, CutMix, swap)
    load/       page index, order, memory managers, decoders, epoch thread, loader
    lightning/  PairDataModule, the example model, LoaderMonitor
    cli, warmup, train, demo, inspection, testing: the faces on top

Public names are imported on first use, so writing never imports the loader
and loading never imports Lightning.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import _upstream  # noqa: F401  (first: imports ffcv without its import-time side effects)
from ._version import __version__

if TYPE_CHECKING:
    from ._fileio import NotRegularFileError, ShortReadError
    from .augment.batch_ops import BatchOp
    from .augment.config import PairAugment
    from .augment.dense import DenseField
    from .augment.mixup import CutMix, MixUp
    from .augment.translate import Untranslatable
    from .augment.user_ops import PairOp
    from .errors import FfcvPairsError
    from .format.fields import FieldSpec
    from .format.objectstore import StoreError
    from .format.reader import BetonError, PairReader
    from .format.schema import ArraySpec, PairSchema
    from .format.stats import StatsWarning
    from .lightning.callbacks import LoaderMonitor
    from .lightning.datamodule import PairDataModule
    from .lightning.model import SiamesePairClassifier
    from .load.batches import PairBatch
    from .load.budget import MemoryBudgetError
    from .load.loader import LoaderConfig, LoaderError, PairLoader, make_loader
    from .load.mixing import Stream
    from .load.shard_cache import CacheFullError
    from .load.truncation import BetonChangedError
    from .write.batched import BatchedSource
    from .write.persample import PerSampleSource
    from .write.pool import WriteError, WriteInterrupted
    from .write.source_kinds import open_source, open_sources
    from .write.sources import ArraySource, IndexedSource, PairSource, SourceError
    from .write.writer import WriteReport, write_pairs

_HOMES = {
    "ArraySource": "write.sources",
    "ArraySpec": "format.schema",
    "BatchOp": "augment.batch_ops",
    "BatchedSource": "write.batched",
    "CutMix": "augment.mixup",
    "BetonChangedError": "load.truncation",
    "BetonError": "format.reader",
    "CacheFullError": "load.shard_cache",
    "DenseField": "augment.dense",
    "FfcvPairsError": "errors",
    "FieldSpec": "format.fields",
    "IndexedSource": "write.sources",
    "LoaderConfig": "load.loader",
    "LoaderError": "load.loader",
    "LoaderMonitor": "lightning.callbacks",
    "MemoryBudgetError": "load.budget",
    "MixUp": "augment.mixup",
    "NotRegularFileError": "_fileio",
    "PairAugment": "augment.config",
    "PairOp": "augment.user_ops",
    "Untranslatable": "augment.translate",
    "PairDataModule": "lightning.datamodule",
    "PairLoader": "load.loader",
    "PairReader": "format.reader",
    "PairBatch": "load.batches",
    "Stream": "load.mixing",
    "PairSchema": "format.schema",
    "PairSource": "write.sources",
    "PerSampleSource": "write.persample",
    "ShortReadError": "_fileio",
    "SiamesePairClassifier": "lightning.model",
    "SourceError": "write.sources",
    "StatsWarning": "format.stats",
    "StoreError": "format.objectstore",
    "WriteError": "write.pool",
    "WriteInterrupted": "write.pool",
    "WriteReport": "write.writer",
    "make_loader": "load.loader",
    "open_source": "write.source_kinds",
    "open_sources": "write.source_kinds",
    "write_pairs": "write.writer",
}

__all__ = [
    "ArraySource",
    "ArraySpec",
    "BatchOp",
    "BatchedSource",
    "BetonChangedError",
    "BetonError",
    "CacheFullError",
    "CutMix",
    "DenseField",
    "FfcvPairsError",
    "FieldSpec",
    "IndexedSource",
    "LoaderConfig",
    "LoaderError",
    "LoaderMonitor",
    "MemoryBudgetError",
    "MixUp",
    "NotRegularFileError",
    "PairAugment",
    "PairBatch",
    "PairDataModule",
    "PairLoader",
    "PairOp",
    "PairReader",
    "PairSchema",
    "PairSource",
    "PerSampleSource",
    "ShortReadError",
    "SiamesePairClassifier",
    "SourceError",
    "StatsWarning",
    "StoreError",
    "Stream",
    "Untranslatable",
    "WriteError",
    "WriteInterrupted",
    "WriteReport",
    "__version__",
    "make_loader",
    "open_source",
    "open_sources",
    "write_pairs",
]


def __getattr__(name: str) -> object:
    """Public names, imported from their module on first use."""
    if name in _HOMES:
        value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
