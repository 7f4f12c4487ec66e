"""Mid-epoch resume of the loader on its own, on the same or another world size
(the Lightning path is in test_lightning.py)."""

from __future__ import annotations

import hashlib
import pickle
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import make_arrays

from ffcv_pairs import ArraySource, PairAugment, PairLoader, PairReader, make_loader, write_pairs
from ffcv_pairs.format.sidecar import manifest_path
from ffcv_pairs.load.elastic import Segment, remaining
from ffcv_pairs.load.index import PageIndex
from ffcv_pairs.load.order import OrderSpec, epoch_order

N, EPOCH = 500, 1
AUG = PairAugment(hflip=0.5, brightness=0.2, contrast=0.3)
KW = {"seed": 3, "window_bytes": 8192, "augment": AUG, "num_threads": 1}


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> Path:
    a, b, labels = make_arrays(N, (3, 8, 8))  # label i is sample i: batches carry their ids
    p = tmp_path_factory.mktemp("resume") / "r.beton"
    write_pairs(ArraySource(a, b, labels), p, page_size=4096, progress=False)
    return p


def _ids(batches) -> list[int]:
    return [int(i) for _, _, lab in batches for i in lab]


def _read(loader: PairLoader, batches: int | None = None) -> dict[int, tuple[str, str]]:
    """``batches`` (all: None) of epoch EPOCH: sample id -> digests of augmented A and B,
    in the order read (a repeated id would show as a shorter dict: counted separately)."""
    loader.set_epoch(EPOCH)
    out: dict[int, tuple[str, str]] = {}
    it = iter(loader)
    for k, (xa, xb, lab) in enumerate(it):
        assert lab.tolist() == loader.last_batch_ids.tolist()
        for i, sid in enumerate(lab.tolist()):
            digest = (hashlib.sha1(xa[i].numpy().tobytes()).hexdigest(),)
            digest += (hashlib.sha1(xb[i].numpy().tobytes()).hexdigest(),)
            assert sid not in out, f"sample {sid} read twice by one rank"
            out[sid] = digest
        if batches is not None and k + 1 == batches:
            break
    return out


@pytest.fixture(scope="module")
def reference(path: Path) -> dict[int, tuple[str, str]]:
    """Every sample's augmented bytes in an uninterrupted epoch EPOCH."""
    full = _read(make_loader(path, batch_size=20, drop_last=False, **KW))
    assert sorted(full) == list(range(N))
    return full


def _check_epoch(runs: list[dict], reference: dict, last_world: int, last_batch: int) -> None:
    """Over all runs (the last ``last_world`` of them the final world's), every sample
    at most once, and missing only what the final world's deal drops (fewer than
    last_world * last_batch: each rank's equal share cut to whole batches), each sample
    with the bytes of the uninterrupted run."""
    ids = [sid for run in runs for sid in run]
    assert len(ids) == len(set(ids)), "a sample was read twice"
    rest = N - sum(len(run) for run in runs[:-last_world])
    dropped = rest - last_world * (rest // last_world // last_batch * last_batch)
    assert N - len(ids) == dropped < last_world * last_batch
    for run in runs:
        for sid, digest in run.items():
            assert digest == reference[sid], f"sample {sid}'s augmented bytes differ"


def _world(path: Path, world: int, batch: int, **kw) -> list[PairLoader]:
    return [
        make_loader(path, batch_size=batch, rank=r, world_size=world, **{**KW, **kw})
        for r in range(world)
    ]


@pytest.mark.parametrize("order", ["quasi_random", "random", "sequential"])
def test_resume_mid_epoch_gives_the_same_sequence(path: Path, order: str) -> None:
    kw = {**KW, "batch_size": 16, "order": order}
    full = make_loader(path, **kw)
    expected, images = [], []
    for _ in range(3):
        for xa, _, lab in full:
            expected.extend(lab.tolist())
            images.append(xa.clone())
    first = make_loader(path, **kw)
    seen = _ids(first)
    it = iter(first)
    for _ in range(7):
        seen.extend(next(it)[2].tolist())
    state = first.state_dict()
    assert state["epoch"] == 1 and state["batches_consumed"] == 7
    assert state["batch_size"] == 16 and state["world_size"] == 1
    del it, first

    resumed = make_loader(path, **kw)
    resumed.load_state_dict(state)
    assert resumed.state_dict()["batches_consumed"] == 7, "a loaded state reads back as is"
    got_images = []
    for _ in range(2):
        for xa, _, lab in resumed:
            seen.extend(lab.tolist())
            got_images.append(xa.clone())
    assert seen == expected
    # Augmentation too: the resumed batches are byte-identical.
    tail = images[len(images) - len(got_images) :]
    assert all(torch.equal(x, y) for x, y in zip(tail, got_images))


def test_state_at_epoch_end_starts_the_next_epoch(path: Path) -> None:
    loader = make_loader(path, batch_size=16)
    for _ in loader:
        pass
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["batches_consumed"] == 0 and state["segments"] == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ((2, 16, 5), (1, 16)),  # (world, batch, batches consumed) -> (world, batch)
        ((2, 16, 5), (3, 16)),
        ((3, 16, 3), (2, 16)),
        ((4, 16, 2), (2, 16)),
        ((2, 16, 5), (3, 8)),  # the global batch fixed, the per-device one changes
        ((3, 8, 6), (1, 32)),
    ],
)
@pytest.mark.parametrize("order", ["quasi_random", "random"])
def test_elastic_resume(path: Path, reference: dict, old, new, order: str) -> None:
    """Any rank's state resumes a world of another size: the rest of the epoch is read
    once, apart from fewer than new_world * new_batch dropped, with the same bytes."""
    (world, batch, taken), (world2, batch2) = old, new
    before = _world(path, world, batch, order=order)
    runs = [_read(loader, taken) for loader in before]
    states = [loader.state_dict() for loader in before]
    assert len({str(s["segments"]) for s in states}) == 1, "every rank saves the same plan"
    after = _world(path, world2, batch2, order=order)
    for loader in after:
        loader.load_state_dict(states[-1])  # any rank's state will do
    runs += [_read(loader) for loader in after]
    _check_epoch(runs, reference, world2, batch2)
    # The rest is dealt in equal shares: every new rank reads the same number of batches.
    assert len({len(r) for r in runs[world:]}) == 1


