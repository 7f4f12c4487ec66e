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
    """Make the loader call the general kernels where it would pick a small one (the copy
    kernels; the fused kernel's resize branch alone)."""
    monkeypatch.setattr(decoders, "unused_ops", lambda cfg: (True, True, True))
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


PIPELINES = {
    "demo": PairAugment(
        hflip=0.5, crop=(16, 16), crop_padding=3, brightness=0.3, contrast=0.3,
        brightness_paired=False, contrast_paired=False,
    ),
    "rrc-photometric": PairAugment(resized_crop=(10, 10), hflip=0.5, contrast=0.4, noise_std=4.0),
    "float-out": PairAugment(crop=(16, 16), vflip=0.5, normalize_mean=(9.0,), normalize_std=(3.0,)),
    "rrc-float16": PairAugment(resized_crop=(12, 12), brightness=0.2, out_dtype="float16"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pruning_unused_ops_from_the_fused_kernel_changes_no_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A pipeline without float output or resized crop compiles the fused kernel with those
    ops pruned (``None`` markers); its batches equal those of the kernel with every op."""
    a = photos(48, (3, 20, 16), seed=4)
    path = tmp_path / "raw.beton"
    write_pairs(ArraySource(a, np.ascontiguousarray(a[::-1]), np.arange(48)), path,
                progress=False, workers=1)  # fmt: skip
    pruned = _epochs(path, PIPELINES[name], 2)
    monkeypatch.setattr(decoders, "unused_ops", lambda cfg: (True, True, True))
    assert _epochs(path, PIPELINES[name], 2) == pruned
