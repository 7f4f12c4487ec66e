"""SIGINT or SIGTERM at any moment of a writer's life: it exits within 5 s with status
128 + the signal (0 with a complete file when it had already finished), leaves no
worker process behind, and ``--resume`` then writes the bytes of an uninterrupted run.

Each trial runs ``writers/write_beton.py`` on the small source with 2 workers and sends
one signal, to the writer or to its whole process group as a terminal's Ctrl-C does,
after a seeded random delay spread over an uninterrupted run: before its handlers
exist, while the workers start, mid-page, during the finish and the renames, after
it finished. Most trials fork the test process (imports done); every
``_FRESH_EVERY``-th starts a fresh interpreter, so the signal mostly lands during
its imports. A writer that leaves a partial conversion must say, in its one-line
error, what ``--resume`` will find. One killed by the signal before its handlers
exist, or while the interpreter shuts down after it finished (what a shell reports
as 128 + the signal too), passes when it wrote nothing or the complete file.

The number of trials is ``$FFCV_PAIRS_SIGNAL_TRIALS`` (default 14)::

    FFCV_PAIRS_SIGNAL_TRIALS=200 python -m pytest -s tests/test_writer_signals.py

The moments that random trials hit too rarely to catch a regression each have a test
of their own below: inside ``concurrent.futures.wait`` (where it made the executor's
shutdown wait forever), between a worker's fork and its own handlers, right after the
journal is started, during the script's imports, and outside the writer.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures._base import _AcquireFutures
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from conftest import small_argv
from writer_proc import SCRIPT, finish, reached, start_script, start_writer

from ffcv_pairs.cli import _guard, write_main
from ffcv_pairs.write.pool import WriteInterrupted, run_tasks, signals_as_exceptions

TRIALS = int(os.environ.get("FFCV_PAIRS_SIGNAL_TRIALS", "14"))
EXIT_SECONDS = 5.0  # the contract: a signalled writer is gone this soon
_FRESH_EVERY = 8
_FRESH_DELAY = 3.0  # a fresh interpreter's imports take about 2 s here
_SEED = 20240611
FINISHED = ["train.beton", "train.beton.json", "train.beton.stats"]


@dataclass(frozen=True)
class _Trial:
    index: int
    signum: int
    group: bool  # the whole process group (Ctrl-C in a terminal), else the writer alone
    delay: float
    fresh: bool

    def __str__(self) -> str:
        how = "fresh interpreter" if self.fresh else "forked"
        to = "its group" if self.group else "the writer"
        name = signal.Signals(self.signum).name
        return f"trial {self.index} ({how}, {name} to {to} after {self.delay:.3f} s)"


def _session(sid: int) -> list[int]:
    """Live processes (zombies aside) of session ``sid``: the writer and its workers."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, session = text[text.rindex(")") + 2 :].split()[:4]
        if int(session) == sid and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _send(pid: int, signum: int, group: bool) -> None:
    try:
        if group:
            try:
                os.killpg(pid, signum)
                return
            except ProcessLookupError:  # no session of its own yet
                pass
        os.kill(pid, signum)
    except ProcessLookupError:  # already gone
        pass


