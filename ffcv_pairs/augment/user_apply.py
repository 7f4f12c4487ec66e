"""Where a field's per-sample photometric ops (:mod:`.photo_ops`) and ops of the user's own
run: :class:`UserOps`, an FFCV ``Operation`` after the built-in CPU ops of A or of B and
before ``ToTensor``, the photometric ops first; normalisation and the output dtype
follow it (:func:`~ffcv_pairs.augment.placement.place_ops` keeps the decoder at the stored
dtype when there are user ops)."""

from __future__ import annotations

from collections.abc import Callable

import numba as nb
import numpy as np
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State

from ..format.schema import PairSchema
from ..kernels.user_driver import UserDraws, user_op_kernel
from .axes import ImageAxes
from .config import PairAugment
from .dense import image_shaped
from .photo_ops import PhotoStep, apply_photo_steps, compile_steps, photo_steps, value_range
from .policies import policy_steps
from .user_ops import PairOp, check_compiles, user_draws

__all__ = ["UserOps", "apply_user_ops", "user_field_ops", "work_dtype"]


def work_dtype(stored: str) -> str:
    """The dtype a user op sees for images stored as ``stored``: numba cannot type float16,
    so such images reach the op as float32 (and are written back)."""
    return "float32" if stored == "float16" else stored


def apply_user_ops(
    images: np.ndarray,
    ids: np.ndarray,
    clock: np.ndarray,
    ops: tuple[PairOp, ...],
    draws: list[UserDraws],
    axes: tuple[int, int, int, int],
    photo: tuple[tuple[PhotoStep, ...], tuple[float, float, float], int] = ((), (0, 0, 0), 0),
) -> None:
    """Run ``photo``'s steps (``(steps, value range, tag)``, see
    :func:`~ffcv_pairs.augment.photo_ops.apply_photo_steps`), then ``ops``, in order, in place,
    on ``images`` (``(n, ...)``, any layout), sample ``i`` being ``ids[i]``, each seen as
    ``axes`` ``(planes, height, width, pixel)``, with the calling thread's numba threads."""
    n = len(ids)
    work = np.dtype(work_dtype(images.dtype.name))
    direct = images.flags.c_contiguous and images.dtype == work
    buf = images if direct else np.ascontiguousarray(images, dtype=work)
    view = buf.reshape(n, *axes)
    keys = np.array(ids, dtype=np.int64)  # a fresh, writable int64 column, as typed
    apply_photo_steps(view, keys, clock, *photo)
    if ops:
        kernel, threads = user_op_kernel(work.name), nb.get_num_threads()
        for op, d in zip(ops, draws):
            kernel(op.fn, view, keys, clock, d, threads)
    if not direct:
        images[...] = buf


class UserOps(Operation):
    """The per-sample photometric ``steps`` and the ops of the user's own on field ``tag``
    (0: A, 1: B), in place: its images are ``axes`` cut to ``size`` (the output ``(height,
    width)``), stored as ``dtype``; ``tail``: the steps' value range (see
    :func:`~ffcv_pairs.augment.photo_ops.value_range`).

    Raises:
        TypeError: an op's function does not compile for these images (see
            :func:`~ffcv_pairs.augment.user_ops.check_compiles`).
    """

    def __init__(
        self,
        ops: tuple[PairOp, ...],
        axes: ImageAxes,
        size: tuple[int, int],
        dtype: str,
        clock: np.ndarray,
        tag: int,
        steps: tuple[PhotoStep, ...] = (),
        tail: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ):
        super().__init__()
        self.work = work_dtype(dtype)
        for op in ops:
            check_compiles(op, self.work)
        self.ops, self.clock = ops, clock
        self.photo = (steps, tail, tag)
        self.draws = [user_draws(k, op, tag) for k, op in enumerate(ops)]
        self.axes = (axes.planes, size[0], size[1], axes.pixel)

    def declare_state_and_memory(self, previous_state: State):
        return previous_state, None

    def generate_code(self) -> Callable:
        ops, draws, clock, axes, photo = self.ops, self.draws, self.clock, self.axes, self.photo
        if ops:  # compiled, or loaded from the disk cache, when built
            user_op_kernel(self.work)
        compile_steps(photo[0], self.work)

        def apply(images, _, indices):
            n = len(indices)
            apply_user_ops(images[:n], indices, clock, ops, draws, axes, photo)
            return images

        apply.with_indices = True  # type: ignore[attr-defined]
        return apply


def user_field_ops(
    augment: PairAugment, name: str, schema: PairSchema, clock: np.ndarray
) -> list[Operation]:
    """Image field ``name``'s :class:`UserOps` (none when ``augment`` has neither user ops
    nor per-sample photometric ops).

    Raises:
        ValueError: a photometric op that needs 3 channels on another count, or on a dtype it
            does not take (see :func:`~ffcv_pairs.augment.photo_ops.photo_steps`).
        ValueError: a geometric user op or a policy on a file with image-shaped label or extra
            fields, declared dense or not (it would move A and B and leave them behind).
    """
    if not (augment.user_ops or augment.photo_ops or augment.policy_ops):
        return []
    geometric = [op.name for op in augment.user_ops if op.kind == "geometric"]
    shaped = image_shaped(schema) if geometric or augment.policy_ops else []
    if shaped and augment.policy_ops:
        raise ValueError(
            f"augment policy={augment.policy!r} shears, translates and rotates A and B, but "
            f"field {shaped[0]!r} is shaped like the images and would not follow: drop the policy"
        )
    if shaped:
        field = schema.values[shaped[0]]
        raise ValueError(
            f"augment user op {geometric[0]!r} is geometric, but field {shaped[0]!r} "
            f"({field.dtype}{list(field.shape)}) is shaped "
            f"like the images and would not move with A and B (dense fields follow the built-in "
            f"geometry only): declare the op photometric if it moves no pixel, or drop it"
        )
    axes = augment.field_axes(schema)[name]
    size = augment.output_size(axes)
    dtype = schema.spec(name).dtype
    tag = schema.IMAGE_FIELDS.index(name)
    steps = photo_steps(augment, axes.num_channels, dtype, name, size)
    steps += policy_steps(augment, axes.num_channels, dtype, name, size)
    # Erasing runs last, after a policy, as in torchvision's recipes (TrivialAugmentWide,
    # then RandomErasing).
    steps = tuple(sorted(steps, key=lambda step: step.name == "erasing"))  # a stable sort
    tail = value_range(work_dtype(dtype), augment)
    return [UserOps(augment.user_ops, axes, size, dtype, clock, tag, steps, tail)]
