"""The loader in one process: exact bytes, shapes, epochs, held batches and bad input."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_small_beton as _write

from ffcv_pairs import BetonError, PairAugment, PairReader, make_loader
from ffcv_pairs.load import pipeline


@pytest.mark.parametrize("order", ["quasi_random", "random", "sequential"])
@pytest.mark.parametrize(
    ("shape", "dtype"), [((3, 8, 8), "uint8"), ((8, 8, 2), "float16"), ((1, 5, 7), "float32")]
)
def test_every_sample_exact(tmp_path: Path, order: str, shape, dtype) -> None:
    path, a, b = _write(tmp_path, shape=shape, dtype=dtype)
    loader = make_loader(
        path, batch_size=32, order=order, drop_last=False, num_threads=2, window_bytes=8192
    )
    seen = []
    for xa, xb, label in loader:
        assert xa.dtype == getattr(torch, dtype) and tuple(xa.shape[1:]) == shape
        assert label.dtype == torch.int64 and label.ndim == 1
        ids = label.numpy()
        assert xa.numpy().tobytes() == a[ids].tobytes()
        assert xb.numpy().tobytes() == b[ids].tobytes()
        seen.extend(ids.tolist())
    assert sorted(seen) == list(range(len(a)))


def test_len_epochs_and_set_epoch(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    loader = make_loader(path, batch_size=32, window_bytes=8192)
    assert len(loader) == 300 // 32
    runs = [torch.cat([lab.clone() for _, _, lab in loader]) for _ in range(2)]
    assert len(runs[0]) == len(loader) * 32
    assert not torch.equal(runs[0], runs[1]), "epochs must count up by themselves"
    loader.set_epoch(0)
    assert torch.equal(torch.cat([lab.clone() for _, _, lab in loader]), runs[0])
    loader.set_epoch(1)
    assert torch.equal(torch.cat([lab.clone() for _, _, lab in loader]), runs[1])
    np.testing.assert_array_equal(loader.epoch_order(1), runs[1].numpy())


class _StallQueue(pipeline.EpochQueue):
    """The loading thread's output queue, telling the test when the thread has run as far
    ahead as it may: it waits to put a finished batch into a full queue, or it has put its
    last one. Its batch is then in its slot, so every free slot has been written."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.stalled = self.ended = False
        self.changed = threading.Condition(self.mutex)

    def put(self, item, block=True, timeout=None):
        with self.mutex:
            if self.maxsize > 0 and self._qsize() >= self.maxsize:
                self.stalled = True
                self.changed.notify_all()
        super().put(item, block, timeout)

    def _put(self, item) -> None:
        super()._put(item)
        if item is None:  # the end of the epoch (or an error)
            self.ended = True
            self.changed.notify_all()

    def _get(self):
        self.stalled = False  # the consumer freed a place: the thread may run on
        return super()._get()


@pytest.fixture
def run_ahead(monkeypatch):
    """``wait(loader)``: block until the loader's thread has filled every slot it may."""
    monkeypatch.setattr(pipeline, "EpochQueue", _StallQueue)

    def wait(loader) -> None:
        q = loader._active.output_queue
        assert isinstance(q, _StallQueue)
        with q.changed:
            assert q.changed.wait_for(lambda: q.stalled or q.ended, timeout=60), "no progress"

    return wait


def test_a_held_batch_is_not_overwritten(tmp_path: Path, run_ahead) -> None:
    """Like Lightning: hold batch k and batch k+1 while the loader runs ahead."""
    path, a, _ = _write(tmp_path, n=2000, page_size=8192)
    loader = make_loader(path, batch_size=10, order="random", batches_ahead=2, num_threads=1)
    it = iter(loader)
    prev = next(it)
    prev_copy = [t.clone() for t in prev]
    for cur in it:
        run_ahead(loader)  # the loader has filled every free slot
        for t, c in zip(prev, prev_copy):
            assert torch.equal(t, c), "a held batch was overwritten"
        assert prev[0].numpy().tobytes() == a[prev[2].numpy()].tobytes()
        prev, prev_copy = cur, [t.clone() for t in cur]


def test_labels_may_be_kept_without_a_copy(tmp_path: Path, run_ahead) -> None:
    """Labels are what callers keep (epoch-end metrics): every one handed out stays as it
    was, while image slots are reused."""
    path, _, _ = _write(tmp_path, n=2000, page_size=8192)
    loader = make_loader(path, batch_size=10, order="random", batches_ahead=2, num_threads=1)
    kept, ids = [], []
    for _ in range(2):
        for _, _, label in loader:
            run_ahead(loader)
            kept.append(label)
            ids.append(loader.last_batch_ids.copy())
    assert len(kept) == 2 * len(loader)
    for label, want in zip(kept, ids):
        assert label.tolist() == want.tolist()  # write_small_beton: label i is sample i


