"""The node cache's plan and eviction (load/cache_plan.py), as pure functions: Belady's rule
misses no more than the best of all eviction choices (brute force, shards of one size),
never evicts a pinned shard, frees enough with the shards used furthest ahead; next uses,
the bytes two steps need and a plan's shards each against their definition."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ffcv_pairs.load.cache_plan import (
    NEVER,
    Plan,
    choose_victims,
    merge_plans,
    needed_bytes,
    next_uses,
    parse_bytes,
    plan_of,
)


def _plan(steps: list[list[int]]) -> Plan:
    ptr = np.cumsum([0] + [len(set(s)) for s in steps]).astype(np.int64)
    flat = [k for s in steps for k in sorted(set(s))]
    return Plan(ptr, np.asarray(flat, dtype=np.int64))


def _belady_misses(requests: list[int], slots: int) -> int:
    """Misses of a cache of ``slots`` unit shards that evicts by choose_victims."""
    plan = _plan([[k] for k in requests])
    held: set[int] = set()
    misses = 0
    for step, k in enumerate(requests):
        if k in held:
            continue
        misses += 1
        uses = next_uses(plan, step, max(requests) + 1)
        victims = choose_victims({j: 1 for j in held}, [], slots - len(held), 1, uses)
        assert victims is not None
        held -= set(victims)
        held.add(k)
    return misses


def _fewest_misses(requests: list[int], slots: int) -> int:
    """The least misses of any eviction choice (demand fetching), by exhaustive search."""

    @functools.cache
    def best(i: int, held: frozenset[int]) -> int:
        if i == len(requests):
            return 0
        k = requests[i]
        if k in held:
            return best(i + 1, held)
        if len(held) < slots:
            return 1 + best(i + 1, held | {k})
        return 1 + min(best(i + 1, (held - {v}) | {k}) for v in held)

    return best(0, frozenset())


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=14),
    st.integers(1, 4),
)
def test_belady_misses_no_more_than_the_best_choice(requests: list[int], slots: int) -> None:
    assert _belady_misses(requests, slots) == _fewest_misses(requests, slots)


def test_belady_beats_least_recently_used_on_a_loop() -> None:
    # A loop one longer than the cache: LRU misses every time; Belady keeps most.
    requests = [0, 1, 2, 3] * 4
    assert _fewest_misses(requests, 3) == _belady_misses(requests, 3) == 8


cached_st = st.dictionaries(st.integers(0, 9), st.integers(1, 50), max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    cached_st,
    st.sets(st.integers(0, 9)),
    st.integers(-20, 40),
    st.integers(1, 120),
    st.lists(st.integers(0, 30) | st.just(int(NEVER)), min_size=10, max_size=10),
)
def test_victims_are_unpinned_enough_and_used_furthest_ahead(
    cached: dict[int, int], pinned: set[int], free: int, need: int, uses: list[int]
) -> None:
    arr = np.asarray(uses, dtype=np.int64)
    victims = choose_victims(cached, pinned, free, need, arr)
    candidates = [k for k in cached if k not in pinned]
    if need <= free:
        assert victims == []
        return
    if free + sum(cached[k] for k in candidates) < need:
        assert victims is None
        return
    assert victims is not None and len(set(victims)) == len(victims)
    assert not set(victims) & pinned and set(victims) <= set(cached)
    assert free + sum(cached[k] for k in victims) >= need
    assert free + sum(cached[k] for k in victims[:-1]) < need  # none more than needed
    kept = [k for k in candidates if k not in victims]
    for v in victims:
        for k in kept:
            assert (arr[v], v) > (arr[k], k)  # furthest first, higher shard on a tie


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), max_size=4), max_size=12), st.integers(0, 14))
def test_next_uses_are_the_first_step_from_now(steps: list[list[int]], now: int) -> None:
    uses = next_uses(_plan(steps), now, 7)
    for k in range(7):
        later = [s for s in range(now, len(steps)) if k in steps[s]]
        assert uses[k] == (later[0] if later else NEVER)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 5), max_size=4), max_size=10),
    st.lists(st.integers(1, 1000), min_size=6, max_size=6),
)
def test_needed_bytes_is_the_largest_two_steps(steps: list[list[int]], sizes: list[int]) -> None:
    want = 0
    for s in range(len(steps)):
        both = set(steps[s]) | (set(steps[s + 1]) if s + 1 < len(steps) else set())
        want = max(want, sum(sizes[k] for k in both))
    assert needed_bytes(_plan(steps), sizes) == want


def test_plans_map_ids_to_shards_and_merge_by_step() -> None:
    offsets = np.array([0, 10, 25, 40])
    plan = plan_of([np.array([0, 9, 24]), np.array([39, 10]), np.array([5])], offsets)
    assert [plan.at(s).tolist() for s in range(plan.steps)] == [[0, 1], [1, 2], [0]]
    other = plan_of([np.array([30]), np.array([1])], offsets)
    merged = merge_plans([plan, other])
    assert [merged.at(s).tolist() for s in range(merged.steps)] == [[0, 1, 2], [0, 1, 2], [0]]


@pytest.mark.parametrize(
    ("given_value", "want"),
    [(123, 123), ("100GB", 100 * 10**9), ("512MiB", 512 * 2**20), ("1.5 KB", 1500), ("7", 7)],
)
def test_sizes_parse(given_value: int | str, want: int) -> None:
    assert parse_bytes("cache_limit", given_value) == want


@pytest.mark.parametrize("bad", ["lots", "10 XB", 0, -5, "0GB", "", 1.5, True])
def test_bad_sizes_are_refused_by_name(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="cache_limit") as e:
        parse_bytes("cache_limit", bad)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.lists(st.integers(0, 39), max_size=6), max_size=6), min_size=1, max_size=3)
)
def test_plans_and_their_merge_follow_the_definition(ranks: list[list[list[int]]]) -> None:
    offsets = np.array([0, 7, 8, 20, 40])  # shards of 7, 1, 12 and 20 samples
    plans = [plan_of([np.asarray(b, dtype=np.int64) for b in rank], offsets) for rank in ranks]
    for rank, plan in zip(ranks, plans):
        want = [sorted({int(np.searchsorted(offsets, i, "right")) - 1 for i in b}) for b in rank]
        assert [plan.at(s).tolist() for s in range(plan.steps)] == want
    merged = merge_plans(plans)
    steps = max(len(rank) for rank in ranks)
    assert merged.steps == steps
    for s in range(steps):
        union = set().union(*(p.at(s).tolist() for p in plans if s < p.steps))
        assert merged.at(s).tolist() == sorted(union)
