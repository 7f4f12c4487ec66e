"""Weighted mixing of datasets (load/mixing.py): each epoch's counts per stream as their
definitions say, equal batches on every rank, the same list on every rank and run, elastic
resume across a mixture, and refusals by name."""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffcv_pairs import ArraySource, make_loader, write_pairs
from ffcv_pairs.format.joined import JoinedReader
from ffcv_pairs.format.merging import add_shards
from ffcv_pairs.load.elastic import EpochPosition
from ffcv_pairs.load.index import PageIndex
from ffcv_pairs.load.mixing import EpochSamples, Mixture, Stream, as_streams
from ffcv_pairs.load.order import OrderSpec, epoch_order

SIZES = (90, 40, 25)  # pairs in the three datasets
BASE = (0, 1000, 2000)  # dataset k's labels start here: a label says its source


def _write(path: Path, n: int, first_label: int) -> Path:
    rng = np.random.default_rng(first_label + n)
    a = rng.integers(0, 256, (n, 3, 6, 6), dtype=np.uint8)
    labels = np.arange(first_label, first_label + n)
    write_pairs(ArraySource(a, 255 - a, labels), path, workers=1, progress=False, page_size=4096)
    return path


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A manifest of two shards (90 pairs), a single file (40) and another manifest (25)."""
    root = tmp_path_factory.mktemp("mix")
    real = root / "real.json"
    add_shards(real, [_write(root / "r0.beton", 50, 0), _write(root / "r1.beton", 40, 50)])
    synthetic = _write(root / "synthetic.beton", SIZES[1], BASE[1])
    extra = root / "extra.json"
    add_shards(extra, [_write(root / "e0.beton", SIZES[2], BASE[2])])
    return [real, synthetic, extra]


def _source(label: int) -> int:
    return label // 1000


# -- the counts, from the definitions --------------------------------------------------


def test_proportions_share_out_the_epoch_exactly() -> None:
    mix = Mixture([Stream("a", proportion=0.7), Stream("b", proportion=0.3)], [50, 10], 101)
    assert mix.counts.tolist() == [71, 30]  # 70.7 and 30.3: the larger remainder gets one
    assert Mixture(
        [Stream("a", proportion=1), Stream("b", proportion=1)], [5, 7], None
    ).counts.tolist() == [6, 6]


def test_repeat_and_choose_count_per_stream() -> None:
    mix = Mixture([Stream("a", repeat=2.5), Stream("b", choose=7), Stream("c")], [10, 4, 3], None)
    assert mix.counts.tolist() == [25, 7, 3] and mix.epoch_size == 35


@pytest.mark.parametrize(
    ("streams", "epoch_size", "match"),
    [
        ([Stream("a", proportion=1.0), Stream("b")], None, "stream b has no proportion"),
        ([Stream("a", repeat=2)], 10, "epoch_size=10 goes with proportions"),
        ([Stream("a", proportion=1.0)], 0, "epoch_size must be a positive integer, got 0"),
    ],
)
def test_a_mixture_that_does_not_add_up_is_refused(
    streams: list[Stream], epoch_size: int | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        Mixture(streams, [10] * len(streams), epoch_size)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"proportion": 0.5, "repeat": 2}, r"give one of proportion, repeat or choose"),
        ({"proportion": -1}, "proportion must be a positive finite number, got -1"),
        ({"choose": 2.5}, "choose must be a positive integer, got 2.5"),
    ],
)
def test_a_bad_stream_is_refused_by_name(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=f"stream x.json: {match}"):
        Stream("x.json", **kwargs)


def test_streams_from_pairs_paths_and_yaml_dicts() -> None:
    got = as_streams([("a.json", 0.7), "b.beton", {"path": "c.json", "choose": 5}])
    assert got == [Stream("a.json", 0.7), Stream("b.beton"), Stream("c.json", choose=5)]
    with pytest.raises(TypeError, match=r"streams\[1\] must be a Stream"):
        as_streams([("a.json", 0.7), 3])


def test_an_epoch_takes_whole_copies_and_a_fresh_distinct_rest() -> None:
    mix = Mixture([Stream("a", repeat=2.3), Stream("b", choose=3)], [10, 8], None)
    seen = []
    for epoch in range(6):
        ids = mix.epoch_samples(seed=4, epoch=epoch)
        assert np.array_equal(ids, mix.epoch_samples(seed=4, epoch=epoch)), "pure"
        a, b = Counter(ids[ids < 10].tolist()), Counter(ids[ids >= 10].tolist())
        assert sum(a.values()) == 23 and sum(b.values()) == 3
        assert set(a) == set(range(10)) and sorted(Counter(a.values()).items()) == [(2, 7), (3, 3)]
        assert len(b) == 3 and all(10 <= i < 18 for i in b)
        seen.append(tuple(sorted(b)))
    assert len(set(seen)) > 1, "the partial draw changes with the epoch"


# -- dealt to ranks --------------------------------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    weights=st.lists(st.integers(1, 9), min_size=3, max_size=3),
    epoch_size=st.integers(20, 400),
    world=st.integers(1, 5),
    batch=st.sampled_from([1, 4, 7]),
    drop_last=st.booleans(),
    epoch=st.integers(0, 3),
)
def test_every_rank_gets_equal_batches_and_each_stream_its_count(
    datasets: list[Path],
    weights: list[int],
    epoch_size: int,
    world: int,
    batch: int,
    drop_last: bool,
    epoch: int,
) -> None:
    reader = JoinedReader(datasets)
    streams = [Stream(p, proportion=w) for p, w in zip(datasets, weights)]
    mix = Mixture(streams, SIZES, epoch_size)
    samples = EpochSamples(PageIndex.build(reader), reader, mix, seed=3)
    assert samples.num_samples == epoch_size
    index = samples.index(epoch)
    orders = [
        samples.ids(
            epoch,
            epoch_order(index, OrderSpec("quasi_random", batch, 3, r, world, drop_last, 2), epoch),
        )
        for r in range(world)
    ]
    assert len({len(o) for o in orders}) == 1, f"ranks read {[len(o) for o in orders]}"
    every = Counter(np.concatenate(orders).tolist())
    listed = Counter(mix.epoch_samples(3, epoch).tolist())
    if drop_last:
        assert not every - listed, "a sample read more often than the epoch lists it"
        assert sum(every.values()) > epoch_size - world * batch
    else:
        assert not listed - every, "a listed sample was not read"
    per_source = Counter(
        int(np.searchsorted(reader.dataset_offsets, i, "right")) - 1 for i in listed.elements()
    )
    assert [per_source[k] for k in range(3)] == mix.counts.tolist()


# -- through the loader ----------------------------------------------------------------


def _labels(loader) -> list[int]:
    return [y for _, _, lab in loader for y in lab.tolist()]


def test_the_loader_reads_each_source_by_its_weight(datasets: list[Path]) -> None:
    streams = [(datasets[0], 0.6), (datasets[1], 0.3), (datasets[2], 0.1)]
    loader = make_loader(streams, epoch_size=200, batch_size=10, seed=1, drop_last=False)
    assert len(loader) == 20
    for epoch in range(2):
        got = Counter(_source(y) for y in _labels(loader))
        assert [got[k] for k in range(3)] == [120, 60, 20], f"epoch {epoch}"
    again = make_loader(streams, epoch_size=200, batch_size=10, seed=1, drop_last=False)
    assert _labels(again) == _labels(
        make_loader(streams, epoch_size=200, batch_size=10, seed=1, drop_last=False)
    )


def test_ranks_of_a_mixture_get_the_same_number_of_batches(datasets: list[Path]) -> None:
    streams = [
        Stream(datasets[0], repeat=0.5),
        Stream(datasets[1], repeat=2),
        Stream(datasets[2], choose=9),
    ]
    lengths = []
    everything: Counter[int] = Counter()
    for rank in range(3):
        loader = make_loader(streams, batch_size=8, rank=rank, world_size=3, seed=2)
        labels = _labels(loader)
        lengths.append((len(loader), len(labels)))
        everything.update(labels)
    assert len(set(lengths)) == 1
    assert max(everything[y] for y in range(BASE[1], BASE[1] + SIZES[1])) <= 2


def test_a_mixture_resumes_mid_epoch_on_another_world(datasets: list[Path]) -> None:
    streams = [(datasets[0], 2.0), (datasets[1], 1.0)]
    kw = {"epoch_size": 120, "batch_size": 6, "seed": 7, "drop_last": True}
    first = make_loader(streams, **kw)
    it = iter(first)
    done = [y for _ in range(5) for y in next(it)[2].tolist()]
    state = first.state_dict()
    rest = []
    for rank in range(2):
        resumed = make_loader(streams, **kw, rank=rank, world_size=2)
        resumed.load_state_dict(state)
        rest += _labels(resumed)
    whole = Counter(done + rest)
    listed = Counter(_labels(make_loader(streams, **kw)))
    assert not whole - listed, "a sample read more often than the epoch lists it"
    # all the epoch had left, but for fewer than world x batch (drop_last on 2 ranks)
    assert 0 <= sum((listed - whole).values()) < 2 * 6
    other = make_loader([(datasets[0], 1.0), (datasets[1], 1.0)], **kw)
    with pytest.raises(ValueError, match=r"cannot resume .* indices"):
        other.load_state_dict(state)


def test_a_mixture_loader_pickles(datasets: list[Path]) -> None:
    streams = [(datasets[0], 1.0), (datasets[2], 1.0)]
    loader = make_loader(streams, epoch_size=50, batch_size=5, seed=9)
    copy = pickle.loads(pickle.dumps(loader))
    assert _labels(copy) == _labels(make_loader(streams, epoch_size=50, batch_size=5, seed=9))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epoch_size": 10}, "epoch_size=10 goes with a mixture"),
        ({"indices": [0, 1]}, "indices selects samples of one dataset"),
    ],
)
def test_mixture_options_out_of_place_are_refused(
    datasets: list[Path], kwargs: dict, match: str
) -> None:
    source = datasets[1] if "epoch_size" in kwargs else [(datasets[0], 1.0)]
    with pytest.raises(ValueError, match=match):
        make_loader(source, batch_size=4, **kwargs)


def test_datasets_of_different_schemas_are_not_mixed(datasets: list[Path], tmp_path: Path) -> None:
    a = np.zeros((8, 3, 7, 7), dtype=np.uint8)
    other = tmp_path / "other.beton"
    write_pairs(ArraySource(a, a, np.arange(8)), other, workers=1, progress=False, page_size=4096)
    with pytest.raises(ValueError, match=r"other\.beton holds .* one schema"):
        make_loader([(datasets[1], 1.0), (other, 1.0)], batch_size=4)


def test_unused_epoch_position_helper_is_consistent(datasets: list[Path]) -> None:
    # EpochPosition over a mixture's index deals positions, which map back to ids.
    reader = JoinedReader(datasets)
    mix = Mixture([Stream(p, repeat=1.5) for p in datasets], SIZES, None)
    samples = EpochSamples(PageIndex.build(reader), reader, mix, seed=0)
    pos = EpochPosition.start(samples.index(1), OrderSpec("random", 4, 0, 0, 1, False, 2), 1)
    assert sorted(samples.ids(1, pos.order).tolist()) == sorted(mix.epoch_samples(0, 1).tolist())


def test_the_datamodule_trains_on_a_mixture_from_yaml(
    datasets: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from ffcv_pairs import PairDataModule
    from ffcv_pairs.train import cli_main

    monkeypatch.setattr(sys, "argv", ["train.py"])  # pytest's own flags are not the CLI's
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data:\n  train_streams:\n    - path: {datasets[0]}\n      proportion: 0.75\n"
        f"    - path: {datasets[1]}\n      proportion: 0.25\n  epoch_size: 80\n"
        f"  val_path: {datasets[2]}\n  batch_size: 8\n"
        f"trainer:\n  logger: false\n  default_root_dir: {tmp_path}\n"
    )
    dm = cli_main(["--config", str(config)], run=False).datamodule
    got = Counter(_source(y) for y in _labels(dm.train_dataloader()))
    assert [got[0], got[1], got[2]] == [60, 20, 0]
    assert sorted(_labels(dm.val_dataloader())) == list(range(BASE[2], BASE[2] + SIZES[2]))
    with pytest.raises(ValueError, match="give train_path or train_streams, not both"):
        PairDataModule(str(datasets[1]), train_streams=[Stream(datasets[0])], batch_size=4)
    with pytest.raises(ValueError, match="epoch_size=5 goes with train_streams"):
        PairDataModule(str(datasets[1]), epoch_size=5, batch_size=4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"proportion": float("inf")}, "proportion must be a positive finite number, got inf"),
        ({"repeat": float("inf")}, "repeat must be a positive finite number, got inf"),
        ({"proportion": True}, "proportion must be a positive finite number, got True"),
        ({"repeat": np.bool_(True)}, "repeat must be a positive finite number, got True"),
        ({"proportion": np.float32("nan")}, "proportion must be a positive finite number, got nan"),
        ({"choose": np.float64(3.0)}, "choose must be a positive integer, got 3.0"),
    ],
)
def test_an_infinite_or_boolean_weight_is_refused_by_name(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=f"^stream x.json: {match}$"):
        Stream("x.json", **kwargs)


def test_numpy_weights_count_as_their_numbers() -> None:
    streams = [Stream("a", proportion=np.float32(0.7)), Stream("b", proportion=np.float64(0.3))]
    assert Mixture(streams, [50, 10], 101).counts.tolist() == [71, 30]
    mix = Mixture(
        [Stream("a", repeat=np.float32(2.5)), Stream("b", choose=np.int64(7))], [10, 4], None
    )
    assert mix.counts.tolist() == [25, 7]


def test_a_dataset_twice_in_a_mixture_or_no_path_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"streams\[2\]: .*/a.json is also streams\[0\]"):
        as_streams([(tmp_path / "a.json", 0.5), ("b.beton", 1.0), (f"{tmp_path}/./a.json", 0.5)])
    no_path = r"^streams\[0\]: stream path must be a file path, got None$"
    with pytest.raises(TypeError, match=no_path):
        as_streams([{"path": None, "proportion": 1.0}])


def test_a_repeat_too_large_for_an_epoch_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"stream a\.json: takes 1e\+21 samples an epoch"):
        Mixture([Stream("a.json", repeat=1e20)], [10], None)
    with pytest.raises(ValueError, match=r"epoch_size=1099511627777 is more than 2\*\*40"):
        Mixture([Stream("a.json", proportion=1.0)], [10], 2**40 + 1)
