"""A full disk ends the writer with one line naming the output file and the free space;
the pages written so far are kept, and ``--resume`` once there is room writes the bytes
of an uninterrupted run.

The disk fills in the workers' data-page writes (``os.pwrite``, patched before they
fork): a page's first write stops halfway, as the kernel's does when the disk fills
mid-write, and the rest fails with ``ENOSPC``.
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SMALL_N, small_argv

from ffcv_pairs.cli import write_main
from ffcv_pairs.format.layout import BetonLayout
from ffcv_pairs.format.schema import ArraySpec, PairSchema
from ffcv_pairs.write import tracker

PAGE = 4096  # small_argv's page size: 12 data pages
_RECORD_BYTES = 8 + 4 + 32 + 4  # a journal record: page, CRC32, SHA-256, its own CRC32


def _journaled(journal: Path) -> int:
    """Pages listed in the journal (after its magic line and fingerprint line)."""
    data = journal.read_bytes()
    head = data.find(b"\n", data.find(b"\n") + 1) + 1
    return (len(data) - head) // _RECORD_BYTES if head else 0


def _fill_disk(monkeypatch: pytest.MonkeyPatch, out: Path, first_full_page: int) -> None:
    """Data pages from ``first_full_page`` on do not fit; each fails only once every page
    before it is journaled, so that exactly those are kept."""
    spec = ArraySpec((3, 8, 8), "uint8")
    layout = BetonLayout(PairSchema(a=spec, b=spec), SMALL_N, PAGE)
    lo = layout.data_start + first_full_page * PAGE
    hi = layout.data_start + layout.num_pages * PAGE
    partial, journal = str(out / "train.beton.partial"), out / "train.beton.journal"
    real = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if not (lo <= offset < hi and os.readlink(f"/proc/self/fd/{fd}") == partial):
            return real(fd, data, offset)
        deadline = time.monotonic() + 60
        while _journaled(journal) < first_full_page and time.monotonic() < deadline:
            time.sleep(0.01)
        if offset % PAGE == 0:
            return real(fd, memoryview(data)[: PAGE // 2], offset)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(tracker, "JOURNAL_SECONDS", 0.0)  # journal each finished page


@pytest.mark.parametrize(("first_full_page", "kept"), [(6, 6), (0, 0)])
def test_disk_full_says_so_and_resume_completes_the_file(
    capsys,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    small_src: Path,
    small_reference: bytes,
    small_reference_stats: bytes,
    first_full_page: int,
    kept: int,
) -> None:
    out = tmp_path / "out"
    argv = small_argv(small_src, out, "--workers", "2")
    _fill_disk(monkeypatch, out, first_full_page)
    capsys.readouterr()
    assert write_main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    free = r"\d+(\.\d)? (bytes|KiB|MiB|GiB|TiB) free in " + re.escape(str(out))
    head = rf"error: {re.escape(str(out / 'train.beton'))}: disk full: {free}"
    assert re.match(rf"{head}, and train\.beton needs about [\d.]+ KiB more; ", lines[0]), err
    if kept:
        note = f"train.beton.partial kept with {kept} of 12 pages written: rerun with --resume"
        assert lines[0].endswith(f"; {note} once there is room"), err
        assert (out / "train.beton.partial").exists()
    else:  # nothing worth keeping: the space is given back
        assert lines[0].endswith("; nothing was kept: rerun once there is room"), err
        assert sorted(p.name for p in out.iterdir()) == []
    assert not (out / "train.beton").exists()

    monkeypatch.undo()  # room again
    assert write_main([*argv, "--resume"]) == 0
    printed = capsys.readouterr().out
    if kept:
        assert f"resumed: kept {kept} of 12 pages" in printed
    assert (out / "train.beton").read_bytes() == small_reference
    assert (out / "train.beton.stats").read_bytes() == small_reference_stats
