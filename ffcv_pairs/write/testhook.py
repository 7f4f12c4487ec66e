"""A test-only hook that crashes or pauses the writer at a named point.

Tests set ``FFCV_PAIRS_TEST_HOOK="<point>@<n>:<action>"`` in a writer subprocess
to create races deterministically instead of sleeping; unset (always outside
tests) a hook costs one dictionary lookup. ``@<n>`` fires once the counter passed
by the writer reaches ``n``. A hook only crashes or pauses: the writer takes the same
path as without one (a test that needs a journal entry after every page sets
``tracker.JOURNAL_SECONDS = 0``).

Points (counter):
    ``start`` (the journal holds the fingerprint; nothing else is written yet),
    ``page`` (a worker about to write data page n, or the first page of a batch
    file range), ``journal`` (the journal holds n finished pages), ``finish`` (the
    header is written), ``rename`` (``OUT.partial`` is renamed to ``OUT``, the
    sidecar is not yet in place), ``stats`` (the sidecar is in place, the image
    statistics not yet), ``sidecar`` (all files are in place, the journal not yet
    removed).

Actions:
    ``kill``: SIGKILL this process (a killed writer's workers follow it).
    ``block``: create ``$FFCV_PAIRS_TEST_DIR/reached.<pid>`` and wait until
    ``$FFCV_PAIRS_TEST_DIR/release`` exists (at most two minutes).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["HOOK_DIR_ENV", "HOOK_ENV", "hook"]

HOOK_ENV = "FFCV_PAIRS_TEST_HOOK"
HOOK_DIR_ENV = "FFCV_PAIRS_TEST_DIR"
_BLOCK_SECONDS = 120.0


def hook(point: str, count: int = 0) -> None:
    """Crash or pause here if the test hook names ``point`` and ``count`` reached its ``n``."""
    spec = os.environ.get(HOOK_ENV)
    if not spec:
        return
    where, _, action = spec.rpartition(":")
    name, _, at = where.partition("@")
    if name != point or count < int(at or 0):
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "block":
        folder = Path(os.environ[HOOK_DIR_ENV])
        (folder / f"reached.{os.getpid()}").touch()
        deadline = time.monotonic() + _BLOCK_SECONDS
        while not (folder / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        raise ValueError(f"{HOOK_ENV}: unknown action {action!r} in {spec!r}; use kill or block")
