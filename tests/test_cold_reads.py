"""The writer's read-ahead of a per-sample source (``ffcv_pairs/write/readahead.py``): every
file is asked for before it is read, the written bytes are the same with it on and off, a
cached chunk is not asked for, a bad file is named as before, and no descriptor is left open.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import make_arrays, read_upstream, write_per_sample

from ffcv_pairs import open_source, write_pairs
from ffcv_pairs.write import ptblock, readahead
from ffcv_pairs.write.readahead import ENV_VAR, ReadAhead, all_cached, will_need

N = 300  # more than one chunk of ptblock.ROWS samples in the one page


def _fs_type(path: Path) -> str:
    """The file system type of the mount holding ``path`` (longest mount point prefix)."""
    best, kind = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            _, point, fs, *_ = line.split()
            inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fs
    return kind


def _needs_page_cache(path: Path) -> None:
    if _fs_type(path) not in ("ext4", "xfs", "btrfs"):
        pytest.skip(f"{path} is on {_fs_type(path)!r}: its page cache cannot be dropped per file")


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class _Spy:
    """Every ``posix_fadvise`` (with the file's path) and every read of ptblock, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.events: list[tuple[str, str]] = []
        self.lengths: dict[str, int] = {}  # bytes advised, by file
        real_advise, real_read = os.posix_fadvise, ptblock._read_into

        def advise(fd: int, offset: int, length: int, advice: int) -> None:
            self.events.append(("advise", os.readlink(f"/proc/self/fd/{fd}")))
            self.lengths[self.events[-1][1]] = length
            real_advise(fd, offset, length, advice)

        def read_into(path: str, row: memoryview) -> int:
            self.events.append(("read", os.path.realpath(path)))
            return real_read(path, row)

        monkeypatch.setattr(os, "posix_fadvise", advise)
        monkeypatch.setattr(ptblock, "_read_into", read_into)

    def first(self, kind: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for at, (what, path) in enumerate(self.events):
            if what == kind:
                out.setdefault(path, at)
        return out


def _write(src: Path, out: Path, setting: str, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setenv(ENV_VAR, setting)
    source = open_source(src, "train")
    write_pairs(source, out, workers=1, page_size=1 << 20, progress=False)
    assert source.readahead.enabled is (setting == "1")
    assert source.readahead.chunks == 2  # 256 + 44 samples
    return out.read_bytes()


def test_every_file_is_asked_for_before_it_is_read_and_the_bytes_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every chunk probed as cold: each of the 3N files is advised once, before its first
    read; with the read-ahead off none is; both files are the same bytes, and hold the
    source's arrays."""
    a, b, labels = make_arrays(N, (3, 8, 8), "uint8", seed=4)
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    files = {str((src / f"train_{k}_{i}.pt").resolve()) for i in range(N) for k in (
        "A_images", "B_images", "labels")}  # fmt: skip
    monkeypatch.setattr(readahead, "all_cached", lambda paths, probes=8: False)
    spy = _Spy(monkeypatch)
    on = _write(src, tmp_path / "on.beton", "1", monkeypatch)
    advised, read = spy.first("advise"), spy.first("read")
    assert set(advised) == files == set(read)
    assert sum(what == "advise" for what, _ in spy.events) == 3 * N
    late = [p for p in files if advised[p] > read[p]]
    assert not late, f"{len(late)} files read before they were asked for, e.g. {late[0]}"
    short = [p for p in files if not 0 < os.path.getsize(p) <= spy.lengths[p] < 1 << 16]
    assert not short, f"{len(short)} files advised short or unbounded, e.g. {short[0]}"

    spy.events.clear()
    off = _write(src, tmp_path / "off.beton", "0", monkeypatch)
    assert spy.first("advise") == {} and set(spy.first("read")) == files
    assert on == off
    ra, rb, rl = read_upstream(tmp_path / "on.beton")
    np.testing.assert_array_equal(ra, a)
    np.testing.assert_array_equal(rb, b)
    np.testing.assert_array_equal(rl, labels)


def test_forked_workers_write_the_same_bytes_from_an_evicted_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 worker processes, the real probe, the folder dropped from the page cache (where the
    file system can) before each run: the same bytes with the read-ahead on and off."""
    a, b, labels = make_arrays(N, (3, 8, 8), "uint8", seed=6)
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    written = {}
    for setting in ("1", "0"):
        for path in src.iterdir():
            _evict(path)
        monkeypatch.setenv(ENV_VAR, setting)
        out = tmp_path / f"x{setting}.beton"
        write_pairs(open_source(src, "train"), out, workers=2, page_size=1 << 14, progress=False)
        written[setting] = out.read_bytes()
    assert written["1"] == written["0"]
    ra, rb, rl = read_upstream(tmp_path / "x1.beton")
    np.testing.assert_array_equal(ra, a)
    np.testing.assert_array_equal(rb, b)
    np.testing.assert_array_equal(rl, labels)


def test_the_probe_tells_a_cold_file_from_a_cached_one(tmp_path: Path) -> None:
    _needs_page_cache(tmp_path)
    paths = []
    for i in range(20):
        path = tmp_path / f"f{i}"
        path.write_bytes(bytes([i]) * 5000)
        paths.append(str(path))
    for path in paths:
        Path(path).read_bytes()
    assert all_cached(paths)
    _evict(Path(paths[10]))  # one of the 8 probed (indices 0, 2, 5, 7, 10, 12, 15, 17)
    assert not all_cached(paths)
    Path(paths[10]).read_bytes()
    assert all_cached(paths)


def test_a_cached_chunk_is_not_asked_for_and_a_cold_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_page_cache(tmp_path)
    paths = []
    for i in range(30):
        path = tmp_path / f"f{i}"
        path.write_bytes(bytes([i]) * 3000)
        Path(path).read_bytes()
        paths.append(str(path))
    spy = _Spy(monkeypatch)
    ahead = ReadAhead(True)
    ahead.before(paths, 4096)
    assert (ahead.chunks, ahead.asked, ahead.files, spy.events) == (1, 0, 0, [])
    for path in paths:
        _evict(Path(path))
    spy.events.clear()  # the evictions' own fadvise
    ahead.before(paths, 4096)
    assert (ahead.chunks, ahead.asked, ahead.files) == (2, 1, 30)
    assert [p for _, p in spy.events] == paths
    off = ReadAhead(False)
    off.before(paths, 4096)
    assert (off.chunks, off.asked, len(spy.events)) == (1, 0, 30)


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_bad_file_is_named_as_without_the_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    a, b, labels = make_arrays(40, (3, 8, 8), "uint8", seed=5)
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    bad = src / "train_B_images_17.pt"
    monkeypatch.setattr(readahead, "all_cached", lambda paths, probes=8: False)
    messages = []
    for setting in ("1", "0"):
        monkeypatch.setenv(ENV_VAR, setting)
        source = open_source(src, "train")  # scanned while every file is there
        saved = bad.read_bytes()
        if damage == "truncated":
            bad.write_bytes(saved[: len(saved) // 2])
        else:
            bad.unlink()
        with pytest.raises(Exception) as info:
            write_pairs(source, tmp_path / f"x{setting}.beton", workers=1, progress=False)
        bad.write_bytes(saved)
        messages.append(str(info.value))
        assert str(bad) in messages[-1] and "\n" not in messages[-1]
    assert messages[0] == messages[1].replace("x0.beton", "x1.beton")


def test_no_descriptor_is_left_open(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "file").write_bytes(b"x" * 100)
    paths = [str(tmp_path / name) for name in ("fifo", "dir", "missing", "empty", "file")]
    before = sorted(os.listdir("/proc/self/fd"))
    will_need(paths)
    all_cached(paths, probes=len(paths))
    ReadAhead(True).before(paths, 0)
    assert sorted(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("value", ["2", "yes", "off"])
def test_a_bad_setting_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    a, b, labels = make_arrays(3, (2, 2), "uint8")
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    monkeypatch.setenv(ENV_VAR, value)
    with pytest.raises(ValueError, match=f"Invalid {ENV_VAR}: '{value}'"):
        open_source(src, "train")
