"""Floats of a declared range stored as uint8 codes, and the error bound that holds when the
loader reads them back as float32.

A range is refused unless float32, which the loader hands back, can tell its 256 levels
apart: the step must be at least :data:`MIN_STEP_ULPS` float32 epsilons of the range's
largest magnitude (``[0, 1]`` has room to spare; ``[1e7, 1e7 + 1]`` has none, since float32
holds no value between its ends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LEVELS", "MIN_STEP_ULPS", "Quantization", "check_range"]

#: Steps between the lowest and the highest code.
LEVELS = 255
#: The smallest step allowed, in float32 epsilons of the range's largest magnitude: the
#: float32 rounding of a read-back value (:attr:`Quantization.float32_error`) then stays
#: within an eighth of a step.
MIN_STEP_ULPS = 16
_F32 = np.finfo(np.float32)
_EPS32 = float(_F32.eps)


def check_range(lo: float, hi: float, name: str = "quantize range") -> None:
    """Refuse ``[lo, hi]`` as a quantize range unless it is finite, ``lo < hi``, and
    float32 holds it and resolves its step (see the module docstring).

    Raises:
        ValueError: naming ``name``, the range and what is wrong.
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{name} must be two finite numbers lo < hi, got {lo}, {hi}")
    span = f"{name} [{lo}, {hi}]"
    top = max(abs(lo), abs(hi))
    if top > float(_F32.max):
        raise ValueError(
            f"{span} exceeds float32's largest value {float(_F32.max):.4g} (the loader's output)"
        )
    step = (hi - lo) / LEVELS  # finite: both ends are within float32's
    if step < float(_F32.tiny):
        raise ValueError(f"{span}: its step {step:.4g} is below float32's smallest normal number")
    least = MIN_STEP_ULPS * _EPS32 * top
    if step < least:
        raise ValueError(
            f"{span}: its step {step:.4g} is too fine for float32 (the loader's output) near "
            f"{top:g}, which needs a step of at least {least:.4g}: use a wider range or one "
            f"nearer 0"
        )


@dataclass(frozen=True)
class Quantization:
    """Floats of ``[lo, hi]`` stored as uint8: ``q`` stands for ``lo + q * step``, with
    ``step = (hi - lo) / 255``. Each float is stored as its nearest ``q``, so a value read
    back as float32 differs from the original by at most :attr:`max_error`: half a step
    plus the float32 rounding of the read-back value.

    Args:
        lo, hi: The declared range, finite, ``lo < hi``, its step at least
            :data:`MIN_STEP_ULPS` float32 epsilons of ``max(|lo|, |hi|)``; values outside
            it are refused.

    Raises:
        ValueError: naming the range, when it is not one.
    """

    lo: float
    hi: float

    def __post_init__(self) -> None:
        lo, hi = float(self.lo), float(self.hi)
        check_range(lo, hi)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    @property
    def step(self) -> float:
        return (self.hi - self.lo) / LEVELS

    @property
    def float32_error(self) -> float:
        """The most the float32 arithmetic of the loader's read-back adds: four roundings
        (the shift, the scale, the subtraction and the product), each at most half a
        float32 epsilon of ``max(|lo|, |hi|)``."""
        return 2 * _EPS32 * max(abs(self.lo), abs(self.hi))

    @property
    def max_error(self) -> float:
        """The largest difference between a float and its stored value read back as
        float32: half a step plus :attr:`float32_error`."""
        return self.step / 2 + self.float32_error

    def encode(self, values: np.ndarray) -> np.ndarray:
        """uint8 codes of ``values`` (which must lie in the range: see ``outside``)."""
        scaled = (np.asarray(values, dtype=np.float64) - self.lo) / self.step
        return np.rint(scaled).clip(0, LEVELS).astype(np.uint8)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The float32 values that uint8 ``codes`` stand for."""
        return (self.lo + np.asarray(codes, dtype=np.float64) * self.step).astype(np.float32)

    def outside(self, values: np.ndarray) -> np.ndarray:
        """Mask of the values outside ``[lo, hi]`` (NaN included)."""
        with np.errstate(invalid="ignore"):
            return ~((values >= self.lo) & (values <= self.hi))

    def to_json(self, lossy: bool = False) -> dict[str, Any]:
        """The sidecar's record; ``lossy``: the codes are then JPEG-compressed, so no bound
        holds (``max_abs_error`` is None)."""
        out: dict[str, Any] = {"dtype": "uint8", "range": [self.lo, self.hi]}
        if lossy:
            return out | {"max_abs_error": None, "error": "JPEG: lossy, see PSNR"}
        return out | {"max_abs_error": self.max_error}

    def describe(self, lossy: bool = False) -> str:
        """The summary line's words; ``lossy``: JPEG-compressed codes (no bound)."""
        q = f"quantized from [{self.lo:g}, {self.hi:g}]"
        if lossy:
            return f"{q}, then JPEG: lossy, see PSNR (no error bound)"
        return f"{q}, max abs error {self.max_error:.3g} (half a step, plus float32 rounding)"
