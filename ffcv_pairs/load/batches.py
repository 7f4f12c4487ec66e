"""What a loader hands out: a named tuple of the sample's fields, by their names in the file.

``PairBatch(A, B, label)`` for a sample of A, B and a label (of any kind), or a named tuple of
the same name with the extra fields after the label, so that both ``a, b, label = batch`` (on
files without extras) and ``batch.mask`` work, and Lightning moves it as a whole.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from ..format.schema import PairSchema

__all__ = ["PairBatch", "batch_type", "named_batch"]


class PairBatch(NamedTuple):
    """One batch of a file of A, B and a label."""

    A: torch.Tensor
    B: torch.Tensor
    label: torch.Tensor


def batch_type(schema: PairSchema) -> Any:
    """The named tuple type of ``schema``'s batches: :class:`PairBatch`, or one with the
    extra fields' names after the label."""
    if not schema.extras:
        return PairBatch
    names = (*PairSchema.IMAGE_FIELDS, PairSchema.LABEL_FIELD, *(n for n, _ in schema.extras))
    return namedtuple("PairBatch", names)


def named_batch(kind: Any, values: Sequence[torch.Tensor], copy: bool) -> Any:
    """``values`` as a ``kind``; with ``copy``, the label and extra fields cloned (the
    images' slots are reused; values are what callers keep, for metrics)."""
    if copy:
        values = (*values[:2], *(value.clone() for value in values[2:]))
    return kind(*values)