def test_buffers_are_allocated_once_and_held_batches_survive_an_epoch_boundary(
    tmp_path: Path, run_ahead
) -> None:
    """The same buffer slots every epoch (upstream allocates new ones per epoch), and the
    slot sequence runs on: holding the last batch of an epoch and the first of the next
    (two batches, as Lightning may) is safe while the loader runs ahead."""
    path, a, _ = _write(tmp_path, n=2000, page_size=8192)
    loader = make_loader(path, batch_size=9, order="random", num_threads=1)
    slots = loader.config.batches_ahead + 3
    assert len(loader) % slots != 0, "a restart at slot 0 would look like running on"
    pointers: list[set[int]] = []
    prev = prev_copy = None
    for _ in range(3):
        pointers.append(set())
        for cur in loader:
            pointers[-1].add(cur[0].data_ptr())
            run_ahead(loader)  # the loader has filled every free slot
            if prev is not None:
                for t, c in zip(prev, prev_copy):
                    assert torch.equal(t, c), "a held batch was overwritten"
                assert prev[0].numpy().tobytes() == a[prev[2].numpy()].tobytes()
            prev, prev_copy = cur, [t.clone() for t in cur]
    assert len(pointers[0]) == slots and pointers[0] == pointers[1] == pointers[2]


def test_breaking_out_and_starting_again(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    loader = make_loader(path, batch_size=16, order="sequential")
    for i, _ in enumerate(loader):
        if i == 2:
            break
    first = next(iter(loader))  # a fresh epoch, not the rest of the old one
    assert first[2][0].item() == 0


def test_reader_maps_tables_instead_of_copying(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    import mmap

    def mapped(arr: np.ndarray) -> bool:
        """``arr`` is a view whose memory is a file mapping (not a private copy)."""
        base = arr
        while base is not None and not isinstance(base, mmap.mmap):
            if isinstance(base, np.ndarray) and base.flags.owndata:
                return False
            base = getattr(base, "base", None) if isinstance(base, np.ndarray) else None
        return isinstance(base, mmap.mmap)

    reader = PairReader(path)
    assert mapped(reader.metadata)
    assert mapped(reader.alloc_table)
    assert not mapped(np.array(reader.metadata))  # the check can fail
    assert reader.schema.a.shape == (3, 8, 8)


# -- bad input --------------------------------------------------------------------------


def test_not_a_beton(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("hello, this is not a beton file at all" * 10)
    with pytest.raises(BetonError, match=r"notes.txt: not a \.beton"):
        make_loader(p, batch_size=4)
    with pytest.raises(BetonError, match="no such file"):
        make_loader(tmp_path / "missing.beton", batch_size=4)
    (tmp_path / "tiny").write_bytes(b"\x02\x00")
    with pytest.raises(BetonError, match="too small"):
        make_loader(tmp_path / "tiny", batch_size=4)


def test_truncated(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    data = path.read_bytes()
    for cut in (len(data) - 5, len(data) // 2, 100):
        (tmp_path / "t.beton").write_bytes(data[:cut])
        with pytest.raises(BetonError, match=r"t\.beton: truncated"):
            make_loader(tmp_path / "t.beton", batch_size=4)


def test_unfinished_write(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    data = bytearray(path.read_bytes())
    data[:24] = bytes(24)
    (tmp_path / "u.beton").write_bytes(bytes(data))
    with pytest.raises(BetonError, match="unfinished"):
        make_loader(tmp_path / "u.beton", batch_size=4)


def test_pointer_outside_file(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    reader = PairReader(path)
    offset = reader.metadata_offset + 7 * reader.metadata.itemsize
    data = bytearray(path.read_bytes())
    data[offset : offset + 8] = np.uint64(len(data) + 10).tobytes()
    (tmp_path / "p.beton").write_bytes(bytes(data))
    with pytest.raises(BetonError, match="sample 7 field 'A' points at byte"):
        make_loader(tmp_path / "p.beton", batch_size=4)


def test_missing_fields(tmp_path: Path) -> None:
    from ffcv.fields import IntField, NDArrayField
    from ffcv.writer import DatasetWriter

    path = tmp_path / "other.beton"
    fields = {"image": NDArrayField(np.dtype("uint8"), (4,)), "label": IntField()}
    DatasetWriter(str(path), fields, num_workers=1).from_indexed_dataset(
        [(np.zeros(4, np.uint8), 1)] * 5
    )
    with pytest.raises(BetonError, match=r"other.beton: missing field\(s\) \['A', 'B'\]"):
        make_loader(path, batch_size=2)


def test_batch_larger_than_rank_share(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path, n=100)
    with pytest.raises(ValueError, match="batch_size 64 is larger than this rank's share of 50"):
        make_loader(path, batch_size=64, rank=1, world_size=2)
    loader = make_loader(path, batch_size=64, rank=1, world_size=2, drop_last=False)
    assert len(loader) == 1 and len(next(iter(loader))[2]) == 50


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (
            {"order": "shuffle"},
            "order must be one of ['quasi_random', 'random', 'sequential'], got 'shuffle'",
        ),
        ({"batch_size": 0}, "batch_size must be between 1 and"),
        ({"batch_size": 1.5}, "batch_size must be an integer, got 1.5 (float)"),
        ({"seed": "abc"}, "seed must be an integer, got 'abc' (str)"),
        ({"seed": "5", "order": "sequential"}, "seed must be an integer, got '5' (str)"),
        ({"seed": 1.5, "order": "sequential"}, "seed must be an integer, got 1.5 (float)"),
        ({"seed": 2**70}, f"seed must be between 0 and {2**63 - 1}, got {2**70}"),
        ({"indices": []}, "indices is empty: it selects no samples"),
        ({"num_threads": 0}, "num_threads must be between 1 and"),
        ({"num_threads": 1000}, "num_threads must be between 1 and"),
        ({"max_ram_gb": -1}, "max_ram_gb must be > 0, got -1.0"),
        ({"drop_last": "x"}, "drop_last must be True or False, got 'x' (str)"),
        ({"device": 3}, "device must be a device name"),
        ({"rank": 1}, "pass both rank and world_size"),
        ({"distributed": True}, "initialised torch.distributed"),
        ({"bogus": 1}, "bogus"),
        ({"batches_ahead": 0}, "batches_ahead must"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs, needle) -> None:
    path, _, _ = _write(tmp_path)
    args = {"batch_size": 4, **kwargs}
    with pytest.raises((ValueError, TypeError), match=re.escape(needle)):
        make_loader(path, **args)


@pytest.mark.parametrize("order", ["quasi_random", "sequential"])
def test_process_cache_gives_the_same_batches(tmp_path: Path, order: str) -> None:
    """os_cache=False: upstream's process cache (private pages) under the same decoders."""
    path, _, _ = _write(tmp_path, n=700, page_size=4096)
    aug = PairAugment(hflip=0.5, crop=(8, 8), crop_padding=2)
    runs = []
    for os_cache in (True, False):
        loader = make_loader(
            path,
            batch_size=32,
            order=order,
            os_cache=os_cache,
            augment=aug,
            window_bytes=8192,
            seed=4,
        )
        runs.append([[t.clone() for t in batch] for batch in loader])
    assert len(runs[0]) == len(runs[1]) == 700 // 32
    for x, y in zip(runs[0], runs[1]):
        assert all(torch.equal(p, q) for p, q in zip(x, y))


# -- indices ----------------------------------------------------------------------------


def test_boolean_mask_selects(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path)
    mask = np.zeros(300, dtype=bool)
    mask[::3] = True
    loader = make_loader(path, batch_size=10, indices=mask, order="sequential", drop_last=False)
    assert _ids_of(loader) == list(range(0, 300, 3))
    listed = make_loader(path, batch_size=10, indices=[5, 1, 7], drop_last=False)
    assert sorted(_ids_of(listed)) == [1, 5, 7]


def _ids_of(loader) -> list[int]:
    return [int(i) for _, _, lab in loader for i in lab]


@pytest.mark.parametrize(
    ("indices", "needle"),
    [
        (np.array([3, -1, -5]), r"indices\[1\] = -1 is negative"),
        (np.array([3, 300, 5]), r"indices\[1\] = 300 is out of range \[0, 300\)"),
        (np.array([3, 5, 9, 5, 3]), r"indices\[3\] = 5 is a duplicate \(first at indices\[1\]\)"),
        (np.array([1.0, 2.0]), r"got a float64 array \(first value 1.0\)"),
        (np.array([1.5]), r"float64 array \(first value 1.5\)"),
        (np.array(["a"]), "<U1 array"),
        (np.ones(299, dtype=bool), r"one entry per sample \(300\), got 299"),
        (np.zeros((2, 2), dtype=np.int64), "1-d"),
        # beyond int64: numpy holds them as uint64, floats or objects; never "negative"
        ([2**63], r"^indices\[0\] = 9223372036854775808 is out of range \[0, 300\)$"),
        ([3, 2**63], r"^indices\[1\] = 9223372036854775808 is out of range \[0, 300\)$"),
        ([2**64, 1], r"^indices\[0\] = 18446744073709551616 is out of range"),
        (np.array([4, 2**64 - 1], np.uint64), r"^indices\[1\] = 18446744073709551615 is out of"),
    ],
)
def test_bad_indices(tmp_path: Path, indices, needle: str) -> None:
    path, _, _ = _write(tmp_path)
    with pytest.raises(ValueError, match=needle):
        make_loader(path, batch_size=4, indices=indices)


ONE_NUMBA_THREAD = """
import os, sys
os.sched_getaffinity = lambda pid: set(range(8))  # a node of 8 cores, whatever runs this
from ffcv_pairs import make_loader
loader = make_loader(sys.argv[1], batch_size=8)
a, b, label = next(iter(loader))
print("threads", loader.num_threads, "batch", len(label))
"""


def test_default_threads_respect_numba_num_threads(tmp_path: Path) -> None:
    """Under ``NUMBA_NUM_THREADS=1`` the default thread count is 1, and a batch loads
    (numba refuses more threads than its limit)."""
    path, _, _ = _write(tmp_path)
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", ONE_NUMBA_THREAD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "threads 1 batch 8" in proc.stdout


def _bytes(batches) -> list[bytes]:
    return [b"".join(t.numpy().tobytes() for t in batch) for batch in batches]


def test_a_pickled_loader_keeps_the_rank_it_got_from_the_process_group(
    tmp_path: Path, monkeypatch
) -> None:
    """A copy in a worker process (no process group there) reads the same rank's share."""
    from ffcv_pairs.load import loader as loader_module

    path, _, _ = _write(tmp_path)
    with monkeypatch.context() as m:
        m.setattr(loader_module, "resolve_world", lambda rank, world, distributed: (1, 2))
        data = pickle.dumps(make_loader(path, batch_size=16, seed=5))
    copy = pickle.loads(data)
    assert (copy.rank, copy.world_size) == (1, 2)
    assert _bytes(copy) == _bytes(make_loader(path, batch_size=16, seed=5, rank=1, world_size=2))


def test_a_pickled_loader_gives_the_same_batches(tmp_path: Path) -> None:
    """A pickle round trip (spawned workers, ``ddp_spawn``) rebuilds the loader from its
    file and options: the same batches, and the epoch and mid-epoch position survive."""
    path, _, _ = _write(tmp_path)
    aug = PairAugment(hflip=0.5, brightness=0.3, contrast=0.2)
    loader = make_loader(path, batch_size=16, seed=5, window_bytes=8192, augment=aug)
    copy = pickle.loads(pickle.dumps(loader))
    assert copy is not loader and copy.config.augment == loader.config.augment
    ranked = make_loader(path, batch_size=16, rank=1, world_size=2, augment=aug)
    assert _bytes(pickle.loads(pickle.dumps(ranked))) == _bytes(ranked)
    for epoch in (0, 1):
        assert _bytes(copy) == _bytes(loader), f"epoch {epoch} differs"
    assert _bytes(pickle.loads(pickle.dumps(loader))) == _bytes(loader), "epoch 2"
    loader.set_epoch(7)
    head = iter(loader)
    first = _bytes([next(head), next(head)])
    resumed = pickle.loads(pickle.dumps(loader))  # two batches into epoch 7
    assert _bytes(resumed) == _bytes(head)
    assert resumed.state_dict()["epoch"] == 8
    loader.set_epoch(7)
    assert _bytes(loader)[:2] == first


class _Batches(torch.utils.data.IterableDataset):
    """A loader as a torch dataset, copying out its reused image slots."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def __iter__(self):
        return ((a.clone(), b.clone(), label) for a, b, label in self.loader)


def test_a_torch_dataloader_with_spawned_workers_takes_a_loader(tmp_path: Path) -> None:
    path, _, _ = _write(tmp_path, n=40)
    loader = make_loader(path, batch_size=8, num_threads=1)
    spawned = torch.utils.data.DataLoader(
        _Batches(loader), batch_size=None, num_workers=1, multiprocessing_context="spawn"
    )
    assert _bytes(spawned) == _bytes(_Batches(loader))
