"""Discovery at scale: one directory scan for every split, zero-padded names, stray and
missing files named in one line with memory bounded by the files present."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays, read_upstream, write_batched, write_per_sample

from ffcv_pairs.cli import write_main
from ffcv_pairs.write import batched as batched_module
from ffcv_pairs.write import discover
from ffcv_pairs.write.source_kinds import open_source, open_sources
from ffcv_pairs.write.sources import SourceError


def _padded(root: Path, n: int, width: int, split: str = "train") -> Path:
    a, b, labels = make_arrays(n, (3, 4, 4), seed=5)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        idx = str(i).zfill(width)
        torch.save(torch.from_numpy(a[i].copy()), root / f"{split}_A_images_{idx}.pt")
        torch.save(torch.from_numpy(b[i].copy()), root / f"{split}_B_images_{idx}.pt")
        torch.save(torch.tensor(int(labels[i])), root / f"{split}_labels_{idx}.pt")
    return root


def test_zero_padded_names(tmp_path: Path) -> None:
    src = _padded(tmp_path / "pt", 12, width=7)
    assert (src / "train_A_images_0000011.pt").exists()
    assert write_main([str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"]) == 0
    a, b, labels = make_arrays(12, (3, 4, 4), seed=5)
    ra, rb, rl = read_upstream(tmp_path / "out" / "train.beton")
    assert ra.tobytes() == a.tobytes() and rb.tobytes() == b.tobytes()
    np.testing.assert_array_equal(rl, labels)


@pytest.mark.parametrize(
    ("odd", "needle"),
    [
        ("train_A_images_00002.pt", "index 2 is zero-padded to 5 digits"),
        ("train_A_images_2.pt", "index 2 is not zero-padded (1 digit)"),
    ],
)
def test_inconsistent_padding_is_refused(tmp_path: Path, odd: str, needle: str) -> None:
    src = _padded(tmp_path / "pt", 3, width=4)
    (src / "train_A_images_0002.pt").rename(src / odd)
    with pytest.raises(SourceError) as info:
        open_source(src, "train")
    msg = str(info.value)
    assert msg.startswith(f"{src / odd}: {needle}, but 2 of the 3 train_A_images_*.pt "), msg
    assert "are zero-padded to 4 digits (e.g. train_A_images_000" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "name", ["train_labels_99999999999.pt", "train_A_images_" + "9" * 30 + ".pt"]
)
def test_stray_name_is_refused_with_bounded_memory(tmp_path: Path, name: str) -> None:
    a, b, labels = make_arrays(20, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    (src / name).write_bytes(b"")
    tracemalloc.start()
    try:
        with pytest.raises(SourceError, match="out of range") as info:
            open_source(src, "train")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert name in str(info.value) and "\n" not in str(info.value)
    assert peak < 1 << 20, f"discovery took {peak} bytes for 61 files"  # not one per index


def test_missing_files_are_counted_and_the_first_named(tmp_path: Path) -> None:
    a, b, labels = make_arrays(30, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    for name in ["train_B_images_3.pt", "train_labels_4.pt", "train_labels_9.pt"]:
        (src / name).unlink()
    (src / "train_A_images_29.pt").unlink()
    with pytest.raises(SourceError) as info:
        open_source(src, "train")
    msg = str(info.value)
    assert msg.startswith(str(src / "train_B_images_3.pt")) and ": missing; 4 " in msg, msg
    assert "train_labels_4, train_labels_9, train_A_images_29" in msg and "0..29" in msg


def test_one_scan_serves_every_split(tmp_path: Path, monkeypatch) -> None:
    a, b, labels = make_arrays(10, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    write_per_sample(src, "val", a[:4], b[:4], labels[:4])
    write_batched(src, "test", a[:5], b[:5], labels[:5], per_file=2)
    (src / "notes.txt").write_text("ignored")
    calls = []
    real = os.scandir

    def counting(path):  # type: ignore[no-untyped-def]
        if Path(path) == src:  # os is shared: numba's cache scans its own folders
            calls.append(path)
        return real(path)

    monkeypatch.setattr(discover.os, "scandir", counting)
    train, val, test = open_sources(src, ["train", "val", "test"])
    assert (len(train), len(val), len(test)) == (10, 4, 5)
    assert type(test).__name__ == "BatchedSource"
    assert len(calls) == 1
    calls.clear()
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--split", "val", "--no-progress"]
    assert write_main(argv) == 0 and len(calls) == 1


def test_batched_lengths_without_loading_every_file(tmp_path: Path, monkeypatch) -> None:
    a, b, labels = make_arrays(40, (3, 8, 8))
    src = write_batched(tmp_path / "pt", "train", a, b, labels, per_file=7)
    loads = tmp_path / "loads"
    real = batched_module.load_pt

    def logged(path, mmap=False):  # type: ignore[no-untyped-def]
        with open(loads, "a") as f:  # one line per load, from any process
            f.write(f"{os.getpid()} {Path(path).name} {mmap}\n")
        return real(path, mmap=mmap)

    monkeypatch.setattr(batched_module, "load_pt", logged)
    source = open_source(src, "train")
    parent = loads.read_text().split("\n")[:-1]
    assert parent == [f"{os.getpid()} train_batch_0.pt False"]  # lengths of 1..5 from zip ends
    assert list(np.diff(source.offsets)) == [7, 7, 7, 7, 7, 5]

    loads.unlink()
    out = tmp_path / "x.beton"
    from ffcv_pairs import write_pairs

    write_pairs(source, out, workers=2, page_size=4096, progress=False)  # 10 pairs a page
    seen = [line.split() for line in loads.read_text().splitlines()]
    assert sorted(name for _, name, _ in seen) == [f"train_batch_{k}.pt" for k in range(6)]
    assert all(pid != str(os.getpid()) and mmap == "False" for pid, _, mmap in seen)
    ra, rb, rl = read_upstream(out)
    assert ra.tobytes() == a.tobytes() and rb.tobytes() == b.tobytes()
    np.testing.assert_array_equal(rl, labels)