def test_a_jpeg_file_resumes_mid_epoch_and_on_another_world(tmp_path: Path) -> None:
    """The order, resume and elastic resume never look at image sizes: on a file of
    JPEGs the rest of the epoch is read once, with the same bytes."""
    a, b, labels = make_arrays(N, (3, 8, 8))
    p = tmp_path / "j.beton"
    write_pairs(ArraySource(a, b, labels), p, page_size=4096, progress=False, codec="jpeg")
    reference = _read(make_loader(p, batch_size=20, drop_last=False, **KW))
    assert sorted(reference) == list(range(N))
    before = _world(p, 2, 16)
    runs = [_read(loader, 5) for loader in before]
    state = before[-1].state_dict()
    after = _world(p, 3, 16)
    for loader in after:
        loader.load_state_dict(state)
    runs += [_read(loader) for loader in after]
    _check_epoch(runs, reference, 3, 16)


@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("world", [2, 3, 4, 7])
def test_the_pool_is_every_sample_not_consumed(path: Path, world: int, drop_last: bool) -> None:
    """What a resume deals out: each unconsumed sample once, including those the old
    world's cut to whole batches left out (so nothing is lost before the final deal)."""
    index = PageIndex.build(PairReader(path))
    spec = OrderSpec("quasi_random", 16, 3, 0, world, drop_last, 2)
    consumed = np.concatenate(
        [epoch_order(index, replace(spec, rank=r), EPOCH)[: 3 * 16] for r in range(world)]
    )
    pool = remaining(index, spec, EPOCH, [Segment(world, 16, drop_last, 3)])
    assert pool is not None and len(pool) == len(set(pool.tolist()))
    assert not set(pool.tolist()) & set(consumed.tolist())
    assert set(pool.tolist()) | set(consumed.tolist()) == set(range(N))


def test_resume_of_a_resume(path: Path, reference: dict) -> None:
    """W -> W' -> W'': the rule applied again, from the segments in the state."""
    runs = []
    states = []
    for world, batch, taken in [(2, 16, 4), (3, 8, 5), (4, 4, 6)]:
        loaders = _world(path, world, batch)
        for loader in loaders:
            if states:
                loader.load_state_dict(states[-1])
        runs += [_read(loader, taken) for loader in loaders]
        states.append(loaders[0].state_dict())
    assert len(states[-1]["segments"]) == 3
    last = _world(path, 1, 16)[0]
    last.load_state_dict(states[-1])
    runs.append(_read(last))
    _check_epoch(runs, reference, 1, 16)