def _start(trial: _Trial, argv: list[str], log: Path) -> tuple[int, Callable[[float], int | None]]:
    """The writer's pid and a ``wait(timeout)`` returning its status (None: still running);
    a death by signal N is -N, as :mod:`subprocess` reports it."""
    if trial.fresh:
        with log.open("w") as out:
            popen = subprocess.Popen(
                [sys.executable, str(SCRIPT), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def wait_fresh(timeout: float) -> int | None:
            try:
                return popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return None

        return popen.pid, wait_fresh
    proc = start_script(argv, log)

    def wait_forked(timeout: float) -> int | None:
        proc.join(timeout)
        return proc.exitcode

    assert proc.pid is not None
    return proc.pid, wait_forked


def _run(trial: _Trial, argv: list[str], log: Path) -> tuple[int | None, float, list[int]]:
    """Run one trial: the status (None: hung), seconds from the signal to the exit, and
    the processes of the writer's session still alive after it."""
    pid, wait = _start(trial, argv, log)
    time.sleep(trial.delay)
    sent = time.monotonic()
    _send(pid, trial.signum, trial.group)
    rc = wait(EXIT_SECONDS)
    latency = time.monotonic() - sent
    left: list[int] = []
    deadline = time.monotonic() + 1.0  # a worker may outlive a writer killed by SIGKILL briefly
    while (left := _session(pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    if rc is None or left:
        _send(pid, signal.SIGKILL, True)
        for p in left:
            _send(p, signal.SIGKILL, False)
        wait(10.0)
    return rc, latency, left


def _says_what_was_kept(log: str) -> bool:
    """Whether the last line is the writer's one-line error, saying what ``--resume`` has."""
    last = log.strip().splitlines()[-1] if log.strip() else ""
    return last.startswith("error: ") and ("--resume" in last or "nothing was kept" in last)


def _check(
    trial: _Trial, argv: list[str], out: Path, log: Path, reference: dict[str, bytes]
) -> tuple[str | None, float | None]:
    """What went wrong in one trial (None: nothing) and its exit latency."""
    rc, latency, left = _run(trial, argv, log)
    text = log.read_text(errors="replace") if log.exists() else ""
    if rc is None:
        return f"{trial}: still running {EXIT_SECONDS} s after the signal; log: {text!r}", None
    if left:
        return f"{trial}: exited {rc} but left processes {left} running", latency
    written = sorted(p.name for p in out.iterdir()) if out.exists() else []
    if rc == 0:
        if written != FINISHED or (out / "train.beton").read_bytes() != reference["beton"]:
            return f"{trial}: exited 0 but wrote {written}", latency
        return None, latency
    if rc == -trial.signum:
        # Only before its handlers exist, or once done (CPython restores the default
        # handlers while it shuts down), may a writer die by the signal.
        if written not in ([], FINISHED):
            return f"{trial}: died by the signal after writing {written}; log: {text!r}", latency
    elif rc != 128 + trial.signum:
        return f"{trial}: exit status {rc}, not {128 + trial.signum}; log: {text!r}", latency
    elif "Traceback" in text:
        return f"{trial}: status {rc} with a traceback: {text!r}", latency
    elif written not in ([], FINISHED) and not _says_what_was_kept(text):
        return f"{trial}: left {written} without a line on --resume: {text!r}", latency
    if write_main([*argv, "--resume"]) != 0:
        return f"{trial}: --resume failed after status {rc}", latency
    got = {"beton": (out / "train.beton").read_bytes()}
    got["stats"] = (out / "train.beton.stats").read_bytes()
    if got != reference or sorted(p.name for p in out.iterdir()) != FINISHED:
        return f"{trial}: --resume after status {rc} wrote other bytes", latency
    return None, latency


def test_a_signal_at_any_moment_ends_the_writer_cleanly(
    capsys,
    tmp_path: Path,
    small_src: Path,
    small_reference: bytes,
    small_reference_stats: bytes,
) -> None:
    reference = {"beton": small_reference, "stats": small_reference_stats}
    # One uninterrupted run times the writer's life, over which the signals are spread.
    base = tmp_path / "base"
    t0 = time.monotonic()
    base_proc = start_script(small_argv(small_src, base, "--workers", "2"), tmp_path / "base.log")
    base_proc.join(60)
    life = time.monotonic() - t0
    assert base_proc.exitcode == 0, (tmp_path / "base.log").read_text()
    assert (base / "train.beton").read_bytes() == small_reference

    rng = random.Random(_SEED)
    failures, latencies = [], []
    for i in range(TRIALS):
        fresh = i % _FRESH_EVERY == _FRESH_EVERY - 1
        trial = _Trial(
            index=i,
            signum=rng.choice([signal.SIGINT, signal.SIGTERM]),
            group=rng.random() < 0.5,
            delay=rng.uniform(0.0, _FRESH_DELAY if fresh else 1.2 * life),
            fresh=fresh,
        )
        out = tmp_path / f"t{i}"
        argv = small_argv(small_src, out, "--workers", "2")
        problem, latency = _check(trial, argv, out, tmp_path / f"t{i}.log", reference)
        capsys.readouterr()  # the resumed runs' summaries
        if problem is not None:
            failures.append(problem)
        if latency is not None:
            latencies.append(latency)
    with capsys.disabled():
        print(
            f"\nsignal trials: {TRIALS}, failures: {len(failures)}, writer's life "
            f"{life:.2f} s, exit after the signal: max {max(latencies, default=0):.2f} s"
        )
    assert not failures, "\n".join(failures)


# -- the moments that the random trials hit rarely, each made certain -------------------------


def _nap(x: int) -> int:
    time.sleep(0.2)
    return x


def _signal_inside_wait(signum: int) -> None:
    """Run tasks on 2 workers; send ``signum`` to this process while
    ``concurrent.futures.wait`` holds the lock of one future and not yet the next."""
    me, lines = os.getpid(), [0]

    def inside(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and os.getpid() == me and lines[0] >= 0:
            lines[0] += 1
            if lines[0] == 3:  # the loop's line, one acquire(), the loop's line again
                lines[0] = -1
                os.kill(me, signum)
        return inside

    enter = _AcquireFutures.__enter__.__code__
    sys.settrace(lambda frame, event, arg: inside if frame.f_code is enter else None)
    try:
        with signals_as_exceptions():
            run_tasks(_nap, range(8), 2, lambda i, r: None)
    except (KeyboardInterrupt, WriteInterrupted):
        sys.settrace(None)
        os._exit(0 if lines[0] == -1 else 3)
    os._exit(4)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_wait_holds_futures_locks_does_not_hang(signum: int) -> None:
    # Raised there, the exception left a future locked by the main thread; the executor's
    # shutdown then waited forever for its manager thread, blocked on that lock.
    proc = mp.get_context("fork").Process(target=_signal_inside_wait, args=(signum,))
    proc.start()
    proc.join(30)  # a hang: the exit comes within a second
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    assert proc.exitcode == 0


def _hold_after_fork(folder: Path) -> None:
    """In a new worker, before anything else runs in it: wait until released."""
    (folder / f"reached.{os.getpid()}").touch()
    while not (folder / "release").exists():
        time.sleep(0.01)


def _sigterm_pending(pid: int) -> bool:
    """Whether SIGTERM waits, blocked, to be delivered to process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text()
    shared = next(line for line in status.splitlines() if line.startswith("ShdPnd:"))
    return bool(int(shared.split()[1], 16) & 1 << (signal.SIGTERM - 1))


def _signal_while_workers_start(folder: Path, log: str) -> None:
    os.setsid()
    out = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644)
    os.dup2(out, 2)
    os.register_at_fork(after_in_child=partial(_hold_after_fork, folder))  # this process only
    try:
        with signals_as_exceptions():
            run_tasks(_nap, range(8), 2, lambda i, r: None)
    except KeyboardInterrupt:
        os._exit(128 + signal.SIGINT)
    except WriteInterrupted as e:
        os._exit(128 + e.signum)
    os._exit(1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_group_while_workers_start_ends_the_run_quietly(
    tmp_path: Path, signum: int
) -> None:
    # A worker runs the writer's handlers from the fork until it sets its own: the signal
    # that a terminal (Ctrl-C) or a job manager sends to the whole group raised there (a
    # traceback on stderr), or, recorded as the writer's, was lost, and so was the
    # writer's SIGTERM that should have stopped it: 5 s of waiting, then SIGKILL.
    log = tmp_path / "log"
    child = mp.get_context("fork").Process(
        target=_signal_while_workers_start, args=(tmp_path, str(log))
    )
    child.start()
    workers = reached(tmp_path, 2)
    os.killpg(child.pid, signum)
    sent = time.monotonic()
    # Hold the workers just after the fork until the writer's SIGTERM waits in each
    # (blocked), or, were it taken by an inherited handler instead, for 2 s.
    while not all(map(_sigterm_pending, workers)) and time.monotonic() - sent < 2:
        time.sleep(0.01)
    (tmp_path / "release").touch()
    child.join(EXIT_SECONDS - (time.monotonic() - sent))
    exited = child.exitcode
    if exited is None:
        child.kill()
        child.join()
    assert exited == 128 + signum
    assert log.read_text() == ""
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_sigterm_once_the_journal_is_started_keeps_nothing_and_says_so(
    tmp_path: Path, small_src: Path
) -> None:
    out, hooks = tmp_path / "out", tmp_path / "hooks"
    hooks.mkdir()
    argv = small_argv(small_src, out, "--workers", "2")
    proc = start_writer(argv, tmp_path / "log", hook="start:block", hook_dir=hooks)
    reached(hooks)
    os.kill(proc.pid, signal.SIGTERM)
    assert finish(proc) == 128 + signal.SIGTERM
    line = (tmp_path / "log").read_text().strip()
    assert line == f"error: {out / 'train.beton'}: interrupted by SIGTERM; nothing was kept"
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("point", ["rename", "sidecar"])
def test_sigterm_once_the_file_is_in_place_says_resume_finishes_it(
    tmp_path: Path, small_src: Path, small_reference: bytes, point: str
) -> None:
    # At "sidecar" every file is in place but the journal; a run of 3 test processes once
    # hit the moment after that hook and before the journal's removal, which then lay
    # outside the handler that says what was kept: "interrupted by SIGTERM", nothing more.
    out, hooks = tmp_path / "out", tmp_path / "hooks"
    hooks.mkdir()
    argv = small_argv(small_src, out, "--workers", "2")
    proc = start_writer(argv, tmp_path / "log", hook=f"{point}:block", hook_dir=hooks)
    reached(hooks)
    os.kill(proc.pid, signal.SIGTERM)
    assert finish(proc) == 128 + signal.SIGTERM
    line = (tmp_path / "log").read_text().strip()
    done = "and its sidecar are" if point == "sidecar" else "is"
    assert line == (
        f"error: {out / 'train.beton'}: interrupted by SIGTERM; train.beton {done} in place, "
        "not yet all: rerun with --resume to continue"
    )
    assert write_main([*argv, "--resume"]) == 0
    assert sorted(p.name for p in out.iterdir()) == FINISHED
    assert (out / "train.beton").read_bytes() == small_reference


def test_ctrl_c_while_the_script_imports_is_one_line(tmp_path: Path, small_src: Path) -> None:
    # A KeyboardInterrupt raised inside an extension module's initialisation aborted the
    # interpreter (SIGABRT); elsewhere in the imports it printed a traceback.
    out = tmp_path / "out"
    argv = [sys.executable, str(SCRIPT), *small_argv(small_src, out, "--workers", "2")]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True)
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 60
    while "libtorch_cpu" not in maps.read_text() and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=EXIT_SECONDS)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert err == "error: interrupted by Ctrl-C while starting; nothing was written\n"
    assert not out.exists()


def test_ctrl_c_outside_the_writer_is_one_line(capsys) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert _guard(interrupted) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "error: interrupted by Ctrl-C\n"
