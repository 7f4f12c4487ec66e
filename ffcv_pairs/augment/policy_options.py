"""The options of an augmentation policy (:mod:`.policies`), declared once here and inherited
by :class:`~ffcv_pairs.augment.config.PairAugment` (keyword-only), with their checks.

A policy runs per sample on the output image, after the geometry and the other per-sample
photometric ops and before the user's ops and normalisation, as torchvision applies it after
its crop. Definitions: ``docs/augmentation.md`` ("Policies").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .._checks import flag, integer, one_of, optional

__all__ = ["POLICIES", "PolicyOptions", "check_policy_options"]

#: The policies, by option value (torchvision v2's ``TrivialAugmentWide``, ``RandAugment``).
POLICIES = ("trivial_augment_wide", "rand_augment")


@dataclass(frozen=True, kw_only=True)
class PolicyOptions:
    """The policy of :class:`~ffcv_pairs.augment.config.PairAugment`.

    Args:
        policy: ``trivial_augment_wide`` (one op per sample, its magnitude drawn from
            ``policy_bins``) or ``rand_augment`` (``policy_num_ops`` ops per sample at
            magnitude ``policy_magnitude``), exactly as torchvision v2's ``TrivialAugmentWide``
            and ``RandAugment``: their op lists, magnitude tables and signs, nearest-neighbour
            shear, translate and rotate filled with ``fill``. None: off. 1 or 3 channels
            (``Color`` keeps a 1-channel image, as torchvision); uint8, float16, float32.
            Its shear, translate and rotate move A and B only: refused with dense or other
            image-shaped fields.
        policy_num_ops: ``RandAugment``'s ``num_ops`` (0 or more).
        policy_magnitude: ``RandAugment``'s ``magnitude``, a bin index below ``policy_bins``.
        policy_bins: ``num_magnitude_bins`` (2 or more).
        policy_paired: The same ops and magnitudes for A and B (default), or drawn per image.
    """

    policy: Literal["trivial_augment_wide", "rand_augment"] | None = None
    policy_num_ops: int = 2
    policy_magnitude: int = 9
    policy_bins: int = 31
    policy_paired: bool = True

    @property
    def policy_ops(self) -> tuple[str, ...]:
        """``("policy",)`` when a policy draws at least one op per sample, else empty."""
        if self.policy is None or (self.policy == "rand_augment" and self.policy_num_ops == 0):
            return ()
        return ("policy",)

    @property
    def policy_count(self) -> int:
        """The ops the policy runs per sample."""
        return self.policy_num_ops if self.policy == "rand_augment" else 1


def check_policy_options(aug: Any) -> None:
    """Check and store in plain form the options of :class:`PolicyOptions` on ``aug``."""

    def put(name: str, check: Any, *args: Any) -> None:
        object.__setattr__(aug, name, check(f"augment {name}", getattr(aug, name), *args))

    put("policy", optional(one_of), POLICIES)
    put("policy_num_ops", integer, 0, 64)
    put("policy_bins", integer, 2)
    put("policy_magnitude", integer, 0, aug.policy_bins - 1)
    put("policy_paired", flag)
    if aug.policy is not None and aug.dense:
        raise ValueError(
            f"augment policy={aug.policy!r} shears, translates and rotates A and B, which the "
            f"dense fields {sorted(aug.dense)} would not follow: drop the policy or dense"
        )
