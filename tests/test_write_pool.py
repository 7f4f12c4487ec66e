"""The writer never hangs: a dead worker, SIGTERM and Ctrl-C end it with a clean error and
a .partial that --resume completes; a second writer on the same output is refused."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import SMALL_N, small_argv
from writer_proc import finish, reached, start_writer

from ffcv_pairs.cli import write_main
from ffcv_pairs.write.pool import WriteError, run_tasks
from ffcv_pairs.write.sources import SourceError

N = SMALL_N


def _one_line(log: Path) -> str:
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _resume_matches(capsys, small_src: Path, out: Path, small_reference: bytes) -> None:
    capsys.readouterr()
    assert write_main(small_argv(small_src, out, "--workers", "2", "--resume")) == 0
    assert "resumed: kept" in capsys.readouterr().out
    assert (out / "train.beton").read_bytes() == small_reference


def _blocked_writer(
    tmp_path: Path, small_src: Path, background: bool = False
) -> tuple[multiprocessing.process.BaseProcess, Path, list[int]]:
    """A 2-worker writer whose worker has blocked at page 6: (process, out folder, workers)."""
    out, hooks = tmp_path / "out", tmp_path / "hooks"
    hooks.mkdir()
    proc = start_writer(
        small_argv(small_src, out, "--workers", "2"),
        tmp_path / "log",
        hook="page@6:block",
        hook_dir=hooks,
        background=background,
    )
    return proc, out, reached(hooks)


def test_killed_worker_ends_the_writer_cleanly(
    capsys, tmp_path: Path, small_src: Path, small_reference: bytes
) -> None:
    proc, out, workers = _blocked_writer(tmp_path, small_src)
    victim = workers[0]
    os.kill(victim, signal.SIGKILL)
    assert finish(proc) == 2  # returns instead of waiting forever for the lost page
    line = _one_line(tmp_path / "log")
    assert f"worker process {victim} was killed by SIGKILL" in line, line
    assert "train.beton.partial kept with" in line and "--resume" in line
    assert not (out / "train.beton").exists()
    _resume_matches(capsys, small_src, out, small_reference)


@pytest.mark.parametrize(
    ("signum", "words"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")]
)
def test_sigterm_and_ctrl_c_stop_the_writer(
    capsys, tmp_path: Path, small_src: Path, small_reference: bytes, signum: int, words: str
) -> None:
    proc, out, workers = _blocked_writer(tmp_path, small_src)
    os.kill(proc.pid, signum)
    assert finish(proc) == 128 + signum
    line = _one_line(tmp_path / "log")
    assert f"interrupted by {words}" in line and "--resume" in line, line
    for pid in workers:  # the blocked workers were stopped too
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    _resume_matches(capsys, small_src, out, small_reference)


def test_a_background_writer_ignores_ctrl_c_and_stops_on_sigterm(
    tmp_path: Path, small_src: Path
) -> None:
    # Started with `&`, a job has SIGINT ignored, so that a Ctrl-C meant for the terminal's
    # foreground leaves it running; the writer keeps it so. Its workers ignore SIGINT in
    # any case (the writer handles Ctrl-C) and carry on as well.
    proc, _, workers = _blocked_writer(tmp_path, small_src, background=True)
    os.kill(proc.pid, signal.SIGINT)
    for pid in workers:
        os.kill(pid, signal.SIGINT)
    proc.join(1.0)  # a Ctrl-C taken stops it within 0.2 s
    assert proc.exitcode is None, (tmp_path / "log").read_text()
    for pid in workers:
        os.kill(pid, 0)  # still there
    os.kill(proc.pid, signal.SIGTERM)
    assert finish(proc) == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM" in _one_line(tmp_path / "log")


def test_second_writer_is_refused_and_first_finishes_intact(
    capsys, tmp_path: Path, small_src: Path, small_reference: bytes
) -> None:
    out, hooks = tmp_path / "out", tmp_path / "hooks"
    hooks.mkdir()
    first = start_writer(
        small_argv(small_src, out, "--workers", "2"),
        tmp_path / "log",
        hook="page@3:block",
        hook_dir=hooks,
    )
    reached(hooks)
    partial = out / "train.beton.partial"
    inode = partial.stat().st_ino
    capsys.readouterr()
    assert write_main(small_argv(small_src, out, "--workers", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert "another writer" in err and "nothing was touched" in err, err
    assert partial.stat().st_ino == inode  # still the first writer's file
    (hooks / "release").touch()
    assert finish(first) == 0, (tmp_path / "log").read_text()
    assert (out / "train.beton").read_bytes() == small_reference
    assert sorted(p.name for p in out.iterdir()) == [
        "train.beton",
        "train.beton.json",
        "train.beton.stats",
    ]


def _task(x: int) -> int:
    if x == 3:
        time.sleep(3600)  # a worker stuck for good
    if x == 5:
        raise SourceError(f"task {x}: bad input")
    return x * x


def test_run_tasks_gives_up_on_a_stuck_worker_and_stops_it() -> None:
    seen: dict[int, int] = {}
    with pytest.raises(WriteError, match="no progress for 1 s: no task finished"):
        run_tasks(_task, [0, 1, 2, 3], 2, seen.__setitem__, stall_seconds=1.0)
    assert seen == {0: 0, 1: 1, 2: 4}
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


def test_run_tasks_passes_task_errors_through() -> None:
    with pytest.raises(SourceError, match="task 5: bad input"):
        run_tasks(_task, [0, 1, 5, 6], 2, lambda i, r: None)
    with pytest.raises(SourceError, match="task 5: bad input"):
        run_tasks(_task, [5], 1, lambda i, r: None)
