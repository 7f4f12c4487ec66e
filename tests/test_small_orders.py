"""The numpy twins of the order kernels (:mod:`ffcv_pairs.load.small_orders`), which compute
orders up to ``SMALL`` positions so that a first batch waits for no compile, give the
kernels' integers."""

from __future__ import annotations

import numpy as np
import pytest

from ffcv_pairs.kernels.hashing import key3, mix64
from ffcv_pairs.kernels.pages import first_use
from ffcv_pairs.kernels.permute import permute
from ffcv_pairs.load import order, small_orders


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1000, 4097])
@pytest.mark.parametrize("key", [0, 12345, 2**63 + 5, 2**64 - 1])
def test_the_permutation_is_the_kernels(n: int, key: int) -> None:
    positions = np.arange(n, dtype=np.int64)[::-1].copy()
    want, got = np.empty(n, np.int64), np.empty(n, np.int64)
    permute(np.uint64(key), n, positions, want)
    small_orders.permute(np.uint64(key), n, positions, got)
    assert (want == got).all()
    assert sorted(got.tolist()) == list(range(n))


@pytest.mark.parametrize("x", [0, 1, 2**63, 2**64 - 1, 12345678901234])
def test_the_hashes_are_the_kernels(x: int) -> None:
    assert small_orders.mix64(x) == int(mix64(np.uint64(x)))
    assert small_orders.key3(x, 5, 2**64 - 7) == int(
        key3(np.uint64(x), np.uint64(5), np.uint64(2**64 - 7))
    )


def _pages(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples on pages of 0 to 39 (an empty page now and then), and runs over them in a
    permuted order, some cut at both ends."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 40, 200)
    starts = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    samples = rng.permutation(int(starts[-1])).astype(np.int64)
    perm = rng.permutation(len(sizes))
    counts = sizes[perm]
    lo = np.minimum(rng.integers(0, 3, len(perm)), counts)
    hi = np.maximum(lo, counts - rng.integers(0, 3, len(perm)))
    return samples, starts, np.stack([perm, lo, hi]).astype(np.int64)


@pytest.mark.parametrize("window", [1, 3, 16, 500])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_window_draw_is_the_kernels(window: int, seed: int) -> None:
    samples, starts, runs = _pages(seed)
    length = int((runs[2] - runs[1]).sum())
    want, got = np.empty(length, np.int64), np.empty(length, np.int64)
    order._quasi_random(samples, starts, runs, np.uint64(99), window, np.uint64(2**63 + 1), want)
    small_orders.quasi_random(samples, starts, runs, np.uint64(99), window, 2**63 + 1, got)
    assert (want == got).all()


def test_the_first_use_of_each_page_is_the_kernels() -> None:
    rng = np.random.default_rng(3)
    pointers = rng.integers(0, 1 << 20, 3000).astype(np.uint64)
    sample_order = rng.permutation(3000)[:2500].astype(np.int64)
    never = np.iinfo(np.int64).max
    want, got = np.full(1 << 8, never, np.int64), np.full(1 << 8, never, np.int64)
    for f in range(2):
        first_use(sample_order, pointers, np.uint64(12), 2, f, want)
        small_orders.first_use(sample_order, pointers, np.uint64(12), 2, f, got)
    assert (want == got).all()