def test_same_world_resume_after_another_world_continues_in_order(path: Path) -> None:
    """A resumed epoch interrupted and resumed again on the same world reads on exactly
    as it would have."""
    two = _world(path, 2, 16)
    for loader in two:
        _read(loader, 3)
    three = _world(path, 3, 8)
    for loader in three:
        loader.load_state_dict(two[0].state_dict())
    whole = [list(_read(loader)) for loader in three]
    again = _world(path, 3, 8)
    for loader in again:
        loader.load_state_dict(two[1].state_dict())
        _read(loader, 2)
    state = again[2].state_dict()
    assert len(state["segments"]) == 2 and state["segments"][-1]["batches"] == 2
    final = _world(path, 3, 8)
    for rank, loader in enumerate(final):
        loader.load_state_dict(state)
        assert list(_read(loader)) == whole[rank][2 * 8 :]


def test_without_drop_last_everything_is_read(path: Path, reference: dict) -> None:
    """Padding by wrapping reads fewer than world_size samples twice per world."""
    before = _world(path, 3, 16, drop_last=False)
    runs = [_read(loader, 4) for loader in before]
    after = _world(path, 2, 24, drop_last=False)
    for loader in after:
        loader.load_state_dict(before[0].state_dict())
    runs += [_read(loader) for loader in after]
    ids = [sid for run in runs for sid in run]
    assert set(ids) == set(range(N))
    assert len(ids) - N < 3 + 2
    assert len({len(r) for r in runs[3:]}) == 1


def test_lightning_hook_gets_both_counts(path: Path) -> None:
    """``on_resume(saved, now)``: batches done as the state counted them and in this world."""
    two = _world(path, 2, 16)
    _read(two[0], 5)
    one = _world(path, 1, 16)[0]
    calls: list[tuple[int, int]] = []
    one.on_resume = lambda saved, now: calls.append((saved, now))
    one.load_state_dict(two[0].state_dict())
    rest = len(_read(one)) // 16
    assert calls == [(5, len(one) - rest)]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"seed": 4}, "seed"),
        ({"order": "random"}, "order"),
        ({"window_bytes": 4096}, r"window \(window_pages\)"),
        ({"indices": np.arange(N - 1)}, "indices"),
    ],
)
def test_fixed_fields_are_refused_by_name(path: Path, change: dict, field: str) -> None:
    two = _world(path, 2, 16)
    _read(two[0], 2)
    state = two[0].state_dict()
    other = make_loader(path, batch_size=16, **{**KW, **change})
    with pytest.raises(ValueError, match=rf"cannot resume epoch 1 mid-way .* the {field} differs"):
        other.load_state_dict(state)
    # At an epoch boundary nothing but the epoch carries over.
    other.load_state_dict({**state, "batches_consumed": 0, "segments": []})
    assert other.state_dict()["epoch"] == 1


def test_another_file_is_refused(path: Path, tmp_path: Path) -> None:
    """The file is known by its sidecar's SHA-256, and by its contents without one."""
    loader = make_loader(path, batch_size=16, **KW)
    _read(loader, 2)
    state = loader.state_dict()
    assert state["file"].startswith("sha256:")
    a, b, labels = make_arrays(N, (3, 8, 8), seed=1)  # the same size and header
    twin = tmp_path / "twin.beton"
    write_pairs(ArraySource(a, b, labels), twin, page_size=4096, progress=False)
    with pytest.raises(ValueError, match=r"the file \(content\) differs"):
        make_loader(twin, batch_size=16, **KW).load_state_dict(state)
    manifest_path(twin).unlink()
    bare = make_loader(twin, batch_size=16, **KW)
    assert bare.state_dict()["file"].startswith("size:")
    bigger = tmp_path / "bigger.beton"
    a, b, labels = make_arrays(N + 1, (3, 8, 8))
    write_pairs(ArraySource(a, b, labels), bigger, page_size=4096, progress=False)
    manifest_path(bigger).unlink()
    _read(bare, 2)
    with pytest.raises(ValueError, match=r"the file \(content\) differs"):
        make_loader(bigger, batch_size=16, **KW).load_state_dict(bare.state_dict())


def _bare_copy(src: Path, dst: Path) -> Path:
    """``src`` copied to ``dst`` without its sidecars."""
    dst.write_bytes(src.read_bytes())
    return dst


