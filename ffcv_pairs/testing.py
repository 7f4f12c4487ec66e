"""The checks a built-in op gets, for an op of the user's own: call them from your tests.

Example (a pytest test of your package)::

    from ffcv_pairs import PairOp
    from ffcv_pairs.testing import check_pair_op
    from mypackage.ops import vignette

    def test_vignette():
        check_pair_op(PairOp(vignette, draws=1), shape=(3, 32, 32), dtype="uint8")

:func:`check_pair_op` runs the op as the loader does (the same driver, keys and views) on
seeded images, and raises ``AssertionError``, one line per failed check, when:

* a **paired** op gives A and B different outputs from equal inputs (it reads ``tag``, or
  draws apart from ``u``);
* the output changes from one run to the next, or with the **thread count** (1 or 2): the op
  keeps state or draws from ``numpy.random``, not from ``u``;
* a sample's output changes with the **batch** it is in, or its place there (a resume deals
  samples into other batches);
* it **writes outside its image**: into the bytes around it, or into other samples.
"""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np

from .augment.axes import image_axes
from .augment.user_apply import work_dtype
from .augment.user_ops import PairOp, check_compiles, user_draws
from .format.schema import ArraySpec
from .kernels.user_driver import user_op_kernel

__all__ = ["check_pair_op"]

_IDS = np.array([5, 0, 17, 2**33 + 1, 9, 123456, 3, 40], dtype=np.int64)


def _images(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        return rng.integers(0, 256, (len(_IDS), *shape), dtype=np.uint8)
    return rng.random((len(_IDS), *shape)).astype(dtype)


class _Runner:
    """Runs one op on copies of images, as the loader's driver does."""

    def __init__(self, op: PairOp, axes: tuple[int, ...], work: str, clock: np.ndarray):
        self.op, self.axes, self.clock = op, axes, clock
        self.kernel = user_op_kernel(work)
        self.work = np.dtype(work)
        #: What the canaries saw: writes before or after a batch's images.
        self.outside: set[str] = set()

    def __call__(self, images: np.ndarray, ids: np.ndarray, tag: int, threads: int) -> np.ndarray:
        """The op's output on ``images`` (samples ``ids``), run between two image-sized rows
        of canary bytes (the samples before and after it), which must come back untouched
        (else noted in :attr:`outside`)."""
        n = len(ids)
        rng = np.random.default_rng(n + 7 * tag)
        padded = np.empty((n + 2, *self.axes), self.work)
        padded.view(np.uint8)[...] = rng.integers(0, 256, padded.view(np.uint8).shape, np.uint8)
        canary = padded[[0, -1]].copy()
        padded[1:-1] = images.reshape(n, *self.axes)
        before = nb.get_num_threads()
        nb.set_num_threads(threads)
        try:
            draws = user_draws(0, self.op, tag)
            self.kernel(self.op.fn, padded[1:-1], ids.copy(), self.clock, draws, threads)
        finally:
            nb.set_num_threads(before)
        touched = padded[[0, -1]].view(np.uint8) != canary.view(np.uint8)
        for row, where in ((0, "before its first"), (1, "after its last")):
            if touched[row].any():
                count = int(touched[row].sum())
                self.outside.add(f"{count} byte{'s' * (count != 1)} {where} sample")
        return padded[1:-1].reshape(images.shape)


def _differ(x: np.ndarray, y: np.ndarray) -> str | None:
    """Where ``x`` and ``y`` (batches of one shape) first differ, in words; None: equal
    (NaN equal to NaN)."""
    same = (x == y) | ((x != x) & (y != y))
    bad = ~same.reshape(len(x), -1)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad.any(axis=1))[0])
    return f"sample {i} (id {int(_IDS[i])}): {int(bad[i].sum())} of {bad.shape[1]} values differ"


def check_pair_op(
    op: PairOp | Any,
    shape: tuple[int, ...] = (3, 32, 32),
    dtype: str = "uint8",
    *,
    channels: str = "auto",
    seed: int = 0,
    epoch: int = 3,
) -> None:
    """Check ``op`` (a :class:`~ffcv_pairs.PairOp`, or a mapping of its options) on images
    of ``shape`` and ``dtype`` (``uint8``, ``float16`` or ``float32``), read with
    ``channels`` as :class:`~ffcv_pairs.PairAugment` reads them; ``seed`` and ``epoch``
    key the draws. See the module docstring for the checks.

    Raises:
        AssertionError: one line per failed check, naming the op.
        TypeError, ValueError: ``op``, ``shape`` or ``dtype`` is not valid.
    """
    op = PairOp.from_value(op)
    spec = ArraySpec(tuple(int(s) for s in shape), dtype)
    ax = image_axes(spec, channels, "check_pair_op shape")
    axes = (ax.planes, ax.height, ax.width, ax.pixel)
    work = work_dtype(dtype)
    try:
        check_compiles(op, work)
    except TypeError as e:
        raise AssertionError(f"check_pair_op({op.name!r}): {e}") from e
    clock = np.array([seed, epoch], dtype=np.int64)
    run = _Runner(op, axes, work, clock)
    images = _images(spec.shape, work, seed)
    failures: list[str] = []

    def check(what: str, compare: Any) -> None:
        where = compare()
        if where:
            failures.append(f"{what}: {where}")

    first = run(images, _IDS, 0, 1)
    most = min(2, int(nb.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    check(
        "the output changes from one run to the next (state kept, or numpy.random: draw from u)",
        lambda: _differ(first, run(images, _IDS, 0, 1)),
    )
    check(
        f"the output changes with the thread count (1 and {most}: draw from u only)",
        lambda: _differ(first, run(images, _IDS, 0, most)),
    )

    def alone() -> str | None:
        order = np.arange(len(_IDS))[::-1]  # one sample a batch, last first: a resume
        single = np.empty_like(first)
        for i in order:
            single[i] = run(images[i : i + 1], _IDS[i : i + 1], 0, 1)[0]
        return _differ(first, single)

    check("a sample's output changes with the batch it is in (batch or resume)", alone)
    if op.paired:
        check(
            "A and B differ after a paired op on equal images (it reads tag, or draws apart)",
            lambda: _differ(first, run(images, _IDS, 1, 1)),
        )
    if run.outside:
        failures.append(
            "it writes outside its image (into the memory of the samples beside it): "
            + ", ".join(sorted(run.outside))
            + " of a batch changed"
        )
    if failures:
        lines = [f"check_pair_op({op.name!r}) on {dtype}{list(spec.shape)}: {f}" for f in failures]
        raise AssertionError("\n".join(lines))
