"""The per-sample photometric ops (options in :mod:`.photo_options`): each is its draw, a
numpy function of the sample's uniforms giving its row of parameters, plus its apply, a
small ``cache=True`` numba function of one image (:mod:`ffcv_pairs.kernels.colour`,
:mod:`~ffcv_pairs.kernels.tones`, :mod:`~ffcv_pairs.kernels.sharpness`,
:mod:`~ffcv_pairs.kernels.blur`, :mod:`~ffcv_pairs.kernels.jpeg_artefacts`,
:mod:`~ffcv_pairs.kernels.erasing`; erasing's draw is :mod:`.erasing_boxes`) that the one drawn-op
driver per dtype (:mod:`ffcv_pairs.kernels.drawn_driver`) runs on every sample of a batch.

A pipeline compiles the apply functions of the ops it uses, and the driver when it uses one:
nothing when it uses none. The uniforms of op ``name`` for a sample are
``uniform(sample_key(seed, epoch, sample, PHOTO_OP_IDS[name], key_tag), k)`` (``key_tag`` 0
for A and B when paired, else 0 for A and 1 for B): the same for every thread count, rank and
resume. Erasing's ``erasing_target`` reads as ``both``: paired; ``each``: unpaired; ``A`` or
``B``: a step on that field only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np

from .._checks import shown
from ..format.schema import PairSchema
from ..kernels.blur import gaussian_blur
from ..kernels.colour import JITTER_PARTS, channel_shuffle, color_jitter, grayscale
from ..kernels.drawn_driver import drawn_op_kernel
from ..kernels.erasing import erase
from ..kernels.hashing import PHOTO_OP_IDS, uniform_rows
from ..kernels.jpeg_artefacts import jpeg_artefacts
from ..kernels.numpy_colour import color_jitter_stand_in, serves_color_jitter
from ..kernels.photometric import values_outside
from ..kernels.sharpness import sharpness
from ..kernels.stand_in import types_ready
from ..kernels.tones import autocontrast, equalize, gamma, invert, posterize, solarize
from ..kernels.user_driver import user_op_signature
from .erasing_boxes import ERASING_UNIFORMS, erasing_draw
from .photo_options import ERASING_TARGETS, KEEP_VALUES

__all__ = [
    "RGB_OPS",
    "WORK_DTYPES",
    "PhotoStep",
    "apply_photo_steps",
    "compile_steps",
    "photo_steps",
    "random_order",
    "refuse_outside",
    "value_range",
]

#: The ops that read the channels as R, G, B (on one channel they change nothing).
RGB_OPS = ("saturation", "hue", "grayscale")
#: The dtypes the ops work on (float16 reaches them as float32).
WORK_DTYPES = ("uint8", "float32")
#: apply -> (its numpy twin, whether the twin takes one sample's shape): what serves while
#: the apply compiles (the jitter's is the largest compile of the drawn ops).
_STAND_INS: dict[Any, tuple[Callable, Callable[[tuple[int, ...]], bool]]] = {
    color_jitter: (color_jitter_stand_in, serves_color_jitter),
}


@dataclass(frozen=True)
class PhotoStep:
    """One op of a pipeline on one field: ``draw`` maps the ``(batch, uniforms)`` uniforms of
    op id ``op`` to the ``(batch, k)`` parameter rows that ``apply`` reads; ``tags``: the
    fields it runs on (0: A, 1: B)."""

    name: str
    op: int
    paired: bool
    uniforms: int
    draw: Callable[[np.ndarray], np.ndarray]
    apply: Any
    tags: tuple[int, ...] = (0, 1)


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


def _blur(p: float, sigma: tuple[float, float], kernel: int | None) -> Callable:
    """``(apply, sigma, size)``: ``sigma`` uniform; ``size`` given, or ``int(3.5 * sigma) * 2
    + 1``."""

    def draw(u: np.ndarray) -> np.ndarray:
        s = sigma[0] + (sigma[1] - sigma[0]) * u[:, 1]
        size = np.floor(3.5 * s) * 2 + 1 if kernel is None else np.full(len(u), kernel)
        return np.column_stack([u[:, 0] < p, s, size])

    return draw


def _quality(p: float, low: int, high: int) -> Callable:
    """``(apply, quality)``: an integer uniform in ``[low, high]``."""

    def draw(u: np.ndarray) -> np.ndarray:
        q = low + np.minimum(np.floor(u[:, 1] * (high - low + 1)), high - low)
        return np.column_stack([u[:, 0] < p, q])

    return draw


def _steps(aug: Any, channels: int, mid: float) -> dict[str, tuple[int, Callable, Any]]:
    """Each op's ``(uniforms, draw, apply)``."""
    jitter = aug.color_jitter or (0.0, 0.0, 0.0, 0.0)
    if channels == 1:  # as torchvision's: saturation and hue leave one channel as it is
        jitter = (*jitter[:2], 0.0, 0.0)
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
        "blur": (2, _blur(aug.blur, aug.blur_sigma, aug.blur_kernel), gaussian_blur),
        "jpeg": (2, _quality(aug.jpeg, *aug.jpeg_quality), jpeg_artefacts),
    }


