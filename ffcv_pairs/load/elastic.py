"""Elastic mid-epoch resume: the rest of an epoch on any world size, as a pure function.

An epoch that was interrupted is a list of :class:`Segment`\\ s, one per stretch
run on one world: ``world_size`` ranks reading batches of ``batch_size``, each
rank having consumed ``batches`` of them (the same on every rank under DDP).

* The first segment reads the epoch's own order (:func:`~.order.epoch_order`):
  rank ``r`` consumed the first ``batches * batch_size`` ids of its order.
* What no rank consumed is the **pool**: each rank's unconsumed suffix, in its
  order, then (with ``drop_last``) the samples its slice left out, rank by rank,
  then the samples past the last slice. Each suffix is still page-local.
* The next segment deals the pool out exactly as an epoch is dealt
  (:func:`~.order.deal`: contiguous, equal slices; ``drop_last`` cuts each to a
  multiple of the batch, otherwise the short ones are padded by wrapping), and
  reads each slice in pool order. A later resume applies the same rule again,
  so ``W -> W' -> W''`` works, from nothing but the list of segments.

So every sample of the epoch is read once, apart from fewer than ``W' x
batch_size`` dropped at the end with ``drop_last`` (nothing before: the pool
takes back what earlier slices left out); and since augmentation is keyed by
``(seed, epoch, sample id)``, every sample's bytes are those of an
uninterrupted run. A resume on the same world and batch size continues the
last segment, so the batches are also in the very same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from .._checks import flag, integer, shown
from .index import PageIndex
from .node_order import node_resumed_order, rank_order
from .order import OrderSpec, deal, read_order

__all__ = [
    "MAX_BATCH",
    "MAX_WORLD",
    "EpochPosition",
    "Segment",
    "batches_in",
    "remaining",
    "resume_epoch",
    "resume_point",
    "resumed_order",
]


#: Bounds a saved state's numbers must respect (far beyond any real job).
MAX_WORLD = 1 << 20
MAX_BATCH = 1 << 40


@dataclass(frozen=True)
class Segment:
    """One stretch of an epoch on one world.

    Args:
        world_size: Ranks in that world.
        batch_size: Samples per batch on one rank.
        drop_last: Whether that world cut its slices to whole batches.
        batches: Batches each rank consumed in this stretch.
        nodes: Physical nodes of that world, for the node-local order (1 for the
            global order; states saved before it existed have no ``nodes``).
    """

    world_size: int
    batch_size: int
    drop_last: bool
    batches: int = 0
    nodes: int = 1

    def __post_init__(self) -> None:
        for name in ("world_size", "batch_size", "batches", "nodes"):
            value = getattr(self, name)
            least = 0 if name == "batches" else 1
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise TypeError(f"segment {name} must be an int, got {shown(value)}")
            if value < least:
                raise ValueError(f"segment {name} must be at least {least}, got {value}")
        if self.world_size % self.nodes:
            raise ValueError(
                f"segment world_size {self.world_size} is not a whole number of ranks on each "
                f"of its {self.nodes} nodes"
            )

    @classmethod
    def from_dict(cls, data: Any, name: str = "segment") -> Segment:
        """A segment of a saved state, checked as strictly as a file format.

        Raises:
            TypeError, ValueError: not a mapping, a missing or unknown key, or a value of
                the wrong type or range (named as ``name.key``).
        """
        if not isinstance(data, dict):
            raise TypeError(f"{name} must be a mapping, got {data!r} ({type(data).__name__})")
        keys = {"world_size", "batch_size", "drop_last", "batches"}
        if set(data) - {"nodes"} != keys:
            raise ValueError(
                f"{name} must have the keys {sorted(keys)}, got {sorted(map(str, data))}"
            )
        return cls(
            integer(f"{name}.world_size", data["world_size"], 1, MAX_WORLD),
            integer(f"{name}.batch_size", data["batch_size"], 1, MAX_BATCH),
            flag(f"{name}.drop_last", data["drop_last"]),
            integer(f"{name}.batches", data["batches"], 0, MAX_BATCH),
            integer(f"{name}.nodes", data.get("nodes", 1), 1, MAX_WORLD),
        )

    def to_dict(self) -> dict[str, Any]:
        """As saved in a state; ``nodes`` only where it is not 1 (states of the global order
        read as before)."""
        data = asdict(self)
        if self.nodes == 1:
            del data["nodes"]
        return data

    def same_world(self, other: Segment) -> bool:
        """Same ranks (and nodes), batch size and cut: one continues the other."""
        return (self.world_size, self.batch_size, self.drop_last, self.nodes) == (
            other.world_size,
            other.batch_size,
            other.drop_last,
            other.nodes,
        )


def batches_in(samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches a rank reads from ``samples`` ids."""
    return samples // batch_size if drop_last else -(-samples // batch_size)


def resume_point(segments: Sequence[Segment], now: Segment) -> tuple[tuple[Segment, ...], int]:
    """``(history, skip)`` for a loader whose own world is ``now``.

    The last segment is continued (``skip`` batches into this world's order) when
    it ran on the same world; otherwise every segment is history and this world
    starts a new one. Segments in which nothing was consumed are left out.
    """
    if segments and segments[-1].same_world(now):
        history, skip = segments[:-1], segments[-1].batches
    else:
        history, skip = tuple(segments), 0
    return tuple(s for s in history if s.batches), skip


