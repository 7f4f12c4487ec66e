"""``open_source`` (and every other source) is a dataset: ``len(src)``, ``src[i]`` with
negative ``i`` as for a list, iteration; a bad index says what it got and what is allowed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays

from ffcv_pairs import ArraySource, IndexedSource, PairSource, open_source

N, SHAPE = 9, (3, 4, 5)


def _as_numpy(value) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


@pytest.fixture(params=["per-sample", "batched", "arrays", "indexed"])
def source(request, pairs_dir: Callable[..., Path]) -> PairSource:
    kind = request.param
    if kind in ("per-sample", "batched"):
        return open_source(pairs_dir(kind, n=N, shape=SHAPE), "train")
    a, b, labels = make_arrays(N, SHAPE)
    if kind == "arrays":
        return ArraySource(a, b, labels)
    return IndexedSource([(a[i], b[i], int(labels[i])) for i in range(N)])


def test_items_are_the_pairs_written(source: PairSource) -> None:
    """The expected pairs come from ``make_arrays``, which made the files."""
    a, b, labels = make_arrays(N, SHAPE)
    assert len(source) == N
    for i in [0, 4, N - 1, -1, -N, np.int64(3), np.uint8(2)]:
        got = source[i]
        assert len(got) == 3
        want = int(i) % N
        np.testing.assert_array_equal(_as_numpy(got[0]), a[want])
        np.testing.assert_array_equal(_as_numpy(got[1]), b[want])
        assert int(_as_numpy(got[2])) == labels[want]
        for part, same in zip(got, source.read(want)):  # what read() returns, as it returns it
            assert type(part) is type(same)


def test_iteration_gives_every_pair_in_order(source: PairSource) -> None:
    a, _, labels = make_arrays(N, SHAPE)
    items = list(source)
    assert len(items) == N
    for (got_a, _, got_label), want_a, want_label in zip(items, a, labels):
        np.testing.assert_array_equal(_as_numpy(got_a), want_a)
        assert int(_as_numpy(got_label)) == want_label


@pytest.mark.parametrize("i", [N, N + 5, -N - 1, 2**70])
def test_out_of_range_names_the_index_and_the_length(source: PairSource, i: int) -> None:
    with pytest.raises(IndexError, match=rf"index {i} is out of range for {N} samples"):
        source[i]


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("1", r"'1' \(str\)"),
        (1.0, r"1\.0 \(float\)"),
        (True, r"True \(bool\)"),
        (np.bool_(False), r"False \(bool_?\)$"),  # no numpy repr (np.False_)
        (slice(0, 2), r"slice\(0, 2, None\) \(slice\)"),
        (None, r"None \(NoneType\)"),
        ((1, 2), r"\(1, 2\) \(tuple\)"),
    ],
)
def test_a_key_that_is_not_an_integer_is_named(source: PairSource, key, shown: str) -> None:
    with pytest.raises(TypeError, match=rf"index must be an integer, got {shown}"):
        source[key]
