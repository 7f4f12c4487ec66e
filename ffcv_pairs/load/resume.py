"""Mid-epoch resume: what a loader's state must match to continue an epoch."""

from __future__ import annotations

from typing import Any

from .order import OrderSpec

__all__ = ["check_resume", "resume_fingerprint"]


def resume_fingerprint(spec: OrderSpec, num_samples: int) -> dict[str, Any]:
    """The settings an epoch's order depends on."""
    return {
        "seed": spec.seed,
        "world_size": spec.world_size,
        "batch_size": spec.batch_size,
        "order": spec.kind,
        "drop_last": spec.drop_last,
        "window_pages": spec.window_pages,
        "num_samples": num_samples,
    }


def check_resume(state: dict[str, Any], fingerprint: dict[str, Any], num_batches: int) -> int:
    """The batches of ``state['epoch']`` already consumed, once ``state`` is checked.

    Mid-epoch state (``batches_consumed > 0``) must come from a job with the same
    seed, world size, batch size, order and file; a different world size is
    accepted only at an epoch boundary, where the next epoch is re-sharded.

    Raises:
        ValueError: naming the setting that differs.
    """
    done = int(state["batches_consumed"])
    if not done:
        return 0
    diff = {k: (state.get(k), v) for k, v in fingerprint.items() if state.get(k) != v}
    if diff:
        what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in diff.items())
        raise ValueError(
            f"cannot resume mid-epoch (epoch {state['epoch']}, batch {done}): {what}. "
            f"Resume with the original settings, or from an end-of-epoch checkpoint"
        )
    if done > num_batches:
        raise ValueError(f"batches_consumed {done} exceeds the epoch's {num_batches}")
    return done
