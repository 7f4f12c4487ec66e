"""Mid-epoch resume of the loader on its own (the Lightning path is in test_lightning.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs


@pytest.fixture
def path(tmp_path: Path) -> Path:
    a, b, labels = make_arrays(500, (3, 8, 8))
    p = tmp_path / "r.beton"
    write_pairs(ArraySource(a, b, labels), p, page_size=4096, progress=False)
    return p


def _ids(batches) -> list[int]:
    return [int(i) for _, _, lab in batches for i in lab]


@pytest.mark.parametrize("order", ["quasi_random", "random", "sequential"])
def test_resume_mid_epoch_gives_the_same_sequence(path: Path, order: str) -> None:
    kw = {
        "batch_size": 16,
        "order": order,
        "seed": 3,
        "window_bytes": 8192,
        "augment": PairAugment(hflip=0.5, brightness=0.2),
    }
    full = make_loader(path, **kw)
    expected, images = [], []
    for _ in range(3):
        for xa, _, lab in full:
            expected.extend(lab.tolist())
            images.append(xa.clone())
    first = make_loader(path, **kw)
    seen = []
    for _ in range(1):
        seen.extend(_ids(first))
    it = iter(first)
    for _ in range(7):
        seen.extend(next(it)[2].tolist())
    state = first.state_dict()
    assert state["epoch"] == 1 and state["batches_consumed"] == 7
    del it, first

    resumed = make_loader(path, **kw)
    resumed.load_state_dict(state)
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
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batches_consumed"] == 0


def test_world_size_change(path: Path) -> None:
    two = make_loader(path, batch_size=16, rank=0, world_size=2)
    it = iter(two)
    next(it)
    state = two.state_dict()
    three = make_loader(path, batch_size=16, rank=0, world_size=3)
    with pytest.raises(ValueError, match=r"cannot resume mid-epoch .* world_size 2 -> 3"):
        three.load_state_dict(state)
    # At an epoch boundary the next epoch is simply re-sharded.
    boundary = {**state, "batches_consumed": 0}
    three.load_state_dict(boundary)
    assert len(_ids(three)) == len(three) * 16


def test_set_epoch_to_another_epoch_drops_the_resume_point(path: Path) -> None:
    loader = make_loader(path, batch_size=16, order="sequential")
    loader.load_state_dict({**loader.state_dict(), "epoch": 2, "batches_consumed": 5})
    loader.set_epoch(2)
    assert len(_ids(loader)) == (len(loader) - 5) * 16
    loader.load_state_dict({**loader.state_dict(), "epoch": 2, "batches_consumed": 5})
    loader.set_epoch(4)
    assert len(_ids(loader)) == len(loader) * 16
    np.testing.assert_array_equal(np.arange(16), loader.epoch_order(0)[:16])
