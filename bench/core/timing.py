"""Timing of epochs, and the command loop every contestant process runs.

Standard library only: the LitData and Streaming runners import this module from
their own venvs. Times are ``time.perf_counter()``, which on Linux is
``CLOCK_MONOTONIC`` and so comparable between processes (simulated ranks).
"""

from __future__ import annotations

import itertools
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["EpochSource", "LoaderSource", "run_epochs", "run_gaps", "serve"]


class EpochSource(Protocol):
    """What a contestant looks like inside its process."""

    def epoch(self, index: int) -> Iterable[Any]:
        """The batches of epoch ``index``."""

    def count(self, batch: Any) -> int:
        """Samples in ``batch``."""

    def close(self) -> None:
        """Stop workers and threads."""


class LoaderSource:
    """An iterable loader as an :class:`EpochSource` (batches are ``(A, B, labels)``)."""

    def __init__(
        self,
        loader: Any,
        set_epoch: Callable[[int], None] | None = None,
        close: Callable[[], None] | None = None,
    ):
        self.loader, self._set_epoch, self._close = loader, set_epoch, close

    def epoch(self, index: int) -> Iterable[Any]:
        if self._set_epoch is not None:
            self._set_epoch(index)
        return iter(self.loader)

    def count(self, batch: Any) -> int:
        return int(batch[2].shape[0])

    def close(self) -> None:
        if self._close is not None:
            self._close()
        self.loader = None


def run_epochs(
    source: EpochSource,
    *,
    first_epoch: int,
    min_epochs: int,
    min_seconds: float,
    time_box: float,
    abandon: bool,
    min_batches: int = 1,
) -> dict[str, Any]:
    """Run epochs until ``min_epochs`` and ``min_seconds`` are both reached, or ``time_box``.

    With ``abandon`` the time box can stop an epoch half way, once ``min_batches``
    batches arrived (slow contestants); otherwise it is checked only at epoch
    boundaries.

    Returns:
        ``{"epochs": [...], "next_epoch": e}``; each epoch records ``start`` (when
        ``iter`` was called), ``first``/``last`` (arrival of its first and last
        batch), ``first_n`` (samples in the first batch), ``samples``, ``batches``
        and ``complete``.
    """
    t0 = time.perf_counter()
    marks: list[dict[str, Any]] = []
    epoch = first_epoch
    total_batches = 0
    while True:
        start = time.perf_counter()
        first = last = None
        samples = batches = first_n = 0
        stopped = False
        for batch in source.epoch(epoch):
            now = time.perf_counter()
            k = source.count(batch)
            if first is None:
                first, first_n = now, k
            last = now
            samples += k
            batches += 1
            total_batches += 1
            if abandon and now - t0 >= time_box and total_batches >= min_batches:
                stopped = True
                break
        marks.append(
            {
                "epoch": epoch,
                "start": start,
                "first": first,
                "last": last,
                "first_n": first_n,
                "samples": samples,
                "batches": batches,
                "complete": not stopped,
            }
        )
        epoch += 1
        elapsed = time.perf_counter() - t0
        enough = len(marks) >= min_epochs and elapsed >= min_seconds
        if stopped or enough or elapsed >= time_box:
            return {"epochs": marks, "next_epoch": epoch}


def run_gaps(epochs: list[dict[str, Any]]) -> list[float]:
    """Seconds from the last batch of each epoch to the first batch of the next."""
    return [
        b["first"] - a["last"]
        for a, b in itertools.pairwise(epochs)
        if a["complete"] and a["last"] is not None and b["first"] is not None
    ]


def serve(
    recv: Callable[[], dict[str, Any]],
    send: Callable[[dict[str, Any]], None],
    build: Callable[[], EpochSource],
    *,
    rebuild_each_run: bool = False,
) -> None:
    """Answer ``build``, ``run`` and ``stop`` commands until ``stop``.

    ``run`` takes the keyword arguments of :func:`run_epochs` but ``first_epoch``.
    Errors are sent back as ``{"error": ...}`` and the loop goes on.
    """
    source: EpochSource | None = None
    next_epoch = 0
    while True:
        msg = recv()
        cmd = msg.get("cmd")
        try:
            if cmd == "stop":
                if source is not None:
                    source.close()
                send({"ok": True})
                return
            if cmd == "build" or (cmd == "run" and (source is None or rebuild_each_run)):
                if source is not None:
                    source.close()
                t = time.perf_counter()
                source = build()
                # A source may report its own build time (ranks: imports excluded).
                built = getattr(source, "build_s", time.perf_counter() - t)
                if cmd == "build":
                    send({"build_s": built})
                    continue
            if cmd != "run":
                raise ValueError(f"unknown command {cmd!r}; must be build, run or stop")
            assert source is not None
            kw = {k: v for k, v in msg.items() if k != "cmd"}
            if hasattr(source, "run"):
                result = source.run(first_epoch=next_epoch, **kw)
            else:
                result = run_epochs(source, first_epoch=next_epoch, **kw)
            next_epoch = result["next_epoch"]
            if rebuild_each_run:
                source.close()
                source = None
            send(result)
        except Exception as e:
            lines = traceback.format_exception_only(type(e), e)
            send({"error": lines[-1].strip(), "traceback": traceback.format_exc()})