def _needs_rgb(aug: Any, name: str) -> bool:
    if name == "color_jitter":
        return bool(aug.color_jitter[2] or aug.color_jitter[3])
    return name in RGB_OPS


def photo_steps(
    aug: Any, channels: int, stored: str, field: str, size: tuple[int, int] | None = None
) -> tuple[PhotoStep, ...]:
    """The :class:`PhotoStep` of each op ``aug`` (a ``PairAugment``) runs, in order, for a field
    ``field`` of ``channels`` channels stored as ``stored``, of ``size`` ``(height, width)``
    (what the ops see; needed by erasing only).

    Raises:
        ValueError: an op that reads R, G and B on another channel count, JPEG on other than 1
            or 3 channels, an ``erasing_value`` that is not a value of the images, or images
            of a dtype the ops do not take.
    """
    names = aug.photo_ops
    if not names:
        return ()
    if stored not in (*WORK_DTYPES, "float16"):
        raise ValueError(
            f"augment {names[0]}: photometric ops take uint8, float16 or float32 images; "
            f"{field} is {stored}"
        )
    _check_field(aug, names, channels, stored, field)
    mid = 128.0 if stored == "uint8" else sum(aug.float_range) / 2
    table = _steps(aug, channels, mid)
    steps = [
        PhotoStep(name, PHOTO_OP_IDS[name], getattr(aug, f"{name}_paired"), *table[name])
        for name in names
        if name != "erasing" and not (channels == 1 and name in RGB_OPS)
    ]
    if "erasing" in names:
        if size is None:
            raise ValueError(f"augment erasing={aug.erasing}: the size of {field} is needed")
        target = aug.erasing_target
        tags = (0, 1) if target in ("both", "each") else (ERASING_TARGETS.index(target) - 1,)
        draw = erasing_draw(aug, size, channels)
        erasing = (ERASING_UNIFORMS, draw, erase, tags)
        steps.append(PhotoStep("erasing", PHOTO_OP_IDS["erasing"], target != "each", *erasing))
    return tuple(steps)


def _check_field(aug: Any, names: tuple[str, ...], channels: int, stored: str, field: str) -> None:
    """The checks of ``aug``'s ops ``names`` that need the field's channels and dtype."""
    for name in names:
        if _needs_rgb(aug, name) and channels not in (1, 3):
            raise ValueError(
                f"augment {name}={getattr(aug, name)} needs 3 channels (R, G, B), or 1 (which it "
                f"leaves as it is, as torchvision's); {field} has {channels}"
            )
    if "jpeg" in names and channels not in (1, 3):
        raise ValueError(
            f"augment jpeg={aug.jpeg} takes images of 1 or 3 channels; {field} has {channels}"
        )
    top = 255.0 if stored == "uint8" else aug.float_range[1]
    if "solarize" in names and aug.solarize_threshold is not None and aug.solarize_threshold > top:
        raise ValueError(
            f"augment solarize_threshold={shown(aug.solarize_threshold)} is above {field}'s "
            f"largest {stored} value {top:g}: no value would be inverted"
        )
    value = aug.erasing_value
    if "erasing" not in names or value == "random":
        return
    if stored == "uint8" and not (float(value).is_integer() and 0 <= value <= 255):
        raise ValueError(
            f"augment erasing_value={shown(value)} is not a uint8 value ({field} is uint8): "
            f"use a whole number in [0, 255]"
        )
    low, high = aug.float_range
    if stored != "uint8" and not low <= value <= high:
        raise ValueError(
            f"augment erasing_value={shown(value)} lies outside value_range "
            f"{shown((low, high))} of {field}'s {stored} values"
        )


def value_range(work: str, aug: Any) -> tuple[float, float, float]:
    """``(low, high, rounds)``, the end of every parameter row, for images of dtype ``work``."""
    if work == "uint8":
        return 0.0, 255.0, 1.0
    low, high = aug.float_range
    return float(low), float(high), 0.0


