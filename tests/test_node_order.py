"""Node-local order (load/node_order.py, ``partition="node"``): each node reads only its
canonical buckets, the same every epoch; every rank gets equal batches; nothing is lost or
read twice beyond what drop_last and padding say; the loader refuses what it cannot do."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import write_small_beton
from hypothesis import given, settings
from hypothesis import strategies as st

from ffcv_pairs import make_loader
from ffcv_pairs.load.index import PageIndex
from ffcv_pairs.load.node_order import bucket_bounds, node_index, rank_order, rank_samples
from ffcv_pairs.load.order import OrderSpec


def _index(counts: list[int]) -> PageIndex:
    """Pages holding ``counts`` samples, ids in page order."""
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return PageIndex(
        pages=np.arange(len(counts), dtype=np.int64),
        starts=starts,
        samples=np.arange(int(starts[-1]), dtype=np.int64),
    )


def _spec(rank: int, nodes: int, per_node: int, canonical: int, **kw) -> OrderSpec:
    return OrderSpec(
        kw.pop("kind", "quasi_random"),
        kw.pop("batch", 4),
        kw.pop("seed", 3),
        rank,
        nodes * per_node,
        kw.pop("drop_last", True),
        2,
        "node",
        nodes,
        canonical,
        kw.pop("node_window", False),
        kw.pop("shard_pages", ()),
    )


@settings(max_examples=150, deadline=None)
@given(
    counts=st.lists(st.integers(1, 9), min_size=8, max_size=60),
    nodes=st.integers(1, 4),
    per_node=st.integers(1, 3),
    buckets_each=st.integers(1, 3),
    batch=st.sampled_from([1, 3, 4]),
    drop_last=st.booleans(),
    kind=st.sampled_from(["quasi_random", "random", "sequential", "node_window"]),
    epoch=st.integers(0, 4),
    shard=st.integers(1, 5),
)
def test_each_node_reads_its_buckets_in_equal_batches(
    counts: list[int],
    nodes: int,
    per_node: int,
    buckets_each: int,
    batch: int,
    drop_last: bool,
    kind: str,
    epoch: int,
    shard: int,
) -> None:
    index = _index(counts)
    canonical = nodes * buckets_each
    kw = {"batch": batch, "drop_last": drop_last, "kind": kind}
    if kind == "node_window":  # shards of ``shard`` pages
        kw.update(kind="quasi_random", node_window=True)
        kw["shard_pages"] = tuple(range(0, len(counts), shard))
    specs = [_spec(r, nodes, per_node, canonical, **kw) for r in range(nodes * per_node)]
    held = [set(node_index(index, specs[0], p).samples.tolist()) for p in range(nodes)]
    assert set().union(*held) == set(range(index.num_samples)), "buckets cover every sample"
    assert sum(len(h) for h in held) == index.num_samples, "buckets are disjoint"
    try:
        orders = [rank_order(index, s, epoch) for s in specs]
    except ValueError as e:  # a node too small for the others' share: refused by name
        assert "fewer than the" in str(e) or "holds none" in str(e)
        return
    assert len({len(o) for o in orders}) == 1, "every rank reads the same number"
    assert len(orders[0]) == rank_samples(index, specs[0])
    for rank, order in enumerate(orders):
        assert set(order.tolist()) <= held[rank // per_node], f"rank {rank} left its node"
    every = np.concatenate(orders)
    if drop_last:
        assert len(every) % batch == 0 or not len(every)
        assert len(np.unique(every)) == len(every), "a sample twice in one epoch"
    else:
        per_node_reads = [
            set(np.concatenate(orders[p * per_node : (p + 1) * per_node]).tolist())
            for p in range(nodes)
        ]
        assert per_node_reads == held, "without drop_last every sample of a node is read"


def test_buckets_stay_put_when_the_node_count_changes() -> None:
    index = _index([5] * 48)
    bounds = bucket_bounds(index, 12)
    assert list(bounds) == list(range(0, 49, 4))  # 12 buckets of 4 pages
    two = [set(node_index(index, _spec(0, 2, 1, 12), p).samples.tolist()) for p in range(2)]
    four = [set(node_index(index, _spec(0, 4, 1, 12), p).samples.tolist()) for p in range(4)]
    assert two[0] == four[0] | four[1] and two[1] == four[2] | four[3]


def test_epochs_differ_within_a_node_and_repeat_exactly() -> None:
    index = _index([6] * 40)
    spec = _spec(1, 2, 2, 4)
    a, b = rank_order(index, spec, 0), rank_order(index, spec, 1)
    assert not np.array_equal(a, b) and np.array_equal(a, rank_order(index, spec, 0))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"nodes": 3, "world_size": 4}, "world_size 4 is not a whole number of ranks on each of 3"),
        ({"nodes": 2, "canonical_nodes": 3}, "canonical_nodes 3 is not a multiple of the 2 nodes"),
        ({"partition": "nodes"}, "partition 'nodes' is not one of"),
    ],
)
def test_a_partition_that_does_not_divide_is_refused(kw: dict, match: str) -> None:
    base = {"world_size": 4, "nodes": 2, "canonical_nodes": 2, "partition": "node"}
    with pytest.raises(ValueError, match=match):
        OrderSpec(**{**base, **kw})


@pytest.fixture
def beton(tmp_path: Path) -> Path:
    return write_small_beton(tmp_path, n=400, shape=(3, 8, 8))[0]


def _ids(loader) -> list[int]:
    return [y for _, _, lab in loader for y in lab.tolist()]


def test_the_loader_keeps_each_node_on_its_half(beton: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # 4 ranks: 2 nodes of 2
    kw = {"batch_size": 8, "partition": "node", "world_size": 4, "seed": 1}
    reads = [_ids(make_loader(beton, rank=r, **kw)) for r in range(4)]
    assert len({len(r) for r in reads}) == 1
    first, second = set(reads[0] + reads[1]), set(reads[2] + reads[3])
    assert not first & second
    assert max(first) < min(second), "node 0 reads the first stretch of the file"
    assert len(first) + len(second) > 400 - 4 * 8, "fewer than a batch a rank dropped"


def test_a_node_local_epoch_resumes_on_its_world_and_on_another(beton: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # 2 ranks: 2 nodes of 1
    kw = {"batch_size": 8, "partition": "node", "canonical_nodes": 4, "seed": 4}
    full = _ids(make_loader(beton, rank=1, world_size=2, **kw))
    firsts = [make_loader(beton, rank=r, world_size=2, **kw) for r in range(2)]
    its = [iter(f) for f in firsts]
    done = [y for it in its for _ in range(3) for y in next(it)[2].tolist()]
    state = firsts[0].state_dict()
    resumed = make_loader(beton, rank=1, world_size=2, **kw)
    resumed.load_state_dict(state)
    assert done[24:] + _ids(resumed) == full, "the same world continues exactly"
    # 4 nodes of 1 now: each node reads what is left of its own two buckets
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    rest = []
    for rank in range(4):
        loader = make_loader(beton, rank=rank, world_size=4, **kw)
        loader.load_state_dict(state)
        rest.append(_ids(loader))
    assert len({len(r) for r in rest}) == 1
    read = done + [y for r in rest for y in r]
    assert len(set(read)) == len(read), "nothing read twice"
    assert len(read) > 400 - 4 * 8 - 2 * 8, "nothing lost but the drop_last cuts"
    assert max(rest[0] + rest[1]) < min(rest[2] + rest[3]), "the halves stay apart"
    with pytest.raises(ValueError, match="partition node over 4 buckets"):
        make_loader(beton, rank=0, world_size=2, batch_size=8, seed=4).load_state_dict(state)


@settings(max_examples=80, deadline=None)
@given(
    counts=st.lists(st.integers(1, 6), min_size=16, max_size=48),
    worlds=st.lists(
        st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 3), st.sampled_from([2, 3])),
        min_size=2,
        max_size=3,
    ),
    consumed=st.lists(st.integers(0, 4), min_size=3, max_size=3),
    drop_last=st.booleans(),
    epoch=st.integers(0, 3),
    node_window=st.booleans(),
)
def test_elastic_resume_keeps_each_node_on_its_buckets(
    counts: list[int],
    worlds: list[tuple[int, int, int]],
    consumed: list[int],
    drop_last: bool,
    epoch: int,
    node_window: bool,
) -> None:
    """Run an epoch on world after world (nodes, ranks per node, batch), each consuming a
    few batches, then read the rest: equal lengths, each node within its buckets, nothing
    read twice (drop_last) or nothing left unread (without)."""
    from ffcv_pairs.load.elastic import Segment, resumed_order

    index = _index(counts)
    canonical = 4
    history: list[Segment] = []
    read: list[int] = []
    for k, (nodes, per_node, batch) in enumerate(worlds):
        specs = [
            _spec(
                r,
                nodes,
                per_node,
                canonical,
                batch=batch,
                drop_last=drop_last,
                node_window=node_window,
                shard_pages=(0, 5, 9),
            )
            for r in range(nodes * per_node)
        ]
        try:
            orders = [resumed_order(index, s, epoch, history) for s in specs]
        except ValueError as e:  # a node left too small for the others' share: named
            assert "samples" in str(e) or "holds none" in str(e)
            return
        assert len({len(o) for o in orders}) == 1, "equal lengths on every rank"
        held = [set(node_index(index, specs[0], p).samples.tolist()) for p in range(nodes)]
        for r, order in enumerate(orders):
            assert set(order.tolist()) <= held[r // per_node], f"world {k} rank {r} left its node"
        last = k == len(worlds) - 1
        take = len(orders[0]) if last else min(len(orders[0]), consumed[k] * batch)
        batches = take // batch if not last else 0
        if not last:
            take = batches * batch
            history.append(Segment(nodes * per_node, batch, drop_last, batches, nodes=nodes))
        for order in orders:
            read += order[:take].tolist()
    if drop_last:
        assert len(set(read)) == len(read), "a sample read twice in one epoch"
    else:
        assert set(read) == set(range(index.num_samples)), "a sample never read"


def test_the_multinode_config_asks_for_the_node_local_order(tmp_path: Path, monkeypatch) -> None:
    import sys

    from ffcv_pairs.train import cli_main

    monkeypatch.setattr(sys, "argv", ["train.py"])
    config = Path(__file__).parents[1] / "configs" / "multinode.yaml"
    cpu = ["--trainer.accelerator=cpu", "--trainer.devices=1", "--trainer.num_nodes=1"]
    cpu += ["--trainer.strategy=auto", "--trainer.precision=32", "--trainer.callbacks=[]"]
    cli = cli_main(
        ["--config", str(config), *cpu, f"--trainer.default_root_dir={tmp_path}"], run=False
    )
    options = cli.datamodule.loader_options
    assert options["partition"] == "node" and options["canonical_nodes"] == 8


def test_a_world_of_other_nodes_is_not_continued_as_the_same() -> None:
    from ffcv_pairs.load.elastic import Segment, resume_point

    ran = Segment(4, 8, True, 5, nodes=2)
    history, skip = resume_point([ran], Segment(4, 8, True, nodes=4))
    assert history == (ran,) and skip == 0, "4 ranks on 4 nodes deal otherwise than on 2"
    assert resume_point([ran], Segment(4, 8, True, nodes=2)) == ((), 5)
    assert (
        Segment.from_dict({"world_size": 4, "batch_size": 8, "drop_last": True, "batches": 1}).nodes
        == 1
    )


@pytest.mark.parametrize(
    ("env", "value", "world", "match"),
    [
        ("LOCAL_WORLD_SIZE", "4", 6, "world_size 6 is not a whole number of nodes of 4 ranks"),
        ("LOCAL_WORLD_SIZE", "8", 2, "world_size 2 is not a whole number of nodes of 8 ranks"),
        ("SLURM_NTASKS_PER_NODE", "3", 4, "world_size 4 is not a whole number of nodes of 3"),
        (
            "LOCAL_WORLD_SIZE",
            "abc",
            2,
            "LOCAL_WORLD_SIZE='abc': the ranks on this node, a positive",
        ),
        ("LOCAL_WORLD_SIZE", "0", 2, "LOCAL_WORLD_SIZE='0': the ranks on this node, a positive"),
        ("SLURM_NTASKS_PER_NODE", "-2", 2, "SLURM_NTASKS_PER_NODE='-2': the ranks on this node"),
    ],
)
def test_ranks_that_make_no_whole_nodes_are_refused_by_name(
    beton: Path, monkeypatch, env: str, value: str, world: int, match: str
) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    monkeypatch.setenv(env, value)  # before: 6 ranks as 1 node of 6, "0" as 1 rank a node
    with pytest.raises(ValueError, match=re.escape(match)):
        make_loader(beton, batch_size=4, partition="node", rank=0, world_size=world)


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_node_without_samples_is_refused_on_every_rank_at_once(
    tmp_path: Path, monkeypatch, drop_last: bool
) -> None:
    path = write_small_beton(tmp_path, n=5)[0]  # one page: node 0's bucket holds it all
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    for rank in range(4):  # before: ranks 0..3 built, and rank 1 failed in its first epoch
        with pytest.raises(ValueError, match=r"^partition='node': node 1 of 4 holds none \("):
            make_loader(
                path, batch_size=1, partition="node", rank=rank, world_size=4, drop_last=drop_last
            )


def test_a_node_window_reads_a_few_shards_at_a_time() -> None:
    """With node_window the node's 4 ranks share one window over its pages shard by
    shard: two consecutive steps read 2-3 of the node's 6 shards, where a window a rank
    reads all 6 (what a node cache must hold, cache_plan.needed_bytes)."""
    from ffcv_pairs.load.cache_plan import merge_plans, needed_bytes, plan_of

    index = _index([4] * 120)  # 120 pages of 4; shards of 10 pages: 6 a node
    shard_pages, offsets = tuple(range(0, 120, 10)), np.arange(0, 481, 40)
    for node_window, most in ((False, 6), (True, 3)):
        needs = []
        for epoch in range(3):
            for node in range(2):
                plans = []
                for r in range(node * 4, node * 4 + 4):
                    kw = {"node_window": node_window, "shard_pages": shard_pages}
                    order = rank_order(index, _spec(r, 2, 4, 2, batch=4, **kw), epoch)
                    plans.append(plan_of(np.split(order, range(4, len(order), 4)), offsets))
                needs.append(needed_bytes(merge_plans(plans), np.ones(12, dtype=np.int64)))
        assert max(needs) == most, (node_window, needs)


def test_a_node_window_deals_the_nodes_stream_to_its_ranks_in_turn() -> None:
    """The node's stream holds each sample once and reads a shard's pages together (a
    window of one page: one run a shard); rank r takes its samples r, r + 2, ..."""
    from dataclasses import replace

    from ffcv_pairs.load.node_order import _local_spec, node_stream

    index = _index([4] * 40)  # 4 shards of 10 pages
    kw = {"node_window": True, "shard_pages": (0, 10, 20, 30)}
    spec = _spec(0, 1, 2, 1, batch=4, **kw)
    orders = [rank_order(index, replace(spec, rank=r), 1) for r in range(2)]
    stream = node_stream(index, _local_spec(spec, 0), 1)
    assert sorted(stream.tolist()) == list(range(160))
    assert orders[0].tolist() == stream[0::2].tolist()
    assert orders[1].tolist() == stream[1::2].tolist()
    one = node_stream(index, replace(_local_spec(spec, 0), window_pages=1), 1)
    shards = one // 40
    assert np.count_nonzero(np.diff(shards)) == 3, "a shard's pages are read together"
    assert stream.tolist() != node_stream(index, _local_spec(spec, 0), 2).tolist()
    with pytest.raises(ValueError, match="node_window shares a window among a node's ranks"):
        OrderSpec("random", 4, 0, 0, 2, True, 2, "node", 1, 1, True)
