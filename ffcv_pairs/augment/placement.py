"""Where each op of a :class:`~ffcv_pairs.augment.config.PairAugment` runs.

* **uint8 A and B of the same axes** (the common case): every CPU op is fused into the decoder
  (:mod:`ffcv_pairs.kernels.fused`): geometry including the resized crop, read
  straight from the page cache, then brightness, contrast and noise, then, on the
  CPU path (``device`` is the CPU), normalisation and the output dtype, in the
  loader's threads. With a GPU the decoder stops at uint8 and normalisation runs
  on the device, so the host moves compact bytes. Ops of the user's own (``user_ops``, or
  upstream FFCV ops appended to A or B) and the per-sample photometric ops
  (``augment/photo_ops``) run after the decoder on the stored dtype: with
  them the decoder stops at it, and normalisation follows them, as on a GPU.
* **The matrix geometry** (``augment/warp_options``): the decoder decodes each image whole,
  and :class:`~ffcv_pairs.augment.warp_ops.Warp` moves it; the other ops follow as for other
  dtypes.
* **Other dtypes**: the decoder applies flips, crops and turns; the resized crop
  and the photometric ops follow as CPU ops; normalisation and the dtype are
  torch ops after ``ToTensor`` (on the device when there is one).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..format.schema import PairSchema
from .config import PairAugment

__all__ = ["OpPlacement", "place_ops"]


@dataclass(frozen=True)
class OpPlacement:
    """What the decoder does for one loader.

    Attributes:
        fused: All CPU ops run inside the decoder (A and B are uint8).
        output_dtype: What the decoder writes for A and B: the stored dtype, or the
            normalised output dtype when ``cpu_output``.
        cpu_output: The decoder also normalises and casts (CPU path, fused).
        warped: The decoder applies the matrix geometry to A and B (uint8, stored raw),
            reading them where they are stored (``load/warp_decode``): no warp op follows.
    """

    fused: bool
    output_dtype: str
    cpu_output: bool
    warped: bool = False


def _converts(augment: PairAugment, stored: str) -> bool:
    return augment.normalize_mean is not None or augment.resolved_out_dtype(stored) != stored


def place_ops(
    augment: PairAugment | None, schema: PairSchema, on_cpu: bool, ops_after: bool = False
) -> OpPlacement:
    """The :class:`OpPlacement` of ``augment`` on files of ``schema``; ``on_cpu``: batches stay
    on the CPU (no device stage); ``ops_after``: upstream ops follow on A or B, and must see
    the stored dtype, as ``augment.user_ops`` do."""
    dtypes = {schema.spec(name).dtype for name in schema.IMAGE_FIELDS}
    stored = dtypes.pop() if len(dtypes) == 1 else ""
    if augment is None or stored != "uint8":
        return OpPlacement(False, stored or "mixed", False)
    a, b = (augment.field_axes(schema)[name] for name in schema.IMAGE_FIELDS)
    if a != b or augment.warps:  # one output shape for A and B; the warp is an op of its own
        # (or, stored raw, the decoder's: it reads the images where they are stored)
        return OpPlacement(False, stored, False, augment.warps and not schema.compressed)
    after = ops_after or bool(augment.user_ops or augment.photo_ops or augment.policy_ops)
    cpu_output = on_cpu and _converts(augment, stored) and not after
    fused = augment.resizes or augment.has_photometric or cpu_output
    output = augment.resolved_out_dtype(stored) if cpu_output else stored
    return OpPlacement(fused, output, cpu_output)