def test_another_file_of_the_same_shape_without_sidecars_is_refused(
    path: Path, tmp_path: Path
) -> None:
    """Without sidecars, a file of the same shape, count and labels (so the same header,
    metadata and allocation table) is told apart by its contents; its own state resumes."""
    x = _bare_copy(path, tmp_path / "x.beton")
    a, b, labels = make_arrays(N, (3, 8, 8), seed=1)
    y = tmp_path / "y.beton"
    write_pairs(ArraySource(a, b, labels), y, page_size=4096, progress=False)
    Path(f"{y}.stats").unlink(missing_ok=True)
    manifest_path(y).unlink()
    assert x.stat().st_size == y.stat().st_size
    on_x = make_loader(x, batch_size=16, **KW)
    _read(on_x, 2)
    state = on_x.state_dict()
    assert state["file"] == make_loader(y, batch_size=16, **KW).state_dict()["file"]
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(y))}: cannot resume epoch 1 .* the file"
    ):
        make_loader(y, batch_size=16, **KW).load_state_dict(state)
    again = make_loader(x, batch_size=16, **KW)
    again.load_state_dict(state)
    assert again.state_dict()["batches_consumed"] == 2
    # The same file with its sidecar (a checkpoint taken where it had one) resumes too.
    make_loader(path, batch_size=16, **KW).load_state_dict(state)


def test_states_from_before_the_content_identity(path: Path, tmp_path: Path) -> None:
    """A mid-epoch state without ``content`` resumes on its sidecar's digest, and is
    refused when its file had no sidecar (size and header do not name a file)."""
    loader = make_loader(path, batch_size=16, **KW)
    _read(loader, 2)
    old = {k: v for k, v in loader.state_dict().items() if k != "content"}
    make_loader(path, batch_size=16, **KW).load_state_dict(old)
    bare = make_loader(_bare_copy(path, tmp_path / "bare.beton"), batch_size=16, **KW)
    _read(bare, 2)
    weak = {k: v for k, v in bare.state_dict().items() if k != "content"}
    with pytest.raises(ValueError, match="older ffcv-pairs and its file had no sidecar"):
        make_loader(tmp_path / "bare.beton", batch_size=16, **KW).load_state_dict(weak)
    # At an epoch boundary nothing but the epoch carries over.
    bare.load_state_dict({**weak, "batches_consumed": 0, "segments": []})


def test_malformed_states(path: Path) -> None:
    loader = make_loader(path, batch_size=16, **KW)
    _read(loader, 2)
    state = loader.state_dict()
    with pytest.raises(ValueError, match="no 'epoch'"):
        loader.load_state_dict({"batches_consumed": 1})
    with pytest.raises(ValueError, match="older ffcv-pairs"):
        loader.load_state_dict({k: v for k, v in state.items() if k != "segments"})
    too_many = {**state, "segments": [{**state["segments"][0], "batches": 99}]}
    with pytest.raises(ValueError, match="99 batches"):
        loader.load_state_dict(too_many)
    seg = state["segments"][0]
    bad = [
        (
            {**state, "segments": [{**seg, "world_size": 0}]},
            "state segments[0].world_size must be between 1 and",
        ),
        ({**state, "epoch": 1.5}, "state epoch must be an integer, got 1.5 (float)"),
        ({**state, "epoch": 10**30}, "state epoch must be between 0 and"),
        ({**state, "epoch": -1}, "state epoch must be between 0 and"),
        ({**state, "segments": []}, "batches_consumed is 2 but its segments record no batch"),
        (
            {**state, "segments": [{**seg, "drop_last": "x"}]},
            "state segments[0].drop_last must be True or False, got 'x'",
        ),
        ({**state, "segments": [None]}, "state segments[0] must be a mapping, got None"),
        (
            {**state, "segments": [{**seg, "batches": 1.0}]},
            "state segments[0].batches must be an integer",
        ),
        ({**state, "segments": [{**seg, "extra": 1}]}, "state segments[0] must have the keys"),
        ({**state, "segments": "abc"}, "state segments must be a list, got str"),
        ({**state, "batches_consumed": "2"}, "state batches_consumed must be an integer, got '2'"),
    ]
    for broken, needle in bad:
        with pytest.raises((ValueError, TypeError), match=re.escape(needle)):
            loader.load_state_dict(broken)
    with pytest.raises(TypeError, match="a loader state must be a dict, got NoneType"):
        loader.load_state_dict(None)  # type: ignore[arg-type]
    loader.load_state_dict(state)  # the good state still loads after all that
    assert loader.state_dict()["batches_consumed"] == 2


