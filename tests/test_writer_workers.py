"""Any Python source works with any number of workers, and a worker that makes no
progress is named for what it is doing."""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ffcv_pairs import write_pairs
from ffcv_pairs.format.layout import BetonLayout
from ffcv_pairs.format.schema import ArraySpec, PairSchema
from ffcv_pairs.write import writer
from ffcv_pairs.write.pool import WriteError

PAGE = 4096


class TorchFrames:
    """uint8 images made by torch ops on float tensors of 3 x 128 x 128 = 49,152 values,
    which torch splits across its OpenMP threads (above 32,768)."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        t = torch.rand(3, 128, 128, generator=torch.Generator().manual_seed(i))
        a = (t * 255).round().clamp(0, 255).to(torch.uint8)
        return a, a.flip(0), i


@pytest.fixture
def two_torch_threads():
    """Torch in this process on 2 threads, so that it runs a parallel region whatever
    the machine (the writer reads sample 0 here, before its workers fork)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_source_using_torch_threads_runs_on_two_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_torch_threads: None
) -> None:
    monkeypatch.setattr(writer, "STALL_SECONDS", 60.0)  # a hang fails in a minute
    frames = TorchFrames()
    one = write_pairs(frames, tmp_path / "one.beton", workers=1, page_size=1 << 18, progress=False)
    two = write_pairs(frames, tmp_path / "two.beton", workers=2, page_size=1 << 18, progress=False)
    assert one.num_pages == two.num_pages > 2
    assert (tmp_path / "two.beton").read_bytes() == (tmp_path / "one.beton").read_bytes()


class Stuck:
    """Small uint8 pairs; asking for sample 37 never returns (unless ``stuck`` is off)."""

    def __init__(self, stuck: bool = True):
        self.stuck = stuck

    def __len__(self) -> int:
        return 120

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, int]:
        if i == 37 and self.stuck:
            threading.Event().wait()
        a = np.full((3, 8, 8), i % 256, np.uint8)
        return a, 255 - a, i


def _block_page_writes(monkeypatch: pytest.MonkeyPatch, partial: Path, page: int) -> None:
    """Writing data page ``page`` (its first byte) to ``partial`` never returns."""
    spec = ArraySpec((3, 8, 8), "uint8")
    at = BetonLayout(PairSchema(a=spec, b=spec), 120, PAGE).data_start + page * PAGE
    real = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if offset == at and os.readlink(f"/proc/self/fd/{fd}") == str(partial):
            threading.Event().wait()
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)


@pytest.mark.parametrize(
    ("stuck_in", "doing"),
    [
        ("getitem", r"inside Stuck\.__getitem__\(37\)"),
        ("page write", r"writing data page 6 to {partial}"),
    ],
)
def test_a_worker_making_no_progress_is_named_for_what_it_is_doing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stuck_in: str, doing: str
) -> None:
    out = tmp_path / "s.beton"
    partial = out.with_name("s.beton.partial")
    if stuck_in == "page write":
        _block_page_writes(monkeypatch, partial, 6)
    # The uninterrupted reference, first: it also compiles the numba kernels here, which
    # the workers then inherit instead of spending seconds each on them.
    whole = tmp_path / "whole.beton"
    write_pairs(Stuck(stuck=False), whole, workers=1, page_size=PAGE, progress=False)
    monkeypatch.setattr(writer, "STALL_SECONDS", 2.0)
    with pytest.raises(WriteError) as caught:
        source = Stuck(stuck=stuck_in == "getitem")
        write_pairs(source, out, workers=2, page_size=PAGE, progress=False)
    message = str(caught.value)
    named = doing.format(partial=re.escape(str(partial)))
    expected = (
        rf"{re.escape(str(out))}: no progress for 2 s: worker process (\d+) has been "
        rf"{named} for \d+ s; s\.beton\.partial kept with \d+ of 12 pages written: "
        r"rerun with --resume to continue"
    )
    match = re.fullmatch(expected, message)
    assert match, message
    with pytest.raises(ProcessLookupError):  # the stuck worker was stopped
        os.kill(int(match[1]), 0)
    assert not multiprocessing.active_children()

    monkeypatch.undo()  # unstuck: --resume completes the file, as if never stopped
    report = write_pairs(
        Stuck(stuck=False), out, workers=2, page_size=PAGE, progress=False, resume=True
    )
    assert report.pages_kept >= 1
    assert out.read_bytes() == whole.read_bytes()
