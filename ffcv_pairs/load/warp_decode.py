"""The matrix geometry inside the decoder: uint8 images stored raw are warped where they are
stored, with no copy first.

Without it the decoder copies every image whole out of the mapping (or the process cache's
slots), then the warp op (:class:`~ffcv_pairs.augment.warp_ops.Warp`) reads the copy: a
batch of 64 pairs of 256x256 RGB images writes and reads 25 MB in between. Here the decoder
calls :func:`~ffcv_pairs.kernels.warp.warp_mapped` on the stored bytes, with the warp op's
draws (the same matrices, displacements, padding and fill, keyed on the same sample ids and
field tags), so a batch has the warp op's bytes, and the field's pipeline has no warp op
(:attr:`~ffcv_pairs.augment.placement.OpPlacement.warped`). About 0.06 ms of one thread a
224x224 pair of rotations (0.36 -> 0.30 ms).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba as nb
import numpy as np

from ..augment.axes import ImageAxes
from ..augment.checks import PAD_MODES
from ..augment.config import PairAugment
from ..augment.warp_draws import warp_matrices
from ..augment.warp_ops import displacements
from ..kernels.numpy_warp import warp_mapped_stand_in
from ..kernels.stand_in import ParallelSoon
from ..kernels.warp import warp_mapped, warp_mapped_serial

__all__ = ["warp_in_decoder"]


def warp_in_decoder(
    augment: PairAugment, axes: list[ImageAxes], clock: np.ndarray
) -> Callable[[Any, np.ndarray, np.ndarray, np.ndarray], None]:
    """``run(batch, mm, out_a, out_b)``: A and B of ``batch`` (a ``BatchRefs``) warped from
    ``mm`` into the decoder's outputs, field ``t`` of ``axes[t]``."""
    mode, fill = PAD_MODES[augment.warp_pad_mode], float(augment.fill)
    # until a kernel is compiled, numpy warps (the same bytes, nothing to compile)
    parallel = ParallelSoon(warp_mapped, warp_mapped_serial, warp_mapped_stand_in)
    serial = ParallelSoon(warp_mapped_serial, warp_mapped_serial, warp_mapped_stand_in)
    fields = [
        (ax, augment.output_size(ax), (ax.planes, ax.height, ax.width, ax.pixel)) for ax in axes
    ]

    def run(batch: Any, mm: np.ndarray, out_a: np.ndarray, out_b: np.ndarray) -> None:
        call = parallel if nb.get_num_threads() > 1 else serial
        n = len(batch.ids)
        for tag, (out, ptr) in enumerate(((out_a, batch.ptr_a), (out_b, batch.ptr_b))):
            ax, size, stored = fields[tag]
            mats = warp_matrices(augment, batch.ids, clock, tag, ax.height, ax.width)
            disp = displacements(augment, batch.ids, clock, tag, size)
            dst = out[:n].reshape(n, ax.planes, *size, ax.pixel)
            call(mm, batch.rows, ptr, stored, dst, mats, disp, mode, fill)

    return run
