"""A dataset of several `.beton` shards read as one (format/joined.py, load/joined_mapping.py):
the same samples, bytes and augmentation as one file of the same samples, in every order and
rank layout; resume across shards; a changed manifest or shard refused by name."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import make_arrays
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffcv_pairs import ArraySource, BetonError, PairAugment, make_loader, write_pairs
from ffcv_pairs.format.joined import JoinedReader
from ffcv_pairs.format.merging import add_shards, merge_parts
from ffcv_pairs.format.shards import DatasetManifest
from ffcv_pairs.load.index import PageIndex
from ffcv_pairs.load.order import OrderSpec, epoch_order
from ffcv_pairs.load.pipeline import LoaderError

N = 240
CUTS = (0, 50, 170, 240)  # three shards of 50, 120 and 70 pairs
PAGE_SIZES = (4096, 8192, 4096)  # shards may differ in page size
KW = {"batch_size": 16, "seed": 5, "drop_last": False}


def _write(path: Path, a: np.ndarray, b: np.ndarray, labels: np.ndarray, **kw) -> Path:
    kw = {"page_size": 4096, **kw}
    write_pairs(ArraySource(a, b, labels), path, workers=1, progress=False, **kw)
    return path


def _two_shards(root: Path, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Path]]:
    """64 pairs of :func:`make_arrays` in two shards of 32 in ``root``: (A, B, labels, paths)."""
    a, b, labels = make_arrays(64, seed=seed)
    halves = [slice(0, 32), slice(32, 64)]
    paths = [_write(root / f"s{k}.beton", a[h], b[h], labels[h]) for k, h in enumerate(halves)]
    return a, b, labels, paths


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(one file of N pairs, a manifest of the same pairs in three shards)."""
    root = tmp_path_factory.mktemp("shards")
    a, b, labels = make_arrays(N, shape=(3, 12, 12), seed=7)
    one = _write(root / "one.beton", a, b, labels)
    shards = [
        _write(root / "parts" / f"s{k}.beton", a[lo:hi], b[lo:hi], labels[lo:hi], page_size=ps)
        for k, (lo, hi, ps) in enumerate(zip(CUTS, CUTS[1:], PAGE_SIZES))
    ]
    manifest = root / "all.json"
    merge_parts(shards, manifest).save(manifest)
    return one, manifest


def _by_label(path: Path, **kw) -> dict[int, tuple[bytes, bytes]]:
    out = {}
    for xa, xb, lab in make_loader(path, **{**KW, **kw}):
        for i, y in enumerate(lab.tolist()):
            assert y not in out, f"sample {y} twice in one epoch"
            out[y] = (xa[i].numpy().tobytes(), xb[i].numpy().tobytes())
    return out


@pytest.mark.parametrize("order", ["sequential", "quasi_random", "random"])
@pytest.mark.parametrize(
    "augment",
    [
        None,
        # flips alone: contrast's means come from each shard's stored statistics
        {"hflip": 0.5, "vflip": 0.5, "contrast": 0.3, "contrast_paired": False},
        {"hflip": 0.5, "crop": (10, 10), "crop_padding": 2, "brightness": 0.2},
    ],
)
def test_shards_give_the_samples_and_bytes_of_one_file(
    dataset: tuple[Path, Path], order: str, augment: dict | None
) -> None:
    one, manifest = dataset
    aug = None if augment is None else PairAugment(**augment)
    single = _by_label(one, order=order, augment=aug)
    joined = _by_label(manifest, order=order, augment=aug)
    assert sorted(joined) == list(range(N))
    assert joined == single


def test_sequential_order_runs_through_the_shards_in_manifest_order(
    dataset: tuple[Path, Path],
) -> None:
    _, manifest = dataset
    a, _, _ = make_arrays(N, shape=(3, 12, 12), seed=7)
    got = [y for _, _, lab in make_loader(manifest, **KW, order="sequential") for y in lab.tolist()]
    assert got == list(range(N))
    xa, _, _ = next(iter(make_loader(manifest, **{**KW, "batch_size": 60, "order": "sequential"})))
    assert np.array_equal(xa.numpy(), a[:60])  # across the first shard's end


