"""Every kind of bad input gets one line naming the file and what is wrong, and exit status 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays, write_per_sample
from writer_proc import reached

from ffcv_pairs.cli import write_main
from ffcv_pairs.write.source_kinds import open_source
from ffcv_pairs.write.testhook import HOOK_DIR_ENV, HOOK_ENV

REPO = Path(__file__).parents[1]


def _run(capsys, src: Path, out: Path, *extra: str) -> tuple[int, str]:
    rc = write_main([str(src), str(out), "--split", "train", "--no-progress", *extra])
    err = capsys.readouterr().err.strip()
    return rc, err


def _assert_one_line(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def src(tmp_path: Path) -> Path:
    a, b, labels = make_arrays(6, (3, 4, 4))
    return write_per_sample(tmp_path / "pt", "train", a, b, labels)


def test_missing_index(capsys, src: Path, tmp_path: Path) -> None:
    (src / "train_B_images_3.pt").unlink()
    rc, err = _run(capsys, src, tmp_path / "out")
    _assert_one_line(rc, err, "train_B_images_3.pt", "missing")
    assert not (tmp_path / "out" / "train.beton").exists()


def test_corrupt_pt(capsys, src: Path, tmp_path: Path) -> None:
    (src / "train_A_images_4.pt").write_bytes(b"not a pickle at all")
    rc, err = _run(capsys, src, tmp_path / "out", "--workers", "2")
    _assert_one_line(rc, err, "train_A_images_4.pt", "cannot load")
    assert not (tmp_path / "out" / "train.beton").exists()
    assert not (tmp_path / "out" / "train.beton.partial").exists()


def test_shape_differs_from_sample_0(capsys, src: Path, tmp_path: Path) -> None:
    torch.save(torch.zeros(3, 4, 5, dtype=torch.uint8), src / "train_B_images_2.pt")
    rc, err = _run(capsys, src, tmp_path / "out")
    _assert_one_line(rc, err, "train_B_images_2.pt", "[3, 4, 5]", "sample 0")


def test_dtype_differs_from_sample_0(capsys, src: Path, tmp_path: Path) -> None:
    torch.save(torch.zeros(3, 4, 4, dtype=torch.float32), src / "train_A_images_5.pt")
    rc, err = _run(capsys, src, tmp_path / "out")
    _assert_one_line(rc, err, "train_A_images_5.pt", "float32", "sample 0")


@pytest.mark.parametrize(
    ("label", "needle"),
    [
        (torch.tensor(1.5), "float32"),
        (torch.tensor([1, 2]), "shape (2,)"),
        ("cat", "str"),
        (True, "bool"),
    ],
)
def test_label_not_an_integer_scalar(capsys, src: Path, tmp_path: Path, label, needle) -> None:
    torch.save(label, src / "train_labels_1.pt")
    rc, err = _run(capsys, src, tmp_path / "out")
    _assert_one_line(rc, err, "train_labels_1.pt", "integer scalar", needle)


def test_empty_dir(capsys, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    rc, err = _run(capsys, tmp_path / "empty", tmp_path / "out")
    _assert_one_line(rc, err, "empty", "no files for split 'train'")


def test_unknown_source_kind(capsys, tmp_path: Path) -> None:
    d = tmp_path / "odd"
    d.mkdir()
    torch.save(torch.zeros(2), d / "train_images_0.pt")
    rc, err = _run(capsys, d, tmp_path / "out")
    _assert_one_line(rc, err, "of a known kind")
    rc, err = _run(capsys, d, tmp_path / "out", "--source-kind", "batched")
    _assert_one_line(rc, err, "no batched files")


def test_the_old_name_of_source_kind_still_works_and_warns_in_one_line(
    capsys, src: Path, tmp_path: Path
) -> None:
    """``--layout`` and a config's ``layout:`` were the names of ``--source-kind``."""
    out = tmp_path / "out"
    argv = [str(src), str(out), "--split", "train", "--no-progress"]
    assert _exit_status([*argv, "--layout", "per-sample"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == "warning: --layout is now --source-kind (the old name will go)", err
    config = tmp_path / "write.yaml"
    config.write_text("layout: batched\n")
    assert _exit_status([*argv, "--config", str(config)]) == 2  # src holds per-sample files
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == f"warning: layout in {config} is now source_kind (the old name will go)"
    assert len(lines) == 2 and "no batched files" in lines[1], lines
    with pytest.warns(FutureWarning, match="layout= is now kind="):
        assert len(open_source(src, "train", layout="per-sample")) == len(open_source(src, "train"))


def test_not_a_directory(capsys, tmp_path: Path) -> None:
    rc, err = _run(capsys, tmp_path / "nope", tmp_path / "out")
    _assert_one_line(rc, err, "nope", "not a directory")


def test_batched_item_not_a_triple(capsys, tmp_path: Path) -> None:
    d = tmp_path / "b"
    d.mkdir()
    good = [(torch.zeros(2, 2, dtype=torch.uint8), torch.zeros(2, 2, dtype=torch.uint8), 0)]
    torch.save(good, d / "train_batch_0.pt")
    torch.save([*good, (torch.zeros(2, 2, dtype=torch.uint8), 1)], d / "train_batch_1.pt")
    rc, err = _run(capsys, d, tmp_path / "out")
    _assert_one_line(rc, err, "train_batch_1.pt[1]", "(A, B, label)")


def test_unsupported_dtype_and_store_dtype_refusal(capsys, tmp_path: Path) -> None:
    a = np.full((4, 2, 2), 7, dtype=np.int16)
    d = write_per_sample(tmp_path / "pt", "train", a, a, np.arange(4))
    rc, err = _run(capsys, d, tmp_path / "out")
    _assert_one_line(rc, err, "train_A_images_0.pt", "int16", "--store-dtype")
    f = np.full((4, 2, 2), 3.0, dtype=np.float32)
    f[2, 1, 0] = 12.5
    d2 = write_per_sample(tmp_path / "pt2", "train", f, f, np.arange(4))
    rc, err = _run(capsys, d2, tmp_path / "out", "--store-dtype", "uint8")
    _assert_one_line(rc, err, "train_A_images_2.pt", "12.5", "would change")


def test_float16_refusal(capsys, tmp_path: Path) -> None:
    f = np.full((3, 2), 0.1, dtype=np.float32)
    d = write_per_sample(
        tmp_path / "pt", "train", f[None].repeat(2, 0), f[None].repeat(2, 0), np.arange(2)
    )
    rc, err = _run(capsys, d, tmp_path / "out", "--store-dtype", "float16")
    _assert_one_line(rc, err, "train_A_images_0.pt", "float16")


def test_sample_larger_than_page(capsys, src: Path, tmp_path: Path) -> None:
    big = torch.zeros(3, 64, 64, dtype=torch.uint8)
    for i in range(6):
        torch.save(big, src / f"train_A_images_{i}.pt")
        torch.save(big, src / f"train_B_images_{i}.pt")
    rc, err = _run(capsys, src, tmp_path / "out", "--page-size", "4KiB")
    _assert_one_line(rc, err, "does not fit", "--page-size 32768")


def test_bad_page_size(capsys, src: Path, tmp_path: Path) -> None:
    rc, err = _run(capsys, src, tmp_path / "out", "--page-size", "5000")
    _assert_one_line(rc, err, "power of two", "5000")


def test_cli_subprocess_exit_code_and_no_traceback(src: Path, tmp_path: Path) -> None:
    (src / "train_labels_0.pt").write_bytes(b"\x00garbage")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "writers" / "write_beton.py"),
            str(src),
            str(tmp_path / "o"),
            "--split",
            "train",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "train_labels_0.pt" in lines[-1]
    assert "Traceback" not in proc.stderr


PAIRS_WRITER = """
import sys, numpy as np
from ffcv_pairs import IndexedSource, write_pairs

class Pairs:
    def __len__(self): return 400
    def __getitem__(self, i):
        a = np.full((3, 16, 16), i % 256, np.uint8)
        return a, a, i

write_pairs(IndexedSource(Pairs()), sys.argv[1], workers=2, page_size=4096, progress=False)
"""


def test_sigkill_midway_leaves_nothing_that_looks_valid(tmp_path: Path) -> None:
    """Killed while a worker is held before data page 100 of 200 (the test hook, instead of a
    sleep that a fast or a slow machine could miss): the header and the rename come after
    the last page, so neither can have happened."""
    from ffcv_pairs import ArraySource, write_pairs
    from ffcv_pairs.format.sidecar import manifest_path

    out = tmp_path / "k.beton"
    a, b, labels = make_arrays(5)
    write_pairs(ArraySource(a, b, labels), out, progress=False)
    old = out.read_bytes()
    old_manifest = manifest_path(out).read_bytes()

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    env = {**os.environ, HOOK_ENV: "page@100:block", HOOK_DIR_ENV: str(hooks)}
    proc = subprocess.Popen(
        [sys.executable, "-c", PAIRS_WRITER, str(out)], start_new_session=True, env=env
    )
    try:
        reached(hooks)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    partial = out.with_name("k.beton.partial")

    assert out.read_bytes() == old  # the older file is untouched
    assert manifest_path(out).read_bytes() == old_manifest
    # What is left is named .partial and has no header: nothing opens it as a .beton.
    assert partial.exists()
    header = np.fromfile(partial, dtype=np.uint8, count=24)
    assert not header.any()
    from ffcv.reader import Reader

    with pytest.raises(AssertionError, match="file format mismatch"):
        Reader(str(partial))


def _exit_status(argv: list[str]) -> int:
    """What the command exits with: argparse's own refusals raise SystemExit."""
    try:
        return write_main(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--workers", "0"], "--workers must be at least 1, got 0"),
        (["--workers", "abc"], "--workers must be an integer, got 'abc'"),
        (["--workers", "2.5"], "--workers must be an integer, got '2.5'"),
        (["--workers", "100000"], "--workers must be at most"),
        (["--page-size", "3MiB"], "--page-size must be a power of two from 4096 to"),
        (["--page-size", "1KiB"], "got 1024"),
        (["--page-size", "lots"], "--page-size: cannot parse size 'lots'"),
        (["--page-size", "1e400"], "--page-size: size '1e400' is too large"),
        (["--page-size", "65536.5"], "--page-size: size '65536.5' is not a whole number of bytes"),
        (["--page-size", "1.2.3MiB"], "--page-size: cannot parse size '1.2.3MiB'"),
        (["--limit", "-1"], "--limit must be at least 1, got -1"),
        (["--limit", "x"], "--limit must be an integer, got 'x'"),
        (["--shuffle", "-5"], "--shuffle must be between 0 and 18446744073709551615, got -5"),
        (["--shuffle", str(2**64)], "got 18446744073709551616"),
        (["--store-dtype", "int8"], "argument --store-dtype: invalid choice: 'int8'"),
        (["--source-kind", "flat"], "argument --source-kind: invalid choice: 'flat'"),
        (["--split", ""], "--split must be split names (non-empty strings), got ['train', '']"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_flag_is_one_line_and_exit_2(capsys, src: Path, tmp_path: Path, flags, needle) -> None:
    """Checked before the sources are scanned: nothing is written."""
    out = tmp_path / "out"
    rc = _exit_status([str(src), str(out), "--split", "train", "--no-progress", *flags])
    _assert_one_line(rc, capsys.readouterr().err.strip(), needle)
    assert not out.exists()


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("workers: [2]", "workers in {config} must be an integer, got [2] (list)"),
        ("workers: 0", "workers in {config} must be at least 1, got 0"),
        ("page_size: 4096.0", "page_size in {config} must be an integer, got 4096.0 (float)"),
        ("page_size: 5000", "page_size in {config} must be a power of two"),
        ("limit: true", "limit in {config} must be an integer, got True (bool)"),
        ("shuffle: -1", "shuffle in {config} must be between 0 and"),
        ("store_dtype: int8", "store_dtype in {config} must be one of ['uint8', 'float16']"),
        ("source_kind: 3", "source_kind in {config} must be one of ['auto'"),
        ("src_dir: 3", "src_dir in {config} must be a directory, got 3 (int)"),
        ("split: [train, 3]", "split in {config} must be split names"),
    ],
)
def test_bad_config_value_is_one_line_and_exit_2(
    capsys, src: Path, tmp_path: Path, line: str, needle: str
) -> None:
    config = tmp_path / "write.yaml"
    out = tmp_path / "out"
    settings = {"src_dir": str(src), "out_dir": str(out), "split": "train"}
    key = line.split(":")[0]
    text = "".join(f"{k}: {v}\n" for k, v in settings.items() if k != key)
    config.write_text(text + line + "\n")
    rc = _exit_status(["--config", str(config), "--no-progress"])
    _assert_one_line(rc, capsys.readouterr().err.strip(), needle.format(config=config))
    assert not out.exists()


def test_flags_win_over_a_bad_config_value(capsys, src: Path, tmp_path: Path) -> None:
    config = tmp_path / "write.yaml"
    config.write_text("workers: 0\nlimit: 3\n")
    out = tmp_path / "out"
    argv = [str(src), str(out), "--split", "train", "--config", str(config), "--workers", "1"]
    assert _exit_status([*argv, "--no-progress"]) == 0
    assert "3 pairs" in capsys.readouterr().out
