"""The order kernels in numpy and Python, for an empty kernel cache's first epochs.

On an empty kernel cache the orders' kernels (the Feistel permutation, the page shuffle
and window, the first use of each page) cost 0.9 s of compiling before the first batch of
any loader; an order of a few thousand samples takes a few milliseconds without them. While
a kernel has no machine code (compiled or cached), an order of up to :data:`SMALL` positions
is computed by these twins, which give the same integers (``tests/test_order.py`` pins the
orders; ``tests/test_small_orders.py`` compares each twin with its kernel), and the kernel
compiles in the background once a batch is done
(:func:`~ffcv_pairs.kernels.stand_in.kernel_ready`). Longer orders, and every order once the
kernel is there, call the kernel: the twins are several times slower.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.hashing import GOLDEN
from ..kernels.numpy_ops import mix64
from ..kernels.stand_in import kernel_ready

__all__ = ["SMALL", "first_use", "key3", "mix64", "permute", "quasi_random", "twin_or_kernel"]

#: Positions up to which an order is computed here while its kernel compiles (about 50 ms
#: for the quasi-random order of this many samples).
SMALL = 1 << 16


def twin_or_kernel(twin: Any, kernel: Any, positions: int, *args: Any) -> None:
    """``twin(*args)`` for an order of at most :data:`SMALL` ``positions`` while ``kernel``
    has no machine code for ``args`` (its compile then queued), else ``kernel(*args)``."""
    if positions <= SMALL and not kernel_ready(kernel, *args):
        twin(*args)
    else:
        kernel(*args)


_M64 = (1 << 64) - 1
_GOLDEN = int(GOLDEN)
_ROUNDS = 4


def key3(a: int | np.integer, b: int | np.integer, c: int | np.integer) -> int:
    """:func:`~ffcv_pairs.kernels.hashing.key3` of Python integers."""
    return mix64(mix64(mix64((int(a) & _M64) ^ _GOLDEN) ^ (int(b) & _M64)) ^ (int(c) & _M64))


def _mix64(x: np.ndarray) -> np.ndarray:
    """:func:`~ffcv_pairs.kernels.hashing.mix64` of a uint64 array (wrapping products)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _below(key: int | np.integer, counters: np.ndarray) -> list[int]:
    """``mix64(key + counter * GOLDEN)`` of each counter (:func:`~ffcv_pairs.kernels.
    hashing.below` before its modulo), as Python integers."""
    x = np.uint64(int(key) & _M64) + counters.astype(np.uint64) * np.uint64(_GOLDEN)
    return _mix64(x).tolist()


def permute(key: int | np.uint64, n: int, positions: np.ndarray, out: np.ndarray) -> None:
    """:func:`~ffcv_pairs.kernels.permute.permute`, vectorised."""
    bits = 1
    while (1 << bits) < n:
        bits += 1
    half = np.uint64((bits + 1) // 2)
    mask = (np.uint64(1) << half) - np.uint64(1)
    keys = [np.uint64(mix64((int(key) ^ ((r + 1) * _GOLDEN)) & _M64)) for r in range(_ROUNDS)]
    x = np.asarray(positions).astype(np.uint64)
    todo = np.arange(len(x))
    while len(todo):
        v = x[todo]
        left, right = v >> half, v & mask
        for r in range(_ROUNDS):
            left, right = right, left ^ (_mix64(right ^ keys[r]) & mask)
        v = (left << half) | right
        x[todo] = v
        todo = todo[v >= np.uint64(n)]
    out[: len(x)] = x.astype(np.int64)


def quasi_random(samples, starts, runs, page_key, window, rank_key, out) -> None:
    """:func:`~ffcv_pairs.load.order._quasi_random`: each page shuffled (Fisher-Yates on
    the hash), this rank's slice of it kept, then drawn through ``window`` open pages."""
    buf: list[int] = []
    run_start = [0]
    for p, lo, hi in zip(*(np.asarray(r).tolist() for r in runs)):
        page = samples[starts[p] : starts[p + 1]].tolist()
        if len(page) > 1:
            counters = np.arange(len(page) - 1, 0, -1)
            draws = _below(key3(page_key, p, 0x9A6E), counters)
            for i, h in zip(counters.tolist(), draws):
                j = h % (i + 1)
                page[i], page[j] = page[j], page[i]
        buf.extend(page[lo:hi])
        run_start.append(run_start[-1] + hi - lo)
    n_runs = len(run_start) - 1
    open_runs = [0] * max(int(window), 1)
    pos = run_start[:-1]
    n_open = next_run = 0
    draws = _below(rank_key, np.arange(len(out)))
    result = [0] * len(out)
    for t in range(len(out)):
        while n_open < window and next_run < n_runs:
            if run_start[next_run + 1] > run_start[next_run]:
                open_runs[n_open] = next_run
                n_open += 1
            next_run += 1
        k = draws[t] % n_open
        r = open_runs[k]
        result[t] = buf[pos[r]]
        pos[r] += 1
        if pos[r] == run_start[r + 1]:
            n_open -= 1
            open_runs[k] = open_runs[n_open]
    out[:] = result


def first_use(order, pointers, shift, stride, offset, first) -> None:
    """:func:`~ffcv_pairs.kernels.pages.first_use`, vectorised."""
    pages = (np.asarray(pointers)[order] >> np.uint64(shift)).astype(np.int64)
    pos = np.arange(len(order), dtype=np.int64) * stride + offset
    np.minimum.at(first, pages, pos)
