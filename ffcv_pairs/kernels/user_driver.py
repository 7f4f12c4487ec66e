"""The driver of an op of the user's own: its function on every sample of a batch, in parallel.

The user's function (``fn(image, u, tag)``, a numba dispatcher) reaches the driver as a
numba *first-class function* (``FunctionType``): a pointer to its compiled code, typed by its
signature alone. So one compiled driver serves every user op of a dtype, and numba can cache
it: compiled once per machine (about 0.7 s of one core), loaded in a fraction of a second
later. Passed as a plain dispatcher instead, the driver would be typed by that dispatcher
object; numba then misses its disk cache in every new process, and adds a file to it each
time. The user's function itself compiles in each process unless it is ``cache=True`` (its
own file keys its cache). Nothing here compiles unless a user op is given.

Each sample's random numbers are ``uniform(sample_key(seed, epoch, sample, op, key_tag), k)``
for ``k < uniforms``: the same whatever the thread, batch, rank or resume.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numba as nb
import numpy as np
from numba.core import types

from ._cache import compiled_only
from .hashing import sample_key, uniform

__all__ = ["UserDraws", "user_op_kernel", "user_op_signature"]


class UserDraws(NamedTuple):
    """Which random numbers a user op gets: ``op`` (its id, ``OP_USER`` + its position),
    ``key_tag`` (the key's field tag: 0 for A and B when paired, else ``tag``), ``tag`` (the
    field, handed to the op: 0 for A, 1 for B) and ``uniforms`` (how many per sample)."""

    op: int
    key_tag: int
    tag: int
    uniforms: int


def user_op_batch(fn, images, ids, clock, draws, threads):  # pragma: no cover - JIT
    """``fn(images[i], u, draws.tag)`` for every sample ``i`` of ``images`` (``(batch, planes,
    height, width, pixel)``), ``u`` its ``draws.uniforms`` uniforms; ``ids``: the samples' ids,
    ``clock``: ``[seed, epoch]``; ``threads``: the caller's numba threads (the batch is cut
    into ``4 * threads`` parts, as the fused kernel's). Compiled by :func:`user_op_kernel`."""
    n = len(ids)
    chunks = max(1, min(n, 4 * threads))
    for c in nb.prange(chunks):
        u = np.empty(draws.uniforms, np.float64)
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            key = sample_key(clock[0], clock[1], ids[i], draws.op, draws.key_tag)
            for k in range(draws.uniforms):
                u[k] = uniform(key, k)
            fn(images[i], u, np.int64(draws.tag))


def user_op_signature(dtype: str) -> Any:
    """The numba signature a user op's function must compile to for images of ``dtype``:
    ``(image: dtype[planes, height, width, pixel], u: float64[uniforms], tag: int64) -> None``."""
    image = types.Array(nb.from_dtype(np.dtype(dtype)), 4, "C")
    return types.void(image, types.Array(types.float64, 1, "C"), types.int64)


@functools.cache
def user_op_kernel(dtype: str) -> Any:
    """:func:`user_op_batch` compiled (or loaded from the disk cache) for images of ``dtype``,
    and for nothing else: a call with other types raises ``TypeError`` rather than compiling
    an uncacheable variant. Called as ``kernel(fn, images, ids, clock, draws, threads)``."""
    sig = user_op_signature(dtype)
    args = (
        types.FunctionType(sig),
        types.Array(sig.args[0].dtype, 5, "C"),
        types.Array(types.int64, 1, "C"),
        types.Array(types.int64, 1, "C"),
        nb.typeof(UserDraws(0, 0, 0, 0)),
        types.int64,
    )
    return compiled_only(user_op_batch, args)
