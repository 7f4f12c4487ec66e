"""The driver of the built-in per-sample ops (:mod:`ffcv_pairs.augment.photo_ops`): an op's
``apply(image, params, tag)`` on every sample of a batch, in parallel, ``params`` the sample's
row of parameters drawn beforehand (an op is its draw plus how it applies it).

``apply`` has the signature of an op of the user's own (see :mod:`.user_driver`):
``(image: dtype[planes, height, width, pixel], params: float64[k], tag: int64) -> None``, and
reaches the driver the same way, as a numba first-class function typed by that signature. So
one compiled driver per dtype serves every such op, cached on disk like every kernel, and each
op is one small ``cache=True`` function compiled (or loaded) only when a pipeline uses it.
"""

from __future__ import annotations

import functools
from typing import Any

import numba as nb
from numba.core import types

from ._cache import compiled_only
from .user_driver import user_op_signature

__all__ = ["drawn_op_kernel"]


def drawn_op_batch(fn, images, params, tag, threads):  # pragma: no cover - JIT
    """``fn(images[i], params[i], tag)`` for every sample ``i`` of ``images`` (``(batch,
    planes, height, width, pixel)``); the batch is cut into ``4 * threads`` parts, as the fused
    kernel's. Compiled by :func:`drawn_op_kernel`."""
    n = len(images)
    chunks = max(1, min(n, 4 * threads))
    for c in nb.prange(chunks):
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            fn(images[i], params[i], tag)


@functools.cache
def drawn_op_kernel(dtype: str) -> Any:
    """:func:`drawn_op_batch` compiled (or loaded from the disk cache) for images of
    ``dtype`` and for nothing else. Called as ``kernel(apply, images, params, tag, threads)``,
    ``params`` a C-contiguous ``(batch, k)`` float64 array."""
    sig = user_op_signature(dtype)
    args = (
        types.FunctionType(sig),
        types.Array(sig.args[0].dtype, 5, "C"),
        types.Array(types.float64, 2, "C"),
        types.int64,
        types.int64,
    )
    return compiled_only(drawn_op_batch, args)
