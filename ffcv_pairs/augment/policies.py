"""An augmentation policy (options in :mod:`.policy_options`): torchvision v2's
``TrivialAugmentWide`` and ``RandAugment``, re-derived from their definitions, as drawn steps
of the photometric ops' driver. Per round (one op per sample) one step per apply: the
geometric ops' (:func:`~ffcv_pairs.kernels.policy.policy_affine`), colour jitter's for
Brightness, Contrast and Color, and sharpness, posterize, solarize, autocontrast and
equalize's; each applies on the samples whose drawn op it is and returns at once on the
others. So each apply is compiled and cached on its own, and shared with the photometric ops.

Per sample and per op ``j`` of the policy, three uniforms of op id :data:`OP_POLICY` (key
tag 0 for A and B when ``policy_paired``, else 0 for A and 1 for B): ``u[3j]`` picks the op
(each of the list equally likely), ``u[3j + 1]`` the magnitude bin (``TrivialAugmentWide``;
``RandAugment`` takes ``policy_magnitude``), and ``u[3j + 2] < 0.5`` negates a signed
magnitude. The magnitude tables are built with ``torch.linspace`` in float32, as torchvision
builds them, so each magnitude is the very float torchvision passes on.

The geometric ops become the map from an output pixel to its source that
:func:`~ffcv_pairs.kernels.policy.nearest_affine` samples: torchvision's inverse affine
matrix ``M^-1 = C RSS^-1 C^-1 T^-1`` (``RSS`` the rotation and shear, ``C`` the centre, ``T``
the translation) in coordinates centred on the image, then moved to pixel indices as its
``grid_sample`` (``align_corners=False``) reads them. Shears are about the top-left corner
(torchvision's ``center=[0, 0]``), rotations about the centre (``F.rotate`` negates the
angle it passes to the matrix), translations truncated to whole pixels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..kernels.colour import color_jitter
from ..kernels.policy import POLICY_OPS, policy_affine
from ..kernels.sharpness import sharpness
from ..kernels.tones import autocontrast, equalize, posterize, solarize
from .photo_ops import WORK_DTYPES, PhotoStep, value_range

__all__ = [
    "OP_POLICY",
    "PolicyChoices",
    "index_map",
    "magnitude_table",
    "policy_steps",
    "round_applies",
]

#: The op id of a policy's draws (72; 72 to 79 are the policies').
OP_POLICY = 72

_SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
_SIGNED |= {"Brightness", "Color", "Contrast", "Sharpness"}


def _linspace(start: float, end: float, bins: int) -> np.ndarray:
    return torch.linspace(start, end, bins).numpy().astype(np.float64)


def magnitude_table(name: str, bins: int, height: int, width: int) -> np.ndarray:
    """``(len(POLICY_OPS), bins)``: op ``k``'s magnitude at each bin (0 for an op that has
    none), as torchvision's ``_AUGMENTATION_SPACE`` of policy ``name`` for an image of
    ``(height, width)``."""
    wide = name == "trivial_augment_wide"
    shear, factor = (0.99, 0.99) if wide else (0.3, 0.9)
    shift = (32.0, 32.0) if wide else (150.0 / 331.0 * width, 150.0 / 331.0 * height)
    levels = 6 if wide else 4
    posterize = (8 - (torch.arange(bins) / ((bins - 1) / levels))).round().int()
    space = {
        "ShearX": _linspace(0.0, shear, bins),
        "ShearY": _linspace(0.0, shear, bins),
        "TranslateX": _linspace(0.0, shift[0], bins),
        "TranslateY": _linspace(0.0, shift[1], bins),
        "Rotate": _linspace(0.0, 135.0 if wide else 30.0, bins),
        "Posterize": posterize.numpy().astype(np.float64),
        "Solarize": _linspace(1.0, 0.0, bins),
    }
    for op in ("Brightness", "Color", "Contrast", "Sharpness"):
        space[op] = _linspace(0.0, factor, bins)
    return np.stack([space.get(op, np.zeros(bins)) for op in POLICY_OPS])


def _inverse_affine(
    angle: np.ndarray, shear: tuple[np.ndarray, np.ndarray], shift: np.ndarray, center: np.ndarray
) -> np.ndarray:
    """``(n, 6)``: torchvision's inverse affine matrix (scale 1) per sample, in coordinates
    centred on the image: ``angle`` and the shears in degrees, ``shift`` and ``center``
    (that of the rotation and shear) ``(n, 2)`` as ``(x, y)``. The rotation-shear block has
    determinant 1, so its inverse is its adjugate."""
    rot, sx, sy = np.radians(angle), np.radians(shear[0]), np.radians(shear[1])
    a = np.cos(rot - sy) / np.cos(sy)
    b = -np.cos(rot - sy) * np.tan(sx) / np.cos(sy) - np.sin(rot)
    c = np.sin(rot - sy) / np.cos(sy)
    d = -np.sin(rot - sy) * np.tan(sx) / np.cos(sy) + np.cos(rot)
    m = np.column_stack([d, -b, np.zeros_like(a), -c, a, np.zeros_like(a)])
    cx, cy = center[:, 0], center[:, 1]
    tx, ty = shift[:, 0], shift[:, 1]
    m[:, 2] += m[:, 0] * (-cx - tx) + m[:, 1] * (-cy - ty) + cx
    m[:, 5] += m[:, 3] * (-cx - tx) + m[:, 4] * (-cy - ty) + cy
    return m


def index_map(op: np.ndarray, magnitude: np.ndarray, height: int, width: int) -> np.ndarray:
    """``(n, 6)``: per sample, the ``(a, b, c, d, e, f)`` of
    :func:`~ffcv_pairs.kernels.policy.nearest_affine` for op ``op`` (indices of
    :data:`POLICY_OPS`) at ``magnitude`` on a ``(height, width)`` image (the identity for
    the ops that move nothing)."""
    names = np.array(POLICY_OPS)[op]
    zero = np.zeros(len(op))
    shear_deg = np.degrees(np.arctan(magnitude))
    angle = np.where(names == "Rotate", -magnitude, zero)
    shear = (
        np.where(names == "ShearX", shear_deg, zero),
        np.where(names == "ShearY", shear_deg, zero),
    )
    shift = np.column_stack(
        [
            np.where(names == "TranslateX", np.trunc(magnitude), zero),
            np.where(names == "TranslateY", np.trunc(magnitude), zero),
        ]
    )
    sheared = np.isin(names, ("ShearX", "ShearY"))
    center = np.column_stack(  # shears: about the top-left corner
        [np.where(sheared, -width / 2, zero), np.where(sheared, -height / 2, zero)]
    )
    m = _inverse_affine(angle, shear, shift, center)
    # output index x is x + 0.5 - w/2 centred; a centred source s is index s + w/2 - 0.5
    ox, oy = 0.5 - width / 2, 0.5 - height / 2
    m[:, 2] += m[:, 0] * ox + m[:, 1] * oy + width / 2 - 0.5
    m[:, 5] += m[:, 3] * ox + m[:, 4] * oy + height / 2 - 0.5
    return m


class PolicyChoices:
    """Per sample, round ``j``'s op (an index of :data:`POLICY_OPS`) and signed magnitude,
    from the round's three uniforms (see the module docstring)."""

    def __init__(self, aug: Any, height: int, width: int):
        self.table = magnitude_table(aug.policy, aug.policy_bins, height, width)
        self.signed = np.array([op in _SIGNED for op in POLICY_OPS])
        self.bins, self.fixed = aug.policy_bins, aug.policy_magnitude
        self.wide = aug.policy == "trivial_augment_wide"

    def __call__(self, u: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray]:
        ops = len(POLICY_OPS)
        op = np.minimum((u[:, 3 * j] * ops).astype(np.int64), ops - 1)
        level = np.minimum((u[:, 3 * j + 1] * self.bins).astype(np.int64), self.bins - 1)
        magnitude = self.table[op, level if self.wide else self.fixed]
        negative = self.signed[op] & (u[:, 3 * j + 2] < 0.5)
        return op, np.where(negative, -magnitude, magnitude)


