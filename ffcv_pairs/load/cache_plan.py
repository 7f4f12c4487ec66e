"""What a node's shard cache needs, and what it evicts: pure functions of the planned order.

The epoch's order is known before its first batch, so the sequence of shards each batch
reads is known too. A **plan** is that sequence in steps: step ``s`` is the set of shards
that batch ``s`` reads on any rank of the node (the ranks of a node run their batches in
step, within a few). It is held in CSR form: ``shards[ptr[s]:ptr[s + 1]]`` are step
``s``'s shards, ascending, each once.

* :func:`choose_victims` evicts the cached shard whose next use is furthest in the future
  (Belady's rule: optimal in misses for shards of one size, and never worse than least
  recently used), skipping shards that are pinned (mapped by a rank, or without a remote
  copy). Ties go to the higher shard number, so the choice is a pure function.
* :func:`needed_bytes` is the least a cache must hold to make progress: the largest two
  consecutive steps' shards together (the shards being read, and the next ones being
  fetched). A ``cache_limit`` below it is refused at start-up, with the number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

__all__ = [
    "NEVER",
    "Plan",
    "choose_victims",
    "merge_plans",
    "needed_bytes",
    "next_uses",
    "parse_bytes",
    "plan_of",
]

#: The next use of a shard that is not used again.
NEVER = np.iinfo(np.int64).max

_PREFIXES = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_PREFIXES |= {"KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}
_UNITS = {"": 1} | {f"{prefix}B": size for prefix, size in _PREFIXES.items()}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


class Plan(NamedTuple):
    """The shards each step reads (CSR): ``shards[ptr[s]:ptr[s + 1]]`` for step ``s``."""

    ptr: np.ndarray
    shards: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.ptr) - 1

    def at(self, step: int) -> np.ndarray:
        return self.shards[self.ptr[step] : self.ptr[step + 1]]


def parse_bytes(name: str, value: int | str) -> int:
    """``100GB``, ``"1.5 GiB"`` or an integer of bytes, as bytes (at least 1).

    Raises:
        ValueError: naming ``name``, the value and the units allowed.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"{name} must be at least 1 byte, got {value}")
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _UNITS or float(match.group(1)) * _UNITS[unit] < 1:
        raise ValueError(
            f"{name} must be bytes as an integer or a size such as '100GB' or '512MiB' "
            f"(units {', '.join(u for u in _UNITS if u)}), got {value!r}"
        )
    return int(float(match.group(1)) * _UNITS[unit])


def _from_pairs(steps: np.ndarray, shards: np.ndarray, num_steps: int) -> Plan:
    """The plan holding each ``(steps[i], shards[i])`` once, steps ``[0, num_steps)``."""
    if len(shards) == 0:
        return Plan(np.zeros(num_steps + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    width = int(shards.max()) + 1
    keys = np.unique(steps.astype(np.int64) * width + shards)
    step_of, flat = np.divmod(keys, width)
    ptr = np.searchsorted(step_of, np.arange(num_steps + 1), side="left")
    return Plan(ptr.astype(np.int64), flat.astype(np.int64))


def plan_of(batches: Sequence[np.ndarray], offsets: np.ndarray) -> Plan:
    """The plan of one rank: each batch's sample ids mapped to the shards holding them
    (shard ``k`` holds ids ``[offsets[k], offsets[k + 1])``)."""
    if not batches:
        return _from_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
    ids = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches])
    steps = np.repeat(np.arange(len(batches)), [len(b) for b in batches])
    shards = np.searchsorted(offsets, ids, side="right") - 1
    return _from_pairs(steps, shards.astype(np.int64), len(batches))


def _pairs(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Each use of ``plan`` as ``(step, shard)`` arrays."""
    return np.repeat(np.arange(plan.steps, dtype=np.int64), np.diff(plan.ptr)), plan.shards


def merge_plans(plans: Iterable[Plan]) -> Plan:
    """One node's plan from its ranks': step ``s`` reads what any rank's step ``s`` reads."""
    plans = list(plans)
    steps = max((p.steps for p in plans), default=0)
    pairs = [_pairs(p) for p in plans]
    if not pairs:
        return _from_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
    return _from_pairs(
        np.concatenate([a for a, _ in pairs]), np.concatenate([b for _, b in pairs]), steps
    )


def next_uses(plan: Plan, now: int, num_shards: int) -> np.ndarray:
    """int64 ``(num_shards,)``: the first step at or after ``now`` that reads each shard,
    or :data:`NEVER`."""
    out = np.full(num_shards, NEVER, dtype=np.int64)
    start = plan.ptr[min(max(now, 0), plan.steps)]
    step_of = np.repeat(np.arange(plan.steps, dtype=np.int64), np.diff(plan.ptr))[start:]
    shards = plan.shards[start:]
    np.minimum.at(out, shards, step_of)
    return out


def choose_victims(
    cached: Mapping[int, int],
    pinned: Iterable[int],
    free: int,
    need: int,
    uses: np.ndarray,
) -> list[int] | None:
    """The shards to evict so that ``need`` bytes fit beside ``free`` free ones: unpinned
    cached shards (``cached``: shard -> bytes), furthest next use (``uses``, see
    :func:`next_uses`) first, the higher shard first on a tie, as few as that order
    allows. ``[]`` when it fits already; None when even evicting every unpinned shard
    would not free enough."""
    if need <= free:
        return []
    held = set(pinned)
    candidates = sorted((k for k in cached if k not in held), key=lambda k: (-uses[k], -k))
    victims = []
    for k in candidates:
        victims.append(k)
        free += cached[k]
        if need <= free:
            return victims
    return None


def needed_bytes(plan: Plan, sizes: Sequence[int] | np.ndarray) -> int:
    """The bytes of the shards of the two consecutive steps that read the most (one step
    for a plan of one): what a cache must hold to read one step while it fetches the next."""
    if plan.steps == 0 or len(plan.shards) == 0:
        return 0
    sizes = np.asarray(sizes, dtype=np.int64)
    window, held = _pairs(_from_pairs(*_window_pairs(*_pairs(plan)), plan.steps))
    totals = np.zeros(plan.steps, dtype=np.int64)  # integers: sizes beyond 2**53 stay exact
    np.add.at(totals, window, sizes[held])
    return int(totals.max())


def _window_pairs(steps: np.ndarray, shards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(window, shard)`` for every use: window ``s`` and, from step 1 on, ``s - 1``."""
    later = steps >= 1
    return np.concatenate([steps, steps[later] - 1]), np.concatenate([shards, shards[later]])