def test_the_joined_reader_places_each_shard_on_its_own_pages(dataset: tuple[Path, Path]) -> None:
    _, manifest = dataset
    reader = JoinedReader(manifest)
    assert reader.page_size == max(PAGE_SIZES) and reader.num_samples == N
    assert list(reader.offsets) == list(CUTS)
    assert all(int(base) % reader.page_size == 0 for base in reader.bases)
    ptrs = reader.image_pointers("A")
    pages = ptrs >> reader.page_shift
    for k in range(1, len(CUTS) - 1):  # no page holds samples of two shards
        assert pages[CUTS[k] - 1] < pages[CUTS[k]]
        assert int(ptrs[CUTS[k]]) >= int(reader.bases[k])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    world=st.integers(1, 6),
    batch=st.sampled_from([1, 3, 8, 16]),
    drop_last=st.booleans(),
    order=st.sampled_from(["quasi_random", "random", "sequential"]),
    epoch=st.integers(0, 3),
)
def test_every_rank_gets_equal_batches_and_no_sample_twice(
    dataset: tuple[Path, Path], world: int, batch: int, drop_last: bool, order: str, epoch: int
) -> None:
    _, manifest = dataset
    reader = JoinedReader(manifest)
    index = PageIndex.build(reader)
    orders = [
        epoch_order(index, OrderSpec(order, batch, 5, rank, world, drop_last, 2), epoch)
        for rank in range(world)
    ]
    lengths = {len(o) for o in orders}
    assert len(lengths) == 1, f"ranks read {sorted(len(o) for o in orders)} samples"
    every = np.concatenate(orders)
    held = int(next(iter(lengths)))
    if drop_last:
        assert held % batch == 0
        assert len(np.unique(every)) == len(every), "a sample twice in one epoch"
    else:
        assert set(every.tolist()) == set(range(N)), "a sample lost"
    assert world * held >= (N // (world * batch)) * world * batch


def test_ranks_of_a_dataset_read_what_ranks_of_one_file_read(dataset: tuple[Path, Path]) -> None:
    one, manifest = dataset
    for rank in range(3):
        kw = {"rank": rank, "world_size": 3, "order": "quasi_random"}
        ids_one = np.concatenate([lab.numpy() for _, _, lab in make_loader(one, **KW, **kw)])
        ids_all = np.concatenate([lab.numpy() for _, _, lab in make_loader(manifest, **KW, **kw)])
        assert len(ids_one) == len(ids_all)
        assert len(np.unique(ids_all)) == len(ids_all)


def test_resume_mid_epoch_across_shards(dataset: tuple[Path, Path]) -> None:
    _, manifest = dataset
    kw = {**KW, "order": "quasi_random", "augment": PairAugment(hflip=0.5, brightness=0.2)}
    full = [(lab.tolist(), xa.clone()) for xa, _, lab in make_loader(manifest, **kw)]
    first = make_loader(manifest, **kw)
    it = iter(first)
    for _ in range(6):
        next(it)
    state = first.state_dict()
    assert state["batches_consumed"] == 6
    resumed = make_loader(manifest, **kw)
    resumed.load_state_dict(state)
    rest = [(lab.tolist(), xa.clone()) for xa, _, lab in resumed]
    assert [r[0] for r in rest] == [f[0] for f in full[6:]]
    assert all(
        np.array_equal(x.numpy(), y[1].numpy()) for x, y in zip([r[1] for r in rest], full[6:])
    )


def test_a_state_of_another_manifest_is_refused_by_name(tmp_path: Path) -> None:
    *_, shards = _two_shards(tmp_path, seed=3)
    manifest = tmp_path / "d.json"
    add_shards(manifest, shards[:1])
    loader = make_loader(manifest, batch_size=8)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    add_shards(manifest, shards[1:])  # appended: another dataset
    grown = make_loader(manifest, batch_size=8)
    with pytest.raises(ValueError, match=r"d\.json: cannot resume .* differs"):
        grown.load_state_dict(state)


def test_a_loader_keeps_reading_the_dataset_it_opened_after_an_append(tmp_path: Path) -> None:
    a, b, labels = make_arrays(64, seed=4)
    first = _write(tmp_path / "s0.beton", a[:40], b[:40], labels[:40])
    second = _write(tmp_path / "s1.beton", a[40:], b[40:], labels[40:])
    manifest = tmp_path / "d.json"
    add_shards(manifest, [first])
    old = make_loader(manifest, batch_size=8)
    before = DatasetManifest.load(manifest).to_bytes()
    add_shards(manifest, [second])
    assert DatasetManifest.load(manifest).num_samples == 64
    assert before != manifest.read_bytes()
    seen = [y for _, _, lab in old for y in lab.tolist()]
    assert sorted(seen) == list(range(40))
    new = [y for _, _, lab in make_loader(manifest, batch_size=8) for y in lab.tolist()]
    assert sorted(new) == list(range(64))


def test_a_shard_that_differs_from_its_entry_is_refused_by_name(tmp_path: Path) -> None:
    a, b, labels, shards = _two_shards(tmp_path, seed=5)
    manifest = tmp_path / "d.json"
    add_shards(manifest, shards)
    # s1 rewritten (renamed over, as the writer does) with other pixels: same size, new digest
    _write(tmp_path / "s1.beton", b[32:], a[32:], labels[32:])
    with pytest.raises(BetonError, match=r"s1\.beton: digest .* differs from .*d\.json"):
        make_loader(manifest, batch_size=8)
    os.remove(shards[0])
    with pytest.raises(BetonError, match=r"s0\.beton: no such file \(a shard of .*d\.json\)"):
        make_loader(manifest, batch_size=8)


def test_a_shard_changed_in_place_mid_epoch_is_named(tmp_path: Path) -> None:
    *_, shards = _two_shards(tmp_path, seed=6)
    manifest = tmp_path / "d.json"
    add_shards(manifest, shards)
    loader = make_loader(manifest, batch_size=4, batches_ahead=1)
    it = iter(loader)
    next(it)
    with open(shards[1], "r+b") as f:  # appended to in place: size and mtime change
        f.seek(0, os.SEEK_END)
        f.write(b"\0" * 16)
    with pytest.raises(LoaderError, match=r"s1\.beton: overwritten in place"):
        for _ in it:
            pass


def test_the_process_cache_is_refused_for_a_dataset_with_a_reason(
    dataset: tuple[Path, Path],
) -> None:
    _, manifest = dataset
    with pytest.raises(ValueError, match=r"all\.json: os_cache=False .* 3 shards"):
        make_loader(manifest, batch_size=8, os_cache=False)


def test_a_jpeg_dataset_of_shards_gives_the_bytes_of_one_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    n = 60
    a = rng.integers(0, 256, (n, 24, 24, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (n, 24, 24, 3), dtype=np.uint8)
    labels = np.arange(n)
    one = _write(tmp_path / "one.beton", a, b, labels, codec="jpeg", page_size=1 << 14)
    shards = [
        _write(
            tmp_path / f"s{k}.beton",
            a[lo:hi],
            b[lo:hi],
            labels[lo:hi],
            codec="jpeg",
            page_size=1 << 14,
        )
        for k, (lo, hi) in enumerate([(0, 25), (25, 60)])
    ]
    manifest = tmp_path / "d.json"
    add_shards(manifest, shards)
    aug = PairAugment(hflip=0.5, resized_crop=(16, 16))
    assert _by_label(manifest, augment=aug) == _by_label(one, augment=aug)


def test_the_datamodule_reads_a_manifest(dataset: tuple[Path, Path]) -> None:
    from ffcv_pairs import PairDataModule

    _, manifest = dataset
    dm = PairDataModule(train_path=str(manifest), val_path=str(manifest), batch_size=40)
    assert dm.schema().a.shape == (3, 12, 12)
    ids = [y for _, _, lab in dm.train_dataloader() for y in lab.tolist()]
    assert len(ids) == len(set(ids)) == N - N % 40
    assert sum(len(lab) for _, _, lab in dm.val_dataloader()) == N


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    pages=st.lists(st.sampled_from([4096, 8192]), min_size=6, max_size=6),
    world=st.integers(1, 4),
    batch=st.sampled_from([1, 5, 8]),
    drop_last=st.booleans(),
)
def test_any_shard_layout_deals_equal_batches_and_loses_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    pages: list[int],
    world: int,
    batch: int,
    drop_last: bool,
) -> None:
    root = tmp_path_factory.mktemp("layout")
    n = sum(sizes)
    a, b, labels = make_arrays(n, shape=(3, 4, 4), seed=n)
    cuts = np.concatenate([[0], np.cumsum(sizes)])
    shards = [
        _write(root / f"s{k}.beton", a[lo:hi], b[lo:hi], labels[lo:hi], page_size=pages[k])
        for k, (lo, hi) in enumerate(itertools.pairwise(cuts))
    ]
    manifest = root / "d.json"
    merge_parts(shards, manifest).save(manifest)
    reader = JoinedReader(manifest)
    assert np.array_equal(reader.image_pointers("A") >= 0, np.ones(n, bool))
    index = PageIndex.build(reader)
    assert sorted(index.samples.tolist()) == list(range(n))
    if drop_last and n < world * batch:
        return  # the loader refuses this (a rank's share below one batch)
    orders = [
        epoch_order(index, OrderSpec("quasi_random", batch, 1, r, world, drop_last, 2), 0)
        for r in range(world)
    ]
    assert len({len(o) for o in orders}) == 1
    every = np.concatenate(orders)
    if drop_last:
        assert len(np.unique(every)) == len(every) and len(every) > n - world * batch
    else:
        assert set(every.tolist()) == set(range(n))
    data = make_loader(manifest, batch_size=batch, order="sequential", drop_last=False)
    got = np.concatenate([xa.clone().numpy() for xa, _, _ in data])
    assert np.array_equal(got, a)  # every shard's bytes, in manifest order