def _stand_in(step: PhotoStep, view_shape: tuple[int, ...] | None = None) -> Any:
    """The numpy twin of ``step``'s apply (the same bytes, nothing to compile), or None: it
    has none, or none for images of ``view_shape`` (one sample's)."""
    twin = _STAND_INS.get(step.apply)
    if twin is None or (view_shape is not None and not twin[1](view_shape)):
        return None
    return twin[0]


#: (apply, work dtype) pairs known to have machine code: asked once, not at every batch.
_READY: set[tuple[Any, str]] = set()


def _compiled(step: PhotoStep, work: str) -> bool:
    """Whether ``step``'s apply has machine code for images of ``work`` (compiled, or in
    the disk cache); if not, its compile is queued for the background, once
    (:func:`~ffcv_pairs.kernels.stand_in.types_ready`)."""
    if (step.apply, work) in _READY:
        return True
    ready = types_ready(step.apply, user_op_signature(work).args, quiet=False)
    if ready:
        _READY.add((step.apply, work))
    return ready


def compile_steps(steps: tuple[PhotoStep, ...], work: str) -> None:
    """Compile (or load from the disk cache) the apply functions of ``steps`` and the
    driver, for images of dtype ``work``; an apply with a numpy twin that is not compiled
    yet compiles in the background instead, while the twin serves
    (:func:`apply_photo_steps`)."""
    if not steps:
        return
    sig = user_op_signature(work)
    for step in steps:
        if _stand_in(step) is None or _compiled(step, work):
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
    :func:`value_range` every row ends with. A step whose apply is still compiling in the
    background (see :func:`compile_steps`) runs its numpy twin on each image.

    Raises:
        ValueError: a float image holds values outside the value range, which the ops would
            clamp (see :func:`refuse_outside`).
        RuntimeError: an apply marked its sample failed (set its row's first value, the
            apply flag, to -1: a library it calls failed, as JPEG's can run out of memory).
    """
    active = [s for s in steps if tag in s.tags]
    if not active:
        return
    work = view.dtype.name
    kernel, threads = drawn_op_kernel(work), nb.get_num_threads()
    keys = np.array(ids, dtype=np.int64)
    clamping = [s.name.split()[0] for s in active if s.name not in KEEP_VALUES]
    if work != "uint8" and clamping:
        outside = np.zeros((len(keys), 3))
        values_outside(view.reshape(len(keys), -1), tail[0], tail[1], outside)
        if outside[:, 0].any():
            names = ", ".join(dict.fromkeys(clamping))
            refuse_outside(keys, outside, tail[:2], PairSchema.IMAGE_FIELDS[tag], names)
    for step in active:
        u = uniform_rows(keys, clock, step.op, 0 if step.paired else tag, step.uniforms)
        rows = step.draw(u)
        params = np.empty((len(keys), rows.shape[1] + len(tail)), np.float64)
        params[:, : rows.shape[1]], params[:, rows.shape[1] :] = rows, tail
        twin = _stand_in(step, view.shape[1:])
        if twin is not None and not _compiled(step, work):
            for image, row in zip(view, params):
                twin(image, row, tag)
        else:
            kernel(step.apply, view, params, tag, threads)
        if params[:, 0].min(initial=0.0) < 0:  # an apply's failure mark
            failed = np.flatnonzero(params[:, 0] < 0)
            raise RuntimeError(
                f"augment {step.name}: failed on sample {int(keys[failed[0]])} of field {tag} "
                f"({failed.size} of the batch's {len(keys)} samples)"
            )


def refuse_outside(
    ids: np.ndarray, outside: np.ndarray, bounds: tuple[float, float], field: str, ops: str
) -> None:
    """Refuse the first sample with values outside ``bounds``, the value range that ``ops``
    clamp float images to: ``outside[i]`` is sample ``ids[i]``'s ``[count, min, max]`` of
    them (:func:`~ffcv_pairs.kernels.photometric.values_outside`).

    Raises:
        ValueError: naming the sample, the field, the values and the range: clamping would
            change data the user did not ask to change.
    """
    i = int(np.flatnonzero(outside[:, 0])[0])
    count, least, most = outside[i]
    raise ValueError(
        f"augment value_range=({bounds[0]:g}, {bounds[1]:g}): sample {int(ids[i])} of {field} "
        f"has {int(count)} values outside it (from {least:g} to {most:g}); {ops} clamp float "
        f"images to value_range (default (0, 1), as torchvision): set value_range to your "
        f"data's range"
    )
