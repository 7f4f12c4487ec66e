"""Resumable conversion: a writer killed at any point continues with --resume, and the
result is byte-identical to an uninterrupted run; a changed source is refused."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from conftest import SMALL_N, small_argv
from writer_proc import finish, start_writer

from ffcv_pairs.cli import main, write_main
from ffcv_pairs.format.sidecar import Manifest, manifest_path
from ffcv_pairs.write import tracker

N = SMALL_N
FINISHED = ["train.beton", "train.beton.json", "train.beton.stats"]


def _journal_every_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Journal after every finished task, as the disk-full test does, so that ``journal@3``
    fires with 3 pages journaled and not at the last batch (the writer journals once a
    second; the forked writer inherits the patch)."""
    monkeypatch.setattr(tracker, "JOURNAL_SECONDS", 0.0)


def _resume(capsys, small_src: Path, out: Path) -> str:
    capsys.readouterr()
    assert write_main(small_argv(small_src, out, "--workers", "2", "--resume")) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("point", "left"),
    [
        ("journal@3", {".partial", ".journal", ".stats.partial"}),
        ("finish", {".partial", ".journal", ".stats.partial"}),
        ("rename", {"", ".journal", ".json.partial", ".stats.partial"}),
        ("stats", {"", ".json", ".journal", ".stats.partial"}),
        ("sidecar", {"", ".json", ".journal", ".stats"}),
    ],
)
def test_kill_then_resume_is_byte_identical(
    capsys,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    small_src: Path,
    small_reference: bytes,
    small_reference_stats: bytes,
    point: str,
    left: set[str],
) -> None:
    if point.startswith("journal"):
        _journal_every_task(monkeypatch)
    out = tmp_path / "out"
    proc = start_writer(
        small_argv(small_src, out, "--workers", "2"), tmp_path / "log", hook=f"{point}:kill"
    )
    assert finish(proc) == -signal.SIGKILL
    assert {p.name.removeprefix("train.beton") for p in out.iterdir()} == left
    printed = _resume(capsys, small_src, out)
    assert (out / "train.beton").read_bytes() == small_reference
    assert (out / "train.beton.stats").read_bytes() == small_reference_stats
    assert sorted(p.name for p in out.iterdir()) == FINISHED
    if point == "journal@3":  # pages journaled before the kill were kept, not rewritten
        kept = int(printed.split("resumed: kept ")[1].split()[0])
        assert 3 <= kept < 12
    else:
        assert "resumed: kept 12 of 12 pages" in printed
    assert main(["verify", str(out / "train.beton")]) == 0


def test_resume_without_the_stats_partial_finishes_without_stats(
    capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_src: Path, small_reference: bytes
) -> None:
    """A run interrupted before the writer kept image statistics (no ``.stats.partial``):
    the same `.beton`, and no statistics rather than half-filled ones."""
    _journal_every_task(monkeypatch)
    out = tmp_path / "out"
    proc = start_writer(
        small_argv(small_src, out, "--workers", "2"), tmp_path / "log", hook="journal@3:kill"
    )
    assert finish(proc) == -signal.SIGKILL
    (out / "train.beton.stats.partial").unlink()
    assert "resumed: kept" in _resume(capsys, small_src, out)
    assert (out / "train.beton").read_bytes() == small_reference
    assert sorted(p.name for p in out.iterdir()) == ["train.beton", "train.beton.json"]
    assert Manifest.load(manifest_path(out / "train.beton")).stats is None
    assert main(["verify", str(out / "train.beton")]) == 0


def test_resume_refuses_a_changed_source_or_setting(
    capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_src: Path, small_reference: bytes
) -> None:
    _journal_every_task(monkeypatch)
    changed = tmp_path / "pt"
    changed.mkdir()
    for f in small_src.iterdir():
        os.link(f, changed / f.name)
    out = tmp_path / "out"
    proc = start_writer(
        small_argv(changed, out, "--workers", "2"), tmp_path / "log", hook="journal@3:kill"
    )
    assert finish(proc) == -signal.SIGKILL
    capsys.readouterr()

    assert write_main(small_argv(changed, out, "--resume", "--page-size", "8KiB")) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot resume" in err and "page size changed (4096 -> 8192)" in err, err

    (changed / "train_A_images_17.pt").unlink()  # a sampled file, rewritten: new size and mtime
    torch.save(torch.zeros(3, 8, 8, dtype=torch.uint8).clone(), changed / "train_A_images_17.pt")
    with open(changed / "train_A_images_17.pt", "ab") as f:
        f.write(b"\0")
    assert write_main(small_argv(changed, out, "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert "source file train_A_images_17.pt changed" in err, err
    assert (out / "train.beton.partial").exists()  # refused, nothing touched

    assert write_main(small_argv(small_src, out)) == 0  # without --resume: start over
    assert (out / "train.beton").read_bytes() == small_reference


def test_resume_without_an_interrupted_run_writes_afresh_or_keeps_a_finished_file(
    capsys, tmp_path: Path, small_src: Path, small_reference: bytes
) -> None:
    out = tmp_path / "out"
    printed = _resume(capsys, small_src, out)
    assert "resumed" not in printed
    assert (out / "train.beton").read_bytes() == small_reference
    inode = (out / "train.beton").stat().st_ino
    assert "resumed: kept 12 of 12 pages" in _resume(capsys, small_src, out)  # e.g. the first split
    assert (out / "train.beton").stat().st_ino == inode
    assert sorted(p.name for p in out.iterdir()) == FINISHED


def test_bad_file_mid_write_keeps_a_resumable_partial(
    capsys, tmp_path: Path, small_src: Path, small_reference: bytes
) -> None:
    copy = tmp_path / "pt"
    copy.mkdir()
    for f in small_src.iterdir():
        os.link(f, copy / f.name)
    good = (copy / "train_A_images_95.pt").read_bytes()
    (copy / "train_A_images_95.pt").unlink()
    (copy / "train_A_images_95.pt").write_bytes(b"not a pickle")  # page 9 of 12
    out = tmp_path / "out"
    assert write_main(small_argv(copy, out, "--workers", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "train_A_images_95.pt" in err and "cannot load" in err
    assert "kept with 9 of 12 pages" in err and "--resume" in err
    assert not (out / "train.beton").exists() and (out / "train.beton.partial").exists()

    (copy / "train_A_images_95.pt").write_bytes(good)  # not among the sampled files
    assert "resumed: kept 9 of 12 pages" in _resume(capsys, copy, out)
    assert (out / "train.beton").read_bytes() == small_reference