def test_the_watch_looks_at_the_shards_a_batch_reads(tmp_path: Path) -> None:
    from ffcv_pairs.load.truncation import BetonChangedError, FileWatch

    files = [tmp_path / f"f{k}" for k in range(3)]
    for f in files:
        f.write_bytes(b"x" * 100)
    watch = FileWatch(files, np.array([0, 10, 20, 30]))
    with open(files[1], "ab") as f:
        f.write(b"y")
    watch.check(np.array([0, 5, 25]))  # shards 0 and 2 only: not 1's business
    with pytest.raises(BetonChangedError, match=r"f1: overwritten in place"):
        watch.check(np.array([3, 12]))
    with pytest.raises(BetonChangedError, match=r"f1: overwritten in place"):
        watch.check()  # no ids: every file
    watch.close()


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A manifest of two shards of 32 pairs (left as written: tests write their copies)."""
    root = tmp_path_factory.mktemp("hostile")
    manifest = root / "d.json"
    merge_parts(_two_shards(root, seed=11)[3], manifest).save(manifest)
    return manifest


def _listing(manifest: Path, name: str, change) -> Path:
    body = json.loads(manifest.read_text())
    change(body)
    out = manifest.with_name(f"{name}.json")
    out.write_text(json.dumps(body))
    return out


def _dup(body: dict) -> None:
    body["shards"][1] = dict(body["shards"][0])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (_dup, r"shard 's0.beton' is listed twice\)$"),
        (
            lambda b: b["shards"][0].update(samples=10**30) or b.update(samples=10**30 + 32),
            r"shard 's0.beton': samples must be an integer in \[1, 4611686018427387904\], got 1",
        ),
        (
            lambda b: [e.update(samples=2**62) for e in b["shards"]] and b.update(samples=2**63),
            r"9223372036854775808 samples, more than 4611686018427387904",
        ),
        (
            lambda b: b["shards"][0].update(part="x"),
            r"shard 's0.beton': part must be null or an object with integers index, count, first",
        ),
    ],
    ids=["twice", "huge", "total", "part"],
)
def test_a_manifest_that_lists_a_shard_twice_or_lies_is_refused(
    two_shards: Path, change, match: str, request: pytest.FixtureRequest
) -> None:
    bad = _listing(two_shards, request.node.callspec.id, change)  # before: read twice, traceback
    with pytest.raises(BetonError, match=f"^{bad}: not a readable dataset manifest \\({match}"):
        DatasetManifest.load(bad)
    with pytest.raises(BetonError, match=f"^{bad}: not a readable dataset manifest"):
        make_loader(bad, batch_size=8)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "Expecting property name"),
        ("[1, 2]", "format 'list', expected 'ffcv-pairs-dataset/1'"),
        ('{"format": "x/1"}', "format 'x/1', expected 'ffcv-pairs-dataset/1'"),
    ],
)
def test_a_json_file_that_is_no_manifest_is_not_read_as_a_beton(
    tmp_path: Path, text: str, match: str
) -> None:
    path = tmp_path / "d.json"
    path.write_text(text)  # before: "too small to be a .beton", "not a .beton (format version"
    with pytest.raises(BetonError, match=f"^{path}: not a readable dataset manifest \\({match}"):
        make_loader(path, batch_size=8)


def test_a_sidecar_given_as_a_dataset_is_named_as_one(two_shards: Path) -> None:
    sidecar = two_shards.with_name("s0.beton.json")
    sidecar_hint = r"format 'ffcv-pairs-manifest/2': a \.beton's sidecar; give the \.beton\)$"
    with pytest.raises(BetonError, match=sidecar_hint):
        make_loader(sidecar, batch_size=8)