def _is(op: np.ndarray, *names: str) -> np.ndarray:
    return np.isin(op, [POLICY_OPS.index(name) for name in names]).astype(np.float64)


Chooser = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def round_applies(
    choose: Chooser,
    j: int,
    fill: float,
    size: tuple[int, int],
    tail: tuple[float, float, float],
    channels: int,
) -> dict[str, tuple[Callable[[np.ndarray], np.ndarray], Any]]:
    """Round ``j``'s steps, by name: the draw of the rows of an apply (its ``apply`` 0 on the
    samples whose op is another) and the apply; ``choose(u, j)`` gives the samples' ops and
    magnitudes (:class:`PolicyChoices`), ``tail`` the rows' end (:func:`~.photo_ops.value_range`).
    On 1 channel, ``Color`` keeps the image, as torchvision's ``adjust_saturation``."""
    low, high, _ = tail
    color = ("Color",) if channels == 3 else ()

    def geometry(u: np.ndarray) -> np.ndarray:
        op, m = choose(u, j)
        on = _is(op, "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
        return np.column_stack([on, np.full(len(op), fill), index_map(op, m, *size)])

    def jitter(u: np.ndarray) -> np.ndarray:  # colour.color_jitter's row, one part on
        op, m = choose(u, j)
        parts = [_is(op, "Brightness"), _is(op, "Contrast"), _is(op, *color)]
        order = np.tile(np.arange(4.0), (len(op), 1))
        return np.column_stack([order, np.tile(1.0 + m, (4, 1)).T, *parts, np.zeros(len(op))])

    def one(name: str, value: Callable[[np.ndarray], np.ndarray] | None) -> Callable:
        def draw(u: np.ndarray) -> np.ndarray:
            op, m = choose(u, j)
            return np.column_stack([_is(op, name), *([value(m)] if value else [])])

        return draw

    return {
        "geometry": (geometry, policy_affine),
        "jitter": (jitter, color_jitter),
        "sharpness": (one("Sharpness", lambda m: 1.0 + m), sharpness),
        "posterize": (one("Posterize", lambda m: m), posterize),
        "solarize": (one("Solarize", lambda m: low + (high - low) * m), solarize),
        "autocontrast": (one("AutoContrast", None), autocontrast),
        "equalize": (one("Equalize", None), equalize),
    }


def policy_steps(
    aug: Any, channels: int, stored: str, field: str, size: tuple[int, int]
) -> tuple[PhotoStep, ...]:
    """The policy's :class:`~ffcv_pairs.augment.photo_ops.PhotoStep`\\ s (none without one)
    for a field ``field`` of ``channels`` channels stored as ``stored``, ``size`` its output
    ``(height, width)``: per round (``policy_num_ops`` of ``RandAugment``, one of
    ``TrivialAugmentWide``) one step per apply, each applying on the samples whose op it is.
    All draw from the same uniforms (op id :data:`OP_POLICY`).

    Raises:
        ValueError: a channel count other than 1 or 3, or a dtype the ops do not take.
    """
    if not aug.policy_ops:
        return ()
    if stored not in (*WORK_DTYPES, "float16"):
        raise ValueError(
            f"augment policy={aug.policy!r} takes uint8, float16 or float32 images; {field} "
            f"is {stored}"
        )
    if channels not in (1, 3):
        raise ValueError(
            f"augment policy={aug.policy!r} takes 1 or 3 channels, as torchvision's; {field} "
            f"has {channels}"
        )
    tail = value_range("float32" if stored == "float16" else stored, aug)
    choose, count = PolicyChoices(aug, *size), aug.policy_count
    steps = []
    for j in range(count):
        applies = round_applies(choose, j, float(aug.fill), size, tail, channels)
        for name, (draw, apply) in applies.items():
            steps.append(
                PhotoStep(f"policy {name}", OP_POLICY, aug.policy_paired, 3 * count, draw, apply)
            )
    return tuple(steps)
