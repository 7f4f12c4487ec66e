"""Run the write command in a forked child, for kill, signal and concurrency tests.

Forking the test process skips the seconds a fresh interpreter spends importing
torch, numba and ffcv. The child gets its own session (so signals reach only it
and its workers), its own environment (the test hook) and a log file for stdout
and stderr.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ffcv_pairs.write.testhook import HOOK_DIR_ENV, HOOK_ENV

WAIT_SECONDS = 120.0  # only a hang takes this long


def _child(argv: list[str], env: dict[str, str], log: str) -> None:
    os.setsid()
    out = open(log, "w", buffering=1)  # noqa: SIM115 - lives until the child exits
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    sys.stdout = sys.stderr = out
    os.environ.update(env)
    from ffcv_pairs.cli import write_main

    sys.exit(write_main(argv))


def start_writer(
    argv: Sequence[str], log: Path, hook: str | None = None, hook_dir: Path | None = None
) -> mp.process.BaseProcess:
    """``write_beton.py argv`` in a forked child; ``hook`` sets the writer's test hook."""
    env = {}
    if hook is not None:
        env[HOOK_ENV] = hook
    if hook_dir is not None:
        env[HOOK_DIR_ENV] = str(hook_dir)
    proc = mp.get_context("fork").Process(target=_child, args=(list(argv), env, str(log)))
    proc.start()
    return proc


def finish(proc: mp.process.BaseProcess) -> int:
    """The child's exit code; a child still running after ``WAIT_SECONDS`` has hung."""
    proc.join(WAIT_SECONDS)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        raise AssertionError(f"writer {proc.pid} hung: still running after {WAIT_SECONDS} s")
    return proc.exitcode


def reached(folder: Path, count: int = 1) -> list[int]:
    """Wait until ``count`` workers have blocked at the test hook; their pids."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        pids = sorted(int(p.name.split(".")[1]) for p in folder.glob("reached.*"))
        if len(pids) >= count:
            return pids
        time.sleep(0.02)
    raise AssertionError(f"no worker reached the hook within {WAIT_SECONDS} s")
