"""The base of every exception the package defines.

``except FfcvPairsError`` catches any of them (and :class:`~ffcv_pairs.format.stats.StatsWarning`
once warnings are turned into errors). Each also keeps its built-in base (``ValueError``
for bad input, ``RuntimeError`` for a failed run), so ``except ValueError`` still works.
"""

from __future__ import annotations

__all__ = ["FfcvPairsError"]


class FfcvPairsError(Exception):
    """Raised by ffcv-pairs itself: a bad input, a bad file, or a writer or loader that failed."""
