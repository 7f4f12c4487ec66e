"""Run the write command in a forked child, for kill, signal and concurrency tests.

Forking the test process skips the seconds a fresh interpreter spends importing
torch, numba and ffcv. The child gets its own session (so signals reach only it
and its workers), its own environment (the test hook) and a log file for stdout
and stderr. :func:`start_script` runs ``writers/write_beton.py`` itself in a child
that starts with the signal handlers of a fresh interpreter.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import runpy
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ffcv_pairs.write.testhook import HOOK_DIR_ENV, HOOK_ENV

WAIT_SECONDS = 120.0  # only a hang takes this long
SCRIPT = Path(__file__).parents[1] / "writers" / "write_beton.py"
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _child(argv: list[str], env: dict[str, str], log: str, background: bool) -> None:
    if background:  # what a shell's `&` gives a job: SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setsid()
    out = open(log, "w", buffering=1)  # noqa: SIM115 - lives until the child exits
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    sys.stdout = sys.stderr = out
    os.environ.update(env)
    from ffcv_pairs.cli import write_main

    sys.exit(write_main(argv))


def start_writer(
    argv: Sequence[str],
    log: Path,
    hook: str | None = None,
    hook_dir: Path | None = None,
    background: bool = False,
) -> mp.process.BaseProcess:
    """``write_beton.py argv`` in a forked child; ``hook`` sets the writer's test hook;
    ``background`` starts it with SIGINT ignored, as a shell starts ``cmd &``."""
    env = {}
    if hook is not None:
        env[HOOK_ENV] = hook
    if hook_dir is not None:
        env[HOOK_DIR_ENV] = str(hook_dir)
    proc = mp.get_context("fork").Process(
        target=_child, args=(list(argv), env, str(log), background)
    )
    proc.start()
    return proc


def _script_child(argv: list[str], log: str) -> None:
    # What CPython sets up before running a script; SIGINT and SIGTERM stay blocked
    # (inherited from start_script) until then, so none reaches the test's handlers.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.setsid()
        out = open(log, "w", buffering=1)  # noqa: SIM115 - lives until the child exits
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.stdout = sys.stderr = out
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        sys.argv = [str(SCRIPT), *argv]
        runpy.run_path(str(SCRIPT), run_name="__main__")
    except KeyboardInterrupt:  # uncaught: CPython dies by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def start_script(argv: Sequence[str], log: Path) -> mp.process.BaseProcess:
    """``python writers/write_beton.py argv`` as a forked child in its own session: it
    starts with a fresh interpreter's signal handlers (a SIGINT that the script does not
    catch kills it by SIGINT, as CPython does) but without the seconds of imports."""
    proc = mp.get_context("fork").Process(target=_script_child, args=(list(argv), str(log)))
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
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
