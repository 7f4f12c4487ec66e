"""Abandoned epochs: a batch held across them survives, and they leave no threads or buffer
sets behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import write_small_beton as _write

from ffcv_pairs import make_loader


def _wait(predicate, what: str, timeout: float = 60.0) -> None:
    """Wait for an event the loader's thread signals (a flag), not for a fixed time."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def _producer_waits(loader) -> bool:
    """The running epoch's producer has filled the queue and waits to put one more."""
    return loader._active is not None and loader._active.output_queue.waiting


@pytest.mark.parametrize("finished", [True, False], ids=["thread-finished", "thread-running"])
def test_a_batch_held_across_an_abandoned_epoch_survives(tmp_path: Path, finished: bool) -> None:
    """Hold the last batch taken of an abandoned epoch, take the next epoch's first batch
    and let the loader run ahead as far as it can: the held batch keeps its bytes.

    ``thread-finished`` is the case a review suspected: the abandoned epoch's thread
    already put its last batch (never taken) and its end marker, and ended."""
    path, a, _ = _write(tmp_path, n=2000, page_size=8192)
    loader = make_loader(path, batch_size=10, order="random", num_threads=1)
    it = iter(loader)
    take = len(loader) - 1 if finished else len(loader) // 2
    for _ in range(take):
        held = next(it)
    copy = [t.clone() for t in held]
    thread = loader._active
    if finished:
        thread.join(60)
        assert not thread.is_alive()
    else:
        _wait(lambda: _producer_waits(loader), "the producer to fill its queue")
    del it  # abandoned, as by ``break``
    nxt = iter(loader)
    first = next(nxt)
    _wait(lambda: _producer_waits(loader), "the next epoch to run ahead")
    for t, c in zip(held, copy):
        assert torch.equal(t, c), "a held batch was overwritten by the next epoch"
    assert held[0].numpy().tobytes() == a[held[2].numpy()].tobytes()
    assert first[0].numpy().tobytes() == a[first[2].numpy()].tobytes()
    assert loader.graph.buffer_sets == 1


def test_two_held_batches_are_safe_until_the_next_epoch_asks(tmp_path: Path) -> None:
    """Holding the last two batches of an abandoned epoch is within the promise until the
    next epoch's first ``next()``: its producer cannot start before (``iter`` is lazy)."""
    path, _, _ = _write(tmp_path, n=2000, page_size=8192)
    loader = make_loader(path, batch_size=10, order="random", num_threads=1)
    it = iter(loader)
    older = next(it)
    newer = next(it)
    for _ in range(len(loader) - 3):
        older, newer = newer, next(it)
    copies = [[t.clone() for t in b] for b in (older, newer)]
    loader._active.join(60)
    threads = threading.active_count()
    del it
    nxt = iter(loader)
    assert threading.active_count() == threads, "no producer before the first next()"
    assert loader._active is None
    for batch, copy in zip((older, newer), copies):
        assert all(torch.equal(t, c) for t, c in zip(batch, copy))
    next(nxt)
    assert loader._active is not None


def test_abandoned_epochs_leave_no_threads_or_buffer_sets(tmp_path: Path) -> None:
    """50 epochs abandoned at every point, some with the producer blocked on a full
    queue (even on its final end marker, which upstream puts with no timeout)."""
    path, _, _ = _write(tmp_path, n=300)
    loader = make_loader(path, batch_size=16, num_threads=1)
    n = len(loader)
    base = threading.active_count()
    for epoch in range(50):
        stop = [1, 2, n // 2, n - 3, n - 2, n - 1, n][epoch % 7]
        for k, _ in enumerate(loader):
            if k + 1 == stop:
                if epoch % 2 and stop < n:  # the producer runs ahead until it must wait
                    _wait(lambda: _producer_waits(loader) or not loader._active.is_alive(), "it")
                break
        assert threading.active_count() == base, f"a thread was left at epoch {epoch}"
        assert loader.graph.buffer_sets == 1, f"a new buffer set at epoch {epoch}"


def test_an_old_epoch_iterator_ends_when_a_new_epoch_starts(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    loader = make_loader(path, batch_size=16, order="sequential")
    old = iter(loader)
    next(old)
    new = iter(loader)
    assert next(new)[2][0].item() == 0
    with pytest.raises(StopIteration):  # never hangs on a queue nobody fills
        next(old)
    assert len(list(new)) == len(loader) - 1
