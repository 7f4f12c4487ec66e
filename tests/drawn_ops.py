"""Helpers of the tests of the drawn per-sample ops (photometric, blur/JPEG/erasing, policies):
an apply function on one image in a given layout, a pipeline's steps on a batch as the loader
runs them, and a loader's epoch of pairs whose A equals B."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numba as nb
import numpy as np

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.photo_ops import apply_photo_steps, value_range

__all__ = ["LAYOUTS", "apply_in_layout", "equal_pairs_file", "loader_epoch", "run_steps"]


def apply_in_layout(fn, image: np.ndarray, head: tuple, tail: tuple, axes: str = "chw"):
    """``fn`` on a copy of the CHW ``image`` seen as ``axes`` (chw, hwc or hw), back as CHW."""
    if axes == "chw":
        view = image.copy()[:, :, :, None]
    elif axes == "hwc":
        view = image.transpose(1, 2, 0).copy()[None]  # a copy, even of one channel
    else:
        assert len(image) == 1, "2-d images: one plane"
        view = image[0].copy()[None, :, :, None]
    fn(view, np.array([*head, *tail], np.float64), 0)
    if axes == "hwc":
        return view[0].transpose(2, 0, 1)
    return view[:, :, :, 0] if axes == "chw" else view[0, :, :, 0][None]


def run_steps(
    steps: Any,
    aug: PairAugment,
    images: np.ndarray,
    ids: np.ndarray,
    tag: int,
    clock: np.ndarray,
    threads: int | None = None,
) -> np.ndarray:
    """``steps`` of ``aug`` on a copy of CHW ``images`` (samples ``ids``), as the loader runs
    them, on ``threads`` numba threads (None: as they are)."""
    out = images.copy()
    before = nb.get_num_threads()
    if threads is not None:
        nb.set_num_threads(threads)
    try:
        view = out.reshape(*out.shape, 1)
        apply_photo_steps(view, ids, clock, steps, value_range(out.dtype.name, aug), tag)
    finally:
        nb.set_num_threads(before)
    return out


LAYOUTS = {"chw": "chw", "hwc": "hwc", "hw": "hw", "jpeg": "jpeg"}
"""The stored kinds the loader tests run: raw CHW, HWC and 2-d, and JPEG (HWC, 3 channels)."""


def equal_pairs_file(path: Path, layout: str, size: tuple[int, int] = (10, 12)) -> Path:
    """40 pairs of random uint8 images whose A equals B, at ``size``, stored as ``layout`` (a
    key of :data:`LAYOUTS`), written to ``path``."""
    h, w = size
    shape = {"chw": (3, h, w), "hwc": (h, w, 3), "hw": (h, w), "jpeg": (h, w, 3)}[layout]
    a = np.random.default_rng(9).integers(0, 256, (40, *shape), dtype=np.uint8)
    codec = "jpeg" if layout == "jpeg" else None
    write_pairs(ArraySource(a, a.copy(), np.arange(40)), path, codec=codec, progress=False)
    return path


def loader_epoch(path: Path, aug: PairAugment, epoch: int, threads: int) -> bytes:
    """Epoch ``epoch`` of a file whose A equals B, in random order (seed 5), batches of 16:
    A's bytes, each batch's B checked equal to its A."""
    loader = make_loader(
        path, batch_size=16, augment=aug, num_threads=threads, order="random", seed=5,
        device="cpu",
    )  # fmt: skip
    loader.set_epoch(epoch)
    out = []
    for x, y, _ in loader:
        assert np.array_equal(x.numpy(), y.numpy())
        out.append(x.numpy().tobytes())
    return b"".join(out)
