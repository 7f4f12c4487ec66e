"""The per-sample photometric ops (options in :mod:`.photo_options`): each is its draw, a
numpy function of the sample's uniforms giving its row of parameters, plus its apply, a
small ``cache=True`` numba function of one image (:mod:`ffcv_pairs.kernels.colour`,
:mod:`~ffcv_pairs.kernels.tones`, :mod:`~ffcv_pairs.kernels.sharpness`) that the one drawn-op
driver per dtype (:mod:`ffcv_pairs.kernels.drawn_driver`) runs on every sample of a batch.

A pipeline compiles the apply functions of the ops it uses, and the driver when it uses one:
nothing when it uses none. The uniforms of op ``name`` for a sample are
``uniform(sample_key(seed, epoch, sample, PHOTO_OP_IDS[name], key_tag), k)`` (``key_tag`` 0
for A and B when paired, else 0 for A and 1 for B): the same for every thread count, rank and
resume.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np

from ..kernels.colour import JITTER_PARTS, channel_shuffle, color_jitter, grayscale
from ..kernels.drawn_driver import drawn_op_kernel
from ..kernels.hashing import PHOTO_OP_IDS, uniform_rows
from ..kernels.sharpness import sharpness
from ..kernels.tones import autocontrast, equalize, gamma, invert, posterize, solarize
from ..kernels.user_driver import user_op_signature

__all__ = [
    "RGB_OPS",
    "WORK_DTYPES",
    "PhotoStep",
    "apply_photo_steps",
    "compile_steps",
    "photo_steps",
    "random_order",
    "value_range",
]

#: The ops that read the channels as R, G, B.
RGB_OPS = ("saturation", "hue", "grayscale")
#: The dtypes the ops work on (float16 reaches them as float32).
WORK_DTYPES = ("uint8", "float32")


@dataclass(frozen=True)
class PhotoStep:
    """One op of a pipeline on one field: ``draw`` maps the ``(batch, uniforms)`` uniforms of
    op id ``op`` to the ``(batch, k)`` parameter rows that ``apply`` reads."""

    name: str
    op: int
    paired: bool
    uniforms: int
    draw: Callable[[np.ndarray], np.ndarray]
    apply: Any


def random_order(u: np.ndarray, count: int) -> np.ndarray:
    """Per row, a permutation of ``range(count)`` from ``count - 1`` uniforms (Fisher-Yates:
    for ``i`` from ``count - 1`` down to 1, swap ``i`` with ``floor(u[:, count - 1 - i] *
    (i + 1))``): each of the ``count!`` orders equally likely."""
    n = len(u)
    perm = np.tile(np.arange(count, dtype=np.float64), (n, 1))
    rows = np.arange(n)
    for i in range(count - 1, 0, -1):
        j = np.minimum((u[:, count - 1 - i] * (i + 1)).astype(np.int64), i)
        held = perm[rows, i].copy()
        perm[rows, i] = perm[rows, j]
        perm[rows, j] = held
    return perm


def _factor(u: np.ndarray, v: float, shift: bool = False) -> np.ndarray:
    """torchvision's jitter factor: uniform in ``[max(0, 1 - v), 1 + v]`` (``shift``: hue's
    ``[-v, v]``)."""
    lo, hi = (-v, v) if shift else (max(0.0, 1.0 - v), 1.0 + v)
    return lo + (hi - lo) * u


def _jitter(values: tuple[float, float, float, float], ordered: bool) -> Callable:
    def draw(u: np.ndarray) -> np.ndarray:
        n = len(u)
        order = random_order(u, 4) if ordered else np.tile(np.arange(4.0), (n, 1))
        factors = np.column_stack(
            [_factor(u[:, 3 + k], v, JITTER_PARTS[k] == "hue") for k, v in enumerate(values)]
        )
        return np.column_stack([order, factors, np.tile(np.array(values) > 0, (n, 1))])

    return draw


def _chance(p: float, *constants: float) -> Callable:
    """A draw of ``(apply, *constants)``: ``apply`` is ``u[:, 0] < p``."""

    def draw(u: np.ndarray) -> np.ndarray:
        return np.column_stack([u[:, 0] < p, *(np.full(len(u), c) for c in constants)])

    return draw


def _gamma(p: float, lo: float, hi: float) -> Callable:
    def draw(u: np.ndarray) -> np.ndarray:
        return np.column_stack([u[:, 0] < p, lo + (hi - lo) * u[:, 1]])

    return draw


def _shuffle(p: float, channels: int) -> Callable:
    def draw(u: np.ndarray) -> np.ndarray:
        return np.column_stack([u[:, 0] < p, random_order(u[:, 1:], channels)])

    return draw


def _steps(aug: Any, channels: int, mid: float) -> dict[str, tuple[int, Callable, Any]]:
    """Each op's ``(uniforms, draw, apply)``."""
    jitter = aug.color_jitter or (0.0, 0.0, 0.0, 0.0)
    threshold = mid if aug.solarize_threshold is None else aug.solarize_threshold
    return {
        "color_jitter": (7, _jitter(jitter, True), color_jitter),
        "saturation": (7, _jitter((0.0, 0.0, aug.saturation, 0.0), False), color_jitter),
        "hue": (7, _jitter((0.0, 0.0, 0.0, aug.hue), False), color_jitter),
        "gamma": (2, _gamma(aug.gamma_p, *(aug.gamma or (1.0, 1.0))), gamma),
        "grayscale": (1, _chance(aug.grayscale), grayscale),
        "autocontrast": (1, _chance(aug.autocontrast), autocontrast),
        "equalize": (1, _chance(aug.equalize), equalize),
        "sharpness": (1, _chance(aug.sharpness, aug.sharpness_factor), sharpness),
        "posterize": (1, _chance(aug.posterize, aug.posterize_bits), posterize),
        "solarize": (1, _chance(aug.solarize, threshold), solarize),
        "invert": (1, _chance(aug.invert), invert),
        "channel_shuffle": (channels, _shuffle(aug.channel_shuffle, channels), channel_shuffle),
    }


