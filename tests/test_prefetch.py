"""Page prefetch: the same batches, each page requested before its batch, no stray threads."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import make_arrays

from ffcv_pairs import ArraySource, PairReader, make_loader, write_pairs
from ffcv_pairs.load import prefetch as prefetch_mod
from ffcv_pairs.load.prefetch import Prefetcher, page_schedule

PAGE = 4096


@pytest.fixture(scope="module")
def beton(tmp_path_factory: pytest.TempPathFactory) -> Path:
    a, b, labels = make_arrays(400, (3, 8, 8), "uint8", seed=13)
    path = tmp_path_factory.mktemp("prefetch") / "p.beton"
    write_pairs(ArraySource(a, b, labels), path, page_size=PAGE, progress=False)
    return path


def _loader(path: Path, order: str, prefetch: int, rank: int = 0, world: int = 1):
    return make_loader(
        path,
        batch_size=16,
        order=order,
        prefetch=prefetch,
        rank=rank,
        world_size=world,
        num_threads=1,
        window_bytes=4 * PAGE,
        seed=3,
    )


def _epochs(loader, n: int = 2) -> list[bytes]:
    out = []
    for _ in range(n):
        out.extend(b"".join(t.numpy().tobytes() for t in batch) for batch in loader)
    return out


@pytest.mark.parametrize("order", ["quasi_random", "random", "sequential"])
@pytest.mark.parametrize("world", [1, 2])
def test_batches_identical_with_and_without_prefetch(beton: Path, order: str, world: int) -> None:
    for rank in range(world):
        plain = _epochs(_loader(beton, order, 0, rank, world))
        fetched = _epochs(_loader(beton, order, 2, rank, world))
        assert len(plain) == len(fetched) > 0
        assert plain == fetched, f"{order} rank {rank}/{world}: prefetch changed a batch"


class _Spy:
    """Records (address, length, the consumer's batch at the time) for every madvise."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, address: int, length: int, advice: int) -> None:
        assert advice == prefetch_mod.MADV_WILLNEED
        helper = threading.current_thread()
        assert isinstance(helper, Prefetcher), "madvise called outside the helper thread"
        self.calls.append((address, length, helper.current))


@pytest.mark.parametrize("order", ["quasi_random", "random", "sequential"])
def test_every_page_requested_once_before_its_batch(
    beton: Path, order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy()
    monkeypatch.setattr(prefetch_mod, "madvise", spy)
    monkeypatch.setattr(prefetch_mod, "resident", lambda *_: None)  # as if nothing is cached
    loader = _loader(beton, order, 3, rank=1, world=2)
    reader = PairReader(beton)
    shift = int(reader.page_shift)
    order_ids = loader.epoch_order(0)
    # The batch each page is first read in, straight from the order (no helper code).
    first: dict[int, int] = {}
    for pos, sid in enumerate(order_ids.tolist()):
        for name in ("A", "B"):
            first.setdefault(int(reader.image_pointers(name)[sid]) >> shift, pos // 16)
    for _batch in loader:
        thread = loader._active
    mapping = thread.memory_context.mmap
    base = mapping.ctypes.data
    covered: dict[int, list[tuple[int, int]]] = {}  # page -> its chunks, in call order
    for addr, length, at in spy.calls:
        page = (addr - base) >> shift
        assert length <= prefetch_mod.CHUNK
        assert at <= first[page], f"page {page} requested at batch {at}, read at {first[page]}"
        covered.setdefault(page, []).append((addr - base, length))
    assert set(covered) == set(first), "requested pages differ from the pages the epoch reads"
    for page, chunks in covered.items():
        # One pass of contiguous chunks over exactly the whole page: requested once.
        start, end = page << shift, min((page + 1) << shift, mapping.size)
        assert chunks[0][0] == start and sum(n for _, n in chunks) == end - start
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(chunks)), (
            f"page {page} requested twice, or with a gap"
        )


def test_resident_pieces_are_not_requested(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CHUNK piece whose OS pages are all in memory gets no WILLNEED; a piece with one
    page missing gets one for the whole piece."""
    os_page = prefetch_mod.mmap.PAGESIZE
    per = prefetch_mod.CHUNK // os_page
    page_size = 4 * prefetch_mod.CHUNK
    missing = {1: [3], 3: [0, per - 1]}  # piece -> its OS pages that are not in memory

    def fake_resident(address: int, length: int, out: np.ndarray) -> np.ndarray:
        vec = np.ones(length // os_page, dtype=np.uint8)
        for piece, holes in missing.items():
            vec[[piece * per + h for h in holes]] = 0
        return vec

    spy = _Spy()
    monkeypatch.setattr(prefetch_mod, "madvise", spy)
    monkeypatch.setattr(prefetch_mod, "resident", fake_resident)
    base = 1 << 30
    schedule = (np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    helper = Prefetcher(base, page_size, page_size, schedule, ahead=1, max_in_flight=1)
    helper.start()
    helper.advance(0)
    helper.stop()
    assert [(a - base) // prefetch_mod.CHUNK for a, _, _ in spy.calls] == sorted(missing)
    assert all(n == prefetch_mod.CHUNK for _, n, _ in spy.calls)
    assert helper.skipped == 4 - len(missing)


@pytest.mark.parametrize("cold_page", [None, 3, prefetch_mod.WARM_PAGES + 5])
def test_an_epoch_whose_first_pages_are_cached_stops_prefetching(
    monkeypatch: pytest.MonkeyPatch, cold_page: int | None
) -> None:
    """Every piece in memory: the helper stops after the first WARM_PAGES pages (no
    WILLNEED, and advance() no longer waits); a piece missing among them keeps it going to
    the end of the schedule; one missing only after them is not asked for."""
    os_page = prefetch_mod.mmap.PAGESIZE
    page_size = 2 * prefetch_mod.CHUNK
    base, n = 1 << 30, 3 * prefetch_mod.WARM_PAGES

    def fake_resident(address: int, length: int, out: np.ndarray) -> np.ndarray:
        vec = np.ones(length // os_page, dtype=np.uint8)
        if cold_page is not None and address == base + cold_page * page_size:
            vec[0] = 0
        return vec

    spy = _Spy()
    monkeypatch.setattr(prefetch_mod, "madvise", spy)
    monkeypatch.setattr(prefetch_mod, "resident", fake_resident)
    schedule = (np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64))  # a page a batch
    helper = Prefetcher(base, n * page_size, page_size, schedule, ahead=1, max_in_flight=n)
    helper.start()
    for batch in range(n):
        helper.advance(batch)
    helper.join(timeout=10)
    assert not helper.is_alive()
    if cold_page is None or cold_page >= prefetch_mod.WARM_PAGES:
        assert spy.calls == [] and helper.warm_pages == prefetch_mod.WARM_PAGES
        assert helper.requested < n  # stopped early
    else:
        assert [(a - base) // page_size for a, _, _ in spy.calls] == [cold_page]
        assert helper.warm_pages == n - 1 and helper.requested == n


def test_due_by_is_searchsorted() -> None:
    """The per-batch lookup of due entries equals ``searchsorted`` by definition."""
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 50):
        fb = np.sort(rng.integers(0, 9, n)).astype(np.int64)
        helper = Prefetcher(0, 1, 1, (fb, np.arange(n, dtype=np.int64)), 1, 1)
        for b in range(-2, 12):
            assert helper._due_by(b) == np.searchsorted(fb, b, side="right"), (n, b)


def test_resident_reads_the_page_cache(beton: Path) -> None:
    """:func:`resident` on a mapping of a file just read: every page is in memory."""
    import mmap

    data = beton.read_bytes()
    with open(beton, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = np.frombuffer(m, dtype=np.uint8)
        vec = np.empty(len(data) // mmap.PAGESIZE + 2, dtype=np.uint8)
        there = prefetch_mod.resident(view.ctypes.data, len(data), vec)
        assert there is not None and len(there) == -(-len(data) // mmap.PAGESIZE)
        assert np.all(there & 1)
        del view
    assert prefetch_mod.resident(0, 1 << 40, np.empty(4, dtype=np.uint8)) is None  # too long


def test_schedule_first_use_counts_both_fields() -> None:
    """A page first read through field B (A's pages come later) is due at B's batch."""
    a_ptr = np.array([0, 1, 2, 3], dtype=np.uint64) << 4
    b_ptr = np.array([3, 3, 0, 1], dtype=np.uint64) << 4
    first, pages = page_schedule(np.array([0, 1, 2, 3]), 1, [a_ptr, b_ptr], 4)
    assert dict(zip(pages.tolist(), first.tolist())) == {0: 0, 3: 0, 1: 1, 2: 2}
    assert list(first) == sorted(first)


def test_schedule_is_first_use_by_definition() -> None:
    """Random orders and pointers: each page is due at the batch of the first
    (sample, field) that reads it, ordered by that batch, then by page."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        n, batch = int(rng.integers(1, 300)), int(rng.integers(1, 9))
        cols = [np.sort(rng.integers(0, 4000, n)).astype(np.uint64) for _ in range(2)]
        cols[1] = rng.permutation(cols[1])
        order = rng.permutation(n)[: int(rng.integers(1, n + 1))]
        due: dict[int, int] = {}
        for pos, sample in enumerate(order.tolist()):
            for col in cols:
                due.setdefault(int(col[sample]) >> 5, pos // batch)
        first, pages = page_schedule(order, batch, cols, 5)
        assert sorted(due.items(), key=lambda kv: (kv[1], kv[0])) == list(
            zip(pages.tolist(), first.tolist())
        )


def test_in_flight_cap_and_stop() -> None:
    """With a cap of 2 unread pages, a far-ahead helper requests no more than that."""
    calls: list[int] = []
    first = np.array([0, 1, 1, 1, 1, 5], dtype=np.int64)
    pages = np.arange(6, dtype=np.int64)
    p = Prefetcher(0, 6 * PAGE, PAGE, (first, pages), ahead=10, max_in_flight=2)
    p._request = calls.append  # type: ignore[method-assign]
    p.start()
    p.advance(0)
    with p._cond:
        while p.requested < 3 and not p.stopped:
            p._cond.wait(1.0)
    assert calls == [0, 1, 2], "cap of 2 pages not yet read exceeded"
    p.advance(1)
    p.stop()
    assert not p.is_alive()
    assert calls[:5] == [0, 1, 2, 3, 4]


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ffcv-pairs-prefetch" and t.is_alive()]


def test_abandoned_epochs_leave_no_threads(beton: Path) -> None:
    loader = _loader(beton, "quasi_random", 4)
    for _ in range(3):
        for i, _batch in enumerate(loader):
            if i == 2:
                break
    for _ in loader:  # one whole epoch
        pass
    next(iter(loader))
    loader.close()
    assert _prefetch_threads() == []


def test_prefetch_rejects_negative(beton: Path) -> None:
    with pytest.raises(ValueError, match="prefetch must be between 0 and"):
        _loader(beton, "random", -1)


def test_random_over_a_file_larger_than_half_the_ram_requests_images_not_pages(
    beton: Path, monkeypatch
) -> None:
    """Whole pages for single samples would thrash a page cache smaller than the file:
    random then asks for each image's bytes (and turns fault readahead off), before its
    batch; quasi_random keeps whole pages; the batches are the same either way."""
    size = beton.stat().st_size
    assert prefetch_mod.prefetch_mode("random", size, ram=4 * size) == "pages"
    assert prefetch_mod.prefetch_mode("random", size, ram=size) == "samples"
    assert prefetch_mod.prefetch_mode("quasi_random", size, ram=size) == "pages"
    assert prefetch_mod.prefetch_mode("sequential", size, ram=size) == "pages"

    before = {o: _epochs(_loader(beton, o, 4), 1) for o in ("random", "quasi_random")}
    monkeypatch.setattr(prefetch_mod, "physical_ram", lambda: size)  # the file: all of RAM
    calls: list[tuple[int, int, int, int]] = []

    def spy(address: int, length: int, advice: int) -> None:
        helper = threading.current_thread()
        assert isinstance(helper, Prefetcher)
        calls.append((address, length, advice, helper.current))

    monkeypatch.setattr(prefetch_mod, "madvise", spy)
    loader = _loader(beton, "random", 3)
    after = _epochs(loader, 1)
    assert after == before["random"]
    assert _epochs(_loader(beton, "quasi_random", 4), 1) == before["quasi_random"]

    random_calls = [c for c in calls if c[2] == prefetch_mod.MADV_RANDOM]
    assert len(random_calls) >= 1, "fault readahead was not turned off"
    base = random_calls[0][0]
    reader = PairReader(beton)
    order_ids = loader.epoch_order(0)
    wanted = [
        (int(reader.image_pointers(name)[sid]), pos // 16)
        for pos, sid in enumerate(order_ids.tolist())
        for name in ("A", "B")
    ]
    nbytes = reader.schema.a.nbytes
    asked = [(a - base, n, at) for a, n, adv, at in calls if adv == prefetch_mod.MADV_WILLNEED]
    asked = asked[: len(wanted)]  # the random loader's own (quasi_random's come after)
    assert len(asked) == len(wanted), "not one request per image"
    for (start, batch), (off, n, at) in zip(wanted, asked, strict=True):
        assert off <= start and start + nbytes <= off + n, "the request misses the image"
        assert n < nbytes + prefetch_mod.mmap.PAGESIZE, "more than the image was asked for"
        assert at <= batch, f"image of batch {batch} requested at batch {at}"
