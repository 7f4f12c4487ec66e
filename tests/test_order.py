"""The distributed orders as pure functions: called once per rank, no process group."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_arrays

from ffcv_pairs import ArraySource, PairReader, write_pairs
from ffcv_pairs.load.index import PageIndex
from ffcv_pairs.load.order import OrderSpec, epoch_order


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> tuple[PageIndex, PairReader]:
    # 1001 samples of 2*192 bytes on 4 KiB pages: 10 per page, 101 pages, a short last page.
    a, b, labels = make_arrays(1001, (3, 8, 8))
    path = tmp_path_factory.mktemp("order") / "o.beton"
    write_pairs(ArraySource(a, b, labels), path, page_size=4096, progress=False)
    reader = PairReader(path)
    return PageIndex.build(reader), reader


def _orders(index: PageIndex, kind: str, world: int, epoch: int = 0, **kw) -> list[np.ndarray]:
    return [
        epoch_order(index, OrderSpec(kind, rank=r, world_size=world, **kw), epoch)
        for r in range(world)
    ]


@pytest.mark.parametrize("kind", ["quasi_random", "random", "sequential"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("bs", [1, 16, 64])
def test_disjoint_equal_and_nearly_complete(index, kind: str, world: int, bs: int) -> None:
    idx, _ = index
    orders = _orders(idx, kind, world, batch_size=bs, window_pages=3)
    lengths = {len(o) for o in orders}
    assert len(lengths) == 1, "every rank must have the same length"
    assert lengths.pop() % bs == 0
    union = np.concatenate(orders)
    assert len(np.unique(union)) == len(union), "ranks overlap"
    assert 0 <= idx.num_samples - len(union) < world * bs
    assert set(union.tolist()) <= set(range(idx.num_samples))


@pytest.mark.parametrize("kind", ["quasi_random", "random", "sequential"])
@pytest.mark.parametrize("world", [1, 3, 4, 7])
def test_without_drop_last_nothing_is_dropped_and_ranks_are_padded(
    index, kind: str, world: int
) -> None:
    """Every sample read; equal lengths (so DDP cannot hang on a short rank), padded by
    fewer than ``world`` repeats, like ``DistributedSampler``."""
    idx, _ = index
    orders = _orders(idx, kind, world, batch_size=64, drop_last=False, window_pages=3)
    n = idx.num_samples
    assert {len(o) for o in orders} == {-(-n // world)}
    union = np.concatenate(orders)
    assert set(union.tolist()) == set(range(n))
    assert len(union) - n == world * -(-n // world) - n < world
    for order in orders:
        assert len(np.unique(order)) == len(order), "padding repeats only across ranks"


@pytest.mark.parametrize("kind", ["quasi_random", "random"])
def test_pure_in_seed_and_epoch(index, kind: str) -> None:
    idx, _ = index
    first = _orders(idx, kind, 2, epoch=5, batch_size=8, seed=3, window_pages=4)
    again = _orders(idx, kind, 2, epoch=5, batch_size=8, seed=3, window_pages=4)
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x, y)
    other_epoch = _orders(idx, kind, 2, epoch=6, batch_size=8, seed=3, window_pages=4)
    other_seed = _orders(idx, kind, 2, epoch=5, batch_size=8, seed=4, window_pages=4)
    assert not np.array_equal(first[0], other_epoch[0])
    assert not np.array_equal(first[0], other_seed[0])


def test_dropped_samples_rotate(index) -> None:
    idx, _ = index
    dropped = []
    for epoch in range(4):
        union = np.concatenate(
            _orders(idx, "quasi_random", 4, epoch, batch_size=64, window_pages=3)
        )
        dropped.append(frozenset(set(range(idx.num_samples)) - set(union.tolist())))
    assert all(0 < len(d) < 4 * 64 for d in dropped)
    assert len(set(dropped)) == 4


@pytest.mark.parametrize("window", [1, 2, 5])
def test_quasi_random_pages_per_batch_bounded(index, window: int) -> None:
    idx, reader = index
    bs, spp = 32, 10
    bound = window + -(-bs // spp) + 1
    for rank, order in enumerate(
        _orders(idx, "quasi_random", 3, batch_size=bs, window_pages=window)
    ):
        pages = idx.page_lookup(reader, order)
        per_batch = [len(np.unique(pages[i : i + bs])) for i in range(0, len(order), bs)]
        assert max(per_batch) <= bound, (rank, per_batch)
    # Fully random reads far more pages per batch.
    rnd = _orders(idx, "random", 1, batch_size=bs)[0]
    pages = idx.page_lookup(reader, rnd)
    assert np.mean([len(np.unique(pages[i : i + bs])) for i in range(0, len(rnd), bs)]) > bound


def test_ranks_read_whole_runs_of_pages(index) -> None:
    idx, reader = index
    world = 4
    orders = _orders(idx, "quasi_random", world, batch_size=8, window_pages=2)
    owners: dict[int, set[int]] = {}
    for rank, order in enumerate(orders):
        for page in np.unique(idx.page_lookup(reader, order)):
            owners.setdefault(int(page), set()).add(rank)
    shared = [p for p, ranks in owners.items() if len(ranks) > 1]
    assert len(shared) <= world - 1


def test_quasi_random_is_shuffled_within_a_rank(index) -> None:
    idx, _ = index
    order = _orders(idx, "quasi_random", 1, batch_size=1, window_pages=4)[0]
    assert not np.array_equal(order, np.sort(order))
    # Not just a page permutation: samples of one page are shuffled too.
    assert np.mean(np.diff(order) == 1) < 0.5


def test_subset_indices(index) -> None:
    _, reader = index
    sub = np.arange(0, 1001, 3)
    idx = PageIndex.build(reader, sub)
    orders = _orders(idx, "quasi_random", 2, batch_size=10, window_pages=2)
    union = np.concatenate(orders)
    assert set(union.tolist()) <= set(sub.tolist())
    assert len(sub) - len(union) < 2 * 10


def _mix64(x: int) -> int:
    """splitmix64's finaliser, in Python integers: the definition, not the kernel."""
    m = (1 << 64) - 1
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def _feistel(key: int, n: int, x: int) -> int:
    """The permutation as ``kernels/permute.py``'s docstring defines it."""
    bits = 1
    while (1 << bits) < n:
        bits += 1
    half = (bits + 1) // 2
    mask = (1 << half) - 1
    keys = [_mix64(key ^ (((r + 1) * 0x9E3779B97F4A7C15) & ((1 << 64) - 1))) for r in range(4)]
    while True:
        left, right = x >> half, x & mask
        for k in keys:
            left, right = right, left ^ (_mix64(right ^ k) & mask)
        x = (left << half) | right
        if x < n:
            return x


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 65, 1000, 4097])
def test_permutation_matches_its_definition(n: int) -> None:
    from ffcv_pairs.kernels.permute import permute

    key = 0xDEADBEEF12345678
    got = np.empty(n, dtype=np.int64)
    permute(np.uint64(key), n, np.arange(n, dtype=np.int64), got)
    assert got.tolist() == [_feistel(key, n, x) for x in range(n)]
    assert sorted(got.tolist()) == list(range(n)), "a bijection"
    # Any positions, on their own: what one rank of a "random" order computes.
    some = np.array([n - 1, 0, n // 2], dtype=np.int64)
    part = np.empty(3, dtype=np.int64)
    permute(np.uint64(key), n, some, part)
    np.testing.assert_array_equal(part, got[some])


# The first ids each order gives for seed 7 on the 1001-sample, 101-page file above,
# two ranks, batch 8, window 4: pinned, so that no upgrade (numpy, numba, this code)
# changes an order silently, which would also break every mid-epoch checkpoint.
GOLDEN = {
    ("quasi_random", 0): [
        [257, 298, 259, 105, 107, 255, 102, 290, 256, 253, 295, 274],
        [200, 202, 522, 209, 206, 205, 204, 207, 523, 756, 529, 750],
    ],
    ("quasi_random", 1): [
        [374, 377, 523, 527, 462, 375, 466, 520, 465, 801, 379, 805],
        [274, 278, 749, 277, 271, 862, 869, 797, 769, 867, 762, 763],
    ],
    ("random", 0): [
        [847, 367, 394, 696, 585, 816, 81, 482, 670, 351, 753, 341],
        [417, 478, 260, 783, 511, 219, 576, 42, 189, 650, 748, 819],
    ],
    ("random", 1): [
        [874, 160, 743, 760, 539, 924, 103, 65, 273, 192, 247, 793],
        [74, 266, 957, 509, 843, 404, 188, 567, 440, 922, 262, 329],
    ],
}


@pytest.mark.parametrize(("kind", "epoch"), sorted(GOLDEN))
def test_golden_orders(index, kind: str, epoch: int) -> None:
    idx, _ = index
    got = _orders(idx, kind, 2, epoch, batch_size=8, seed=7, window_pages=4)
    assert [o[:12].tolist() for o in got] == GOLDEN[kind, epoch]
    if kind == "random":  # and from the definition: position p holds pi(p), pi keyed so
        golden = 0x9E3779B97F4A7C15
        key = _mix64(_mix64(_mix64(7 ^ golden) ^ epoch) ^ 4)
        n = idx.num_samples
        for rank, order in enumerate(got):
            start = rank * (n // 2)
            assert order[:12].tolist() == [_feistel(key, n, start + i) for i in range(12)]


def test_bad_specs() -> None:
    with pytest.raises(ValueError, match="'shuffled'"):
        OrderSpec("shuffled")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rank 2"):
        OrderSpec(rank=2, world_size=2)
    with pytest.raises(ValueError, match="window_pages"):
        OrderSpec(window_pages=0)


def test_upstream_written_file(tmp_path: Path) -> None:
    """Upstream's writer (2 processes) interleaves pages; the index sorts them out."""
    from ffcv.fields import IntField, NDArrayField
    from ffcv.writer import DatasetWriter

    a, b, labels = make_arrays(3000, (3, 32, 32))
    ds = [(a[i], b[i], int(labels[i])) for i in range(len(a))]
    path = tmp_path / "up.beton"
    fields = {
        "A": NDArrayField(np.dtype("uint8"), (3, 32, 32)),
        "B": NDArrayField(np.dtype("uint8"), (3, 32, 32)),
        "label": IntField(),
    }
    DatasetWriter(str(path), fields, num_workers=2).from_indexed_dataset(ds, chunksize=50)
    reader = PairReader(path)
    idx = PageIndex.build(reader)
    assert idx.num_samples == 3000 and len(idx.pages) > 1
    # The index is the definition: each page's ids, ascending, pages ascending.
    page_of = np.asarray(reader.image_pointers("A")) >> reader.page_shift
    assert idx.pages.tolist() == sorted(set(page_of.tolist()))
    for k, page in enumerate(idx.pages.tolist()):
        held = idx.samples[idx.starts[k] : idx.starts[k + 1]]
        assert held.tolist() == np.flatnonzero(page_of == page).tolist(), page
    assert np.any(np.diff(page_of.astype(np.int64)) < 0), "pages were not interleaved"
    orders = _orders(idx, "quasi_random", 2, batch_size=16, window_pages=1)
    union = np.concatenate(orders)
    assert len(np.unique(union)) == len(union) and 3000 - len(union) < 32
