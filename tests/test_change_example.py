"""The change-detection example (ffcv_pairs.change_demo): a siamese UNet trained on masks
that follow the geometry; with B's geometry drawn apart from A's the IoU falls well below."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ffcv_pairs.change_demo import build_change_pairs, train_change, write_files


def test_the_pairs_mark_exactly_the_pasted_pixels() -> None:
    a, b, mask = build_change_pairs(40, seed=3)
    assert a.shape == b.shape == (40, 3, 40, 40) and mask.shape == (40, 40, 40)
    moved = np.abs(a.astype(int) - b.astype(int)).max(axis=1)
    assert (moved[mask == 0] <= 40).all()  # noise only (4 sigma is 16 per image)
    assert 0.5 < (mask.reshape(40, -1).max(1) == 1).mean() < 1.0
    assert moved[mask == 1].mean() > 30  # another photograph's pixels


@pytest.mark.slow
def test_paired_geometry_on_masks_is_what_makes_change_detection_learnable(
    tmp_path: Path,
) -> None:
    train, val = write_files(tmp_path, 600, 160)
    # one loader thread: the serial kernels, no parallel ones compiled beside them
    small = dict(epochs=1, root=tmp_path, width=8, batch_size=16, num_threads=1)
    paired = train_change(train, val, paired=True, **small)
    unpaired = train_change(train, val, paired=False, **small)
    assert paired.val_iou > 0.45, paired
    assert unpaired.val_iou < paired.val_iou - 0.3, (paired, unpaired)
