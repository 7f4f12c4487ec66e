"""The loader picks a small kernel where a pipeline needs only part of the general one
(compile time, issue 44): a copy where there is no geometry, the resize branch where a
resized crop to uint8 is the only op. Each gives the general kernel's bytes, on every
thread count, raw and JPEG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_jpeg_storage import photos, written

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.load import decoders

RRC = PairAugment(hflip=0.5, vflip=0.5, rot90=True, resized_crop=(12, 12), crop_scale=(0.1, 1.0))


def _epochs(path: Path, aug: PairAugment | None, threads: int, **kwargs) -> list[bytes]:
    loader = make_loader(path, batch_size=8, augment=aug, num_threads=threads, seed=5, **kwargs)
    return [b[0].numpy().tobytes() + b[1].numpy().tobytes() for _ in range(2) for b in loader]


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the loader call the general kernels where it would pick a small one."""
    monkeypatch.setattr(decoders, "resized_pairs", decoders.fused_pairs)
    monkeypatch.setattr(decoders, "resized_pairs_serial", decoders.fused_pairs_serial)
    monkeypatch.setattr(decoders.GeometryConfig, "identity", property(lambda self: False))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("shape", "codec", "aug"),
    [
        ((3, 20, 16), None, None),  # the copy kernels
        ((20, 16, 3), None, None),
        ((3, 20, 16), None, RRC),  # the resize branch
        ((20, 16, 3), None, RRC),
        ((20, 16), None, RRC),
        ((3, 40, 32), "jpeg", RRC),  # decoded at a reduced scale where the region allows
    ],
)
def test_the_small_kernels_give_the_general_kernels_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads, shape, codec, aug
) -> None:
    a = photos(48, shape, seed=2)
    b = np.ascontiguousarray(a[::-1])
    if codec:
        path = written(tmp_path, a, b)
    else:
        path = tmp_path / "raw.beton"
        write_pairs(ArraySource(a, b, np.arange(48)), path, progress=False, workers=1)
    small = _epochs(path, aug, threads)
    _general(monkeypatch)
    assert _epochs(path, aug, threads) == small