def _needs_rgb(aug: Any, name: str) -> bool:
    if name == "color_jitter":
        return bool(aug.color_jitter[2] or aug.color_jitter[3])
    return name in RGB_OPS


def photo_steps(aug: Any, channels: int, stored: str, field: str) -> tuple[PhotoStep, ...]:
    """The :class:`PhotoStep` of each op ``aug`` (a ``PairAugment``) runs, in order, for a field
    ``field`` of ``channels`` channels stored as ``stored``.

    Raises:
        ValueError: an op that reads R, G and B on another channel count, or images of a dtype
            the ops do not take.
    """
    names = aug.photo_ops
    if not names:
        return ()
    if stored not in (*WORK_DTYPES, "float16"):
        raise ValueError(
            f"augment {names[0]}: photometric ops take uint8, float16 or float32 images; "
            f"{field} is {stored}"
        )
    for name in names:
        if _needs_rgb(aug, name) and channels != 3:
            raise ValueError(
                f"augment {name}={getattr(aug, name)} needs 3 channels (R, G, B); {field} has "
                f"{channels}"
            )
    mid = 128.0 if stored == "uint8" else sum(aug.float_range) / 2
    table = _steps(aug, channels, mid)
    return tuple(
        PhotoStep(name, PHOTO_OP_IDS[name], getattr(aug, f"{name}_paired"), *table[name])
        for name in names
    )


def value_range(work: str, aug: Any) -> tuple[float, float, float]:
    """``(low, high, rounds)``, the end of every parameter row, for images of dtype ``work``."""
    if work == "uint8":
        return 0.0, 255.0, 1.0
    low, high = aug.float_range
    return float(low), float(high), 0.0


def compile_steps(steps: tuple[PhotoStep, ...], work: str) -> None:
    """Compile (or load from the disk cache) the apply functions of ``steps`` and the
    driver, for images of dtype ``work``."""
    if not steps:
        return
    sig = user_op_signature(work)
    for step in steps:
        step.apply.compile(sig.args)
    drawn_op_kernel(work)


def apply_photo_steps(
    view: np.ndarray,
    ids: np.ndarray,
    clock: np.ndarray,
    steps: tuple[PhotoStep, ...],
    tail: tuple[float, float, float],
    tag: int,
) -> None:
    """Run ``steps`` in order, in place, on ``view`` (``(batch, planes, height, width,
    pixel)``, C-contiguous), sample ``i`` being ``ids[i]``, on field ``tag``; ``tail``: the
    :func:`value_range` every row ends with."""
    if not steps:
        return
    kernel, threads = drawn_op_kernel(view.dtype.name), nb.get_num_threads()
    keys = np.array(ids, dtype=np.int64)
    for step in steps:
        u = uniform_rows(keys, clock, step.op, 0 if step.paired else tag, step.uniforms)
        rows = step.draw(u)
        params = np.ascontiguousarray(
            np.column_stack([rows, np.tile(np.array(tail), (len(keys), 1))]), dtype=np.float64
        )
        kernel(step.apply, view, params, tag, threads)
