"""ffcv-pairs: train on huge image-pair datasets fast and cheap in memory.

Write ``(A, B, label)`` pairs into one FFCV ``.beton`` with :func:`write_pairs`,
then stream it with :func:`make_loader`.
"""

__version__ = "0.1.0"

from . import _upstream  # noqa: F401  (first: imports ffcv without its import-time compile)
from .augment import PairAugment
from .loader import LoaderConfig, LoaderError, PairLoader, make_loader
from .reader import BetonError, PairReader
from .schema import ArraySpec, PairSchema
from .sources import (
    ArraySource,
    BatchedSource,
    IndexedSource,
    PairSource,
    PerSampleSource,
    SourceError,
    open_source,
)
from .writer import WriteReport, write_pairs

_LIGHTNING = {
    "PairDataModule": "datamodule",
    "SiamesePairClassifier": "model",
    "LoaderMonitor": "callbacks",
}


def __getattr__(name: str) -> object:
    """Lightning-side classes, imported on first use (the loader does not need Lightning)."""
    if name in _LIGHTNING:
        import importlib

        return getattr(importlib.import_module(f".{_LIGHTNING[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ArraySource",
    "ArraySpec",
    "BatchedSource",
    "BetonError",
    "IndexedSource",
    "LoaderConfig",
    "LoaderError",
    "LoaderMonitor",
    "PairAugment",
    "PairDataModule",
    "PairLoader",
    "PairReader",
    "PairSchema",
    "PairSource",
    "PerSampleSource",
    "SiamesePairClassifier",
    "SourceError",
    "WriteReport",
    "__version__",
    "make_loader",
    "open_source",
    "write_pairs",
]