def test_set_epoch_to_another_epoch_drops_the_resume_point(path: Path) -> None:
    loader = make_loader(path, batch_size=16, order="sequential")
    mid = make_loader(path, batch_size=16, order="sequential")
    mid.set_epoch(2)
    it = iter(mid)
    for _ in range(5):
        next(it)
    loader.load_state_dict(mid.state_dict())
    loader.set_epoch(2)
    assert len(_ids(loader)) == (len(loader) - 5) * 16
    loader.load_state_dict(mid.state_dict())
    loader.set_epoch(4)
    assert len(_ids(loader)) == len(loader) * 16
    np.testing.assert_array_equal(np.arange(16), loader.epoch_order(0)[:16])


# -- real process groups ----------------------------------------------------------------

# Stages run by one set of 4 spawned processes: (name, world, batch, batches taken or
# None for the rest, the stage whose rank-0 state it resumes).
STAGES = [
    ("w2", 2, 16, 5, None),
    ("w3", 3, 16, 3, None),
    ("w4", 4, 16, 2, None),
    ("2to1", 1, 16, None, "w2"),
    ("2to3", 3, 16, None, "w2"),
    ("3to2", 2, 16, None, "w3"),
    ("4to2", 2, 16, None, "w4"),
]


def _stages_main(rank: int, path: str, out: str) -> None:
    """Each stage is its own gloo group of ``world`` processes; the loader shards by it."""
    torch.set_num_threads(1)
    for name, world, batch, taken, source in STAGES:
        if rank >= world:
            continue
        init = f"file://{out}/pg-{name}"
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        try:
            loader = make_loader(path, batch_size=batch, **KW)
            assert (loader.rank, loader.world_size) == (rank, world)
            if source is not None:
                loader.load_state_dict(pickle.loads(Path(f"{out}/{source}.state").read_bytes()))
            run = _read(loader, taken)
            lengths = [None] * world
            dist.all_gather_object(lengths, len(run))
            assert len(set(lengths)) == 1, f"ranks read unequal batches: {lengths}"
            if rank == 0:
                Path(f"{out}/{name}.state").write_bytes(pickle.dumps(loader.state_dict()))
            Path(f"{out}/{name}-{rank}.run").write_bytes(pickle.dumps(run))
            dist.barrier()
        finally:
            dist.destroy_process_group()


def test_elastic_resume_with_real_process_groups(
    path: Path, reference: dict, tmp_path: Path
) -> None:
    """2 -> 1, 2 -> 3, 3 -> 2 and 4 -> 2 ranks on gloo: rank 0's state resumes all ranks."""
    mp.spawn(_stages_main, args=(str(path), str(tmp_path)), nprocs=4, join=True)
    world = {name: w for name, w, *_ in STAGES}

    def runs(name: str) -> list[dict]:
        return [
            pickle.loads((tmp_path / f"{name}-{r}.run").read_bytes()) for r in range(world[name])
        ]

    for name, new_world, batch, _, source in STAGES:
        if source is not None:
            _check_epoch(runs(source) + runs(name), reference, new_world, batch)


def _small_without_sidecars(path: Path, seed: int) -> Path:
    """6 pairs of 3x8x8 uint8, labels 0..5, the default 8 MiB page; sidecars removed: the
    images fill a sliver at the start of the first page."""
    a = np.random.default_rng(seed).integers(0, 256, (6, 3, 8, 8), dtype=np.uint8)
    write_pairs(ArraySource(a, 255 - a, np.arange(6)), path, progress=False)
    for extra in path.parent.glob(path.name + ".*"):
        extra.unlink()
    return path


def test_a_small_file_of_the_same_shape_without_sidecars_is_refused(tmp_path: Path) -> None:
    """The content identity samples the images themselves: pieces at even byte offsets
    missed a small file's images (found by a probe after the identity was added)."""
    x = _small_without_sidecars(tmp_path / "x.beton", 0)
    y = _small_without_sidecars(tmp_path / "y.beton", 1)
    loader = make_loader(x, batch_size=2, order="random", device="cpu")
    next(iter(loader))
    state = loader.state_dict()
    with pytest.raises(ValueError, match=r"the file \(content\) differs"):
        make_loader(y, batch_size=2, order="random", device="cpu").load_state_dict(state)
    make_loader(x, batch_size=2, order="random", device="cpu").load_state_dict(state)