def _take(
    index: PageIndex,
    spec: OrderSpec,
    epoch: int,
    pool: np.ndarray | None,
    span: tuple[int, int],
    rank: int | None,
) -> np.ndarray:
    """Positions ``span = (start, length)`` (wrapping) of the epoch (``pool is None``;
    drawn through ``rank``'s window) or of ``pool`` (in pool order)."""
    start, length = span
    if pool is None:
        return read_order(index, spec, epoch, start, length, rank)
    return pool[(start + np.arange(length, dtype=np.int64)) % max(1, len(pool))]


def remaining(
    index: PageIndex, spec: OrderSpec, epoch: int, history: Sequence[Segment]
) -> np.ndarray | None:
    """The pool: ids of ``epoch`` that no rank of ``history`` consumed, in order
    (None when there is no history: the epoch's own sequence).

    Raises:
        ValueError: a segment claims more batches than its ranks had.
    """
    if not history:
        return None
    pool: np.ndarray | None = None
    consumed = np.zeros(int(index.samples.max(initial=-1)) + 1, dtype=bool)
    for number, seg in enumerate(history):
        total = index.num_samples if pool is None else len(pool)
        world, size = seg.world_size, seg.batch_size
        pieces = []
        for rank in range(world):
            start, length = deal(total, world, rank, size, seg.drop_last)
            order = _take(index, spec, epoch, pool, (start, length), rank)
            if seg.batches > batches_in(len(order), size, seg.drop_last):
                raise ValueError(
                    f"resume segment {number} ({world} ranks, batch {size}) says each rank "
                    f"consumed {seg.batches} batches, but they had "
                    f"{batches_in(len(order), size, seg.drop_last)}: a state from another file "
                    f"or selection?"
                )
            cut = min(len(order), seg.batches * size)
            consumed[order[:cut]] = True
            pieces.append(order[cut:])
            if seg.drop_last:  # what the cut to whole batches left out of this slice
                each = total // world
                pieces.append(
                    _take(index, spec, epoch, pool, (start + length, each - length), None)
                )
        if seg.drop_last:
            tail = world * (total // world)
            pieces.append(_take(index, spec, epoch, pool, (tail, total - tail), None))
        merged = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        # Padding (no drop_last) reads a few ids twice: keep each id once, unconsumed.
        first = np.zeros(len(merged), dtype=bool)
        first[np.unique(merged, return_index=True)[1]] = True
        pool = merged[first & ~consumed[merged]]
    return pool


def resumed_order(
    index: PageIndex, spec: OrderSpec, epoch: int, history: Sequence[Segment] = ()
) -> np.ndarray:
    """The ids ``spec.rank`` reads in ``epoch`` after ``history``, in order.

    Without history, the epoch's own order. A pure function: every rank of a
    resumed job computes its share from the same (rank 0's) segments.
    """
    if spec.partition == "node":
        return node_resumed_order(index, spec, epoch, history)
    pool = remaining(index, spec, epoch, history)
    if pool is None:
        return rank_order(index, spec, epoch)
    span = spec.share(len(pool))
    return _take(index, spec, epoch, pool, span, spec.rank)


@dataclass(frozen=True)
class EpochPosition:
    """Where a rank stands in an epoch.

    Attributes:
        epoch: The epoch.
        history: Segments run on other worlds before this one.
        order: This rank's ids for the epoch after ``history``, whole.
        now: This world's segment; ``now.batches`` of ``order``'s batches are consumed.
    """

    epoch: int
    history: tuple[Segment, ...]
    order: np.ndarray
    now: Segment

    @classmethod
    def start(cls, index: PageIndex, spec: OrderSpec, epoch: int) -> EpochPosition:
        return cls(epoch, (), resumed_order(index, spec, epoch), _world(spec))

    @property
    def batches(self) -> int:
        """Batches in ``order``."""
        return batches_in(len(self.order), self.now.batch_size, self.now.drop_last)

    @property
    def finished(self) -> bool:
        return self.now.batches >= self.batches

    def advanced(self) -> EpochPosition:
        """One more batch consumed."""
        return replace(self, now=replace(self.now, batches=self.now.batches + 1))

    def segments(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in (*self.history, self.now)]


def _world(spec: OrderSpec) -> Segment:
    nodes = spec.nodes if spec.partition == "node" else 1
    return Segment(spec.world_size, spec.batch_size, spec.drop_last, nodes=nodes)


def resume_epoch(
    index: PageIndex, spec: OrderSpec, epoch: int, segments: Sequence[Segment]
) -> EpochPosition:
    """This rank's position in ``epoch`` after ``segments`` (rank 0's, from any world).

    Raises:
        ValueError: the segments claim more batches than there were.
    """
    history, skip = resume_point(segments, _world(spec))
    position = EpochPosition(
        epoch, history, resumed_order(index, spec, epoch, history), _world(spec)
    )
    if skip > position.batches:
        raise ValueError(
            f"state says {skip} batches of epoch {epoch} were consumed on this world, "
            f"which has {position.batches}"
        )
    return replace(position, now=replace(position.now, batches=skip))
