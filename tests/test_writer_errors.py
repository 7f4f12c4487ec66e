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
from conftest import make_arrays, write_batched, write_per_sample
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
        (["--codec", "A=jpeg,A=raw"], "--codec A=jpeg,A=raw: gives A more than once"),
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


# -- what a .pt may hold, and where the output may go -------------------------------------


@pytest.mark.parametrize("index", [0, 2])
def test_sparse_tensor_is_one_line_naming_the_file(
    capsys, src: Path, tmp_path: Path, index
) -> None:
    """At index 0 (the template's file) or later, per-sample or batched: never a traceback."""
    dense = torch.load(src / f"train_A_images_{index}.pt")
    torch.save(dense.to_sparse(), src / f"train_A_images_{index}.pt")
    rc, err = _run(capsys, src, tmp_path / "out")
    _assert_one_line(rc, err, f"train_A_images_{index}.pt: holds a sparse tensor (sparse_coo)")


def test_sparse_tensor_in_a_batched_file_is_one_line(capsys, tmp_path: Path) -> None:
    src = tmp_path / "pt"
    src.mkdir()
    item = (torch.zeros(3, 4, 4).to_sparse(), torch.zeros(3, 4, 4), 1)
    torch.save([item], src / "train_batch_0.pt")
    rc, err = _run(capsys, src, tmp_path / "out")
    _assert_one_line(rc, err, "train_batch_0.pt[0].A: holds a sparse tensor")


def test_numpy_array_in_a_pt_names_the_file_and_the_type(capsys, src: Path, tmp_path: Path) -> None:
    """torch's message (cut mid-sentence, with ANSI codes) is not passed on."""
    torch.save(np.zeros((3, 4, 4), np.uint8), src / "train_B_images_3.pt")
    rc, err = _run(capsys, src, tmp_path / "out")
    _assert_one_line(
        rc,
        err,
        f"{src / 'train_B_images_3.pt'}: holds a numpy array (numpy.ndarray), not a torch tensor",
        "save torch.from_numpy(array) instead",
    )
    assert "\x1b" not in err and "Weights only load failed" not in err


def test_malformed_config_names_the_file_and_line(capsys, src: Path, tmp_path: Path) -> None:
    config = tmp_path / "write.yaml"
    config.write_text(f"src_dir: {src}\nout_dir: out\n  split: [train\n")
    rc = _exit_status(["--config", str(config), "--no-progress"])
    err = capsys.readouterr().err.strip()
    _assert_one_line(
        rc, err, f"error: {config}:3:8: not valid YAML: mapping values are not allowed"
    )
    rc = _exit_status(["--config", str(tmp_path / "gone.yaml")])
    _assert_one_line(rc, capsys.readouterr().err.strip(), "--config", "gone.yaml: no such file")


def test_output_directory_that_is_a_file(capsys, src: Path, tmp_path: Path) -> None:
    from ffcv_pairs import write_pairs

    taken = tmp_path / "taken"
    taken.write_text("a file")
    rc, err = _run(capsys, src, taken)
    _assert_one_line(rc, err, f"OUT_DIR {taken}: is a file, not a directory")
    with pytest.raises(ValueError, match=f"{taken} is a file, not a directory"):
        write_pairs(open_source(src, "train"), taken / "deeper" / "train.beton", progress=False)
    assert taken.read_text() == "a file"


# -- packs counted from their zip directory ------------------------------------------------


def _packs(d: Path, last: object) -> Path:
    """Batch files 0 and 1 of three tensor triples each, and ``last`` as batch file 2."""
    a, b, labels = make_arrays(9, (3, 4, 4))
    d.mkdir()
    for k in range(2):
        items = [
            (torch.from_numpy(a[i].copy()), torch.from_numpy(b[i].copy()), int(labels[i]))
            for i in range(3 * k, 3 * k + 3)
        ]
        torch.save(items, d / f"train_batch_{k}.pt")
    torch.save(last, d / "train_batch_2.pt")
    return d


@pytest.mark.parametrize(
    "last",
    [
        [(np.zeros((3, 4, 4), np.uint8), np.zeros((3, 4, 4), np.uint8), i) for i in range(3)],
        {"A": np.zeros((3, 3, 4, 4), np.uint8), "label": 3},
    ],
    ids=["numpy-triples", "dict-of-numpy"],
)
def test_a_pack_with_no_tensor_storage_is_refused_not_skipped(capsys, tmp_path: Path, last) -> None:
    """Its zip directory lists no storage, so it would count as empty: it is loaded instead
    (and refused, by name, as torch.load(weights_only=True) refuses numpy arrays)."""
    d = _packs(tmp_path / "b", last)
    rc, err = _run(capsys, d, tmp_path / "out", "--workers", "1")
    _assert_one_line(rc, err, "train_batch_2.pt", "numpy")
    assert not (tmp_path / "out" / "train.beton").exists()


def test_an_empty_pack_counts_as_empty(capsys, tmp_path: Path) -> None:
    d = _packs(tmp_path / "b", [])
    assert len(open_source(d, "train")) == 6
    rc = write_main([str(d), str(tmp_path / "out"), "--split", "train", "--no-progress"])
    out = capsys.readouterr()
    assert rc == 0 and "6 pairs" in out.out, out.err


# -- labels int64 does not hold --------------------------------------------------------------


def test_a_uint64_label_file_beyond_int64_is_named_with_its_value(
    capsys, src: Path, tmp_path: Path
) -> None:
    torch.save(torch.tensor(2**63 + 5, dtype=torch.uint64), src / "train_labels_3.pt")
    torch.save(torch.tensor(7, dtype=torch.uint64), src / "train_labels_1.pt")  # fits: fine
    rc, err = _run(capsys, src, tmp_path / "out", "--workers", "1")
    _assert_one_line(rc, err, "train_labels_3.pt", str(2**63 + 5), "int64")


@pytest.mark.parametrize(
    ("label", "value"),
    [
        (torch.tensor(2**63, dtype=torch.uint64), 2**63),
        (np.uint64(2**64 - 1), 2**64 - 1),
        (np.array(2**63, dtype=np.uint64), 2**63),
        (2**63, 2**63),
        (-(2**63) - 1, -(2**63) - 1),
    ],
    ids=["torch.uint64", "np.uint64", "0-d uint64 array", "int", "negative int"],
)
def test_a_python_source_label_beyond_int64_is_named_with_its_index(
    tmp_path: Path, label, value: int
) -> None:
    from ffcv_pairs import write_pairs
    from ffcv_pairs.write.sources import SourceError

    a = np.zeros((3, 2, 4, 4), np.uint8)
    pairs = [(a[i], a[i], label if i == 2 else i) for i in range(3)]
    with pytest.raises(SourceError, match=rf"^list\[2\]\.label: label {value} is outside"):
        write_pairs(pairs, tmp_path / "l.beton", workers=1, progress=False)


def test_stacked_uint64_labels_beyond_int64_are_named_with_their_index(tmp_path: Path) -> None:
    from ffcv_pairs import ArraySource, write_pairs
    from ffcv_pairs.write.sources import PairSource, SourceError

    a = np.zeros((4, 2, 4, 4), np.uint8)
    labels = np.array([0, 1, 2**63 + 1, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(SourceError, match=rf"^arrays\.labels\[2\]: label {2**63 + 1} is outside"):
        ArraySource(a, a, labels)

    class Stacked(PairSource):  # what a source's read_arrays may hand the writer
        def __len__(self) -> int:
            return 4

        def read(self, i: int):
            return a[i], a[i], int(labels[i])

        def read_arrays(self, start: int, stop: int):
            return a[start:stop], a[start:stop], labels[start:stop]

    with pytest.raises(SourceError, match=rf"^Stacked\.label\[2\]: label {2**63 + 1} is outside"):
        write_pairs(Stacked(), tmp_path / "s.beton", workers=1, progress=False)
    small = ArraySource(a, a, np.array([0, 1, 2, 2**63 - 1], dtype=np.uint64))
    assert small.labels.dtype == np.int64 and int(small.labels[3]) == 2**63 - 1


# -- names that are not regular files --------------------------------------------------------


def _bounded(run, log: Path) -> tuple[int, str]:
    """``run()`` (an exit status) in a forked child, bounded: a FIFO opened carelessly
    blocks for ever and ``/dev/zero`` read carelessly fills memory, so the child gets 60 s
    and 8 GiB of data segment; a test that meets either fails instead of hanging."""
    import multiprocessing as mp
    import resource

    def child() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (8 << 30, 8 << 30))
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 2)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        os._exit(run())

    proc = mp.get_context("fork").Process(target=child)
    proc.start()
    proc.join(60)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        raise AssertionError(f"still running after 60 s: {log.read_text()}")
    return proc.exitcode, log.read_text().strip()


def _not_regular(path: Path, kind: str) -> str:
    """Replace ``path`` with a FIFO or a symlink to ``/dev/zero``; what the error calls it."""
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        return "is a FIFO (named pipe), not a regular file"
    path.symlink_to("/dev/zero")
    return "is a character device, not a regular file"


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", ["train_A_images_2.pt", "train_labels_0.pt", "train_batch_1.pt"])
def test_a_name_that_is_not_a_regular_file_is_refused(tmp_path: Path, name: str, kind: str) -> None:
    """Found by the directory scan, before any file is opened."""
    a, b, labels = make_arrays(6, (3, 4, 4))
    writer = write_batched if "batch" in name else write_per_sample
    src = writer(tmp_path / "pt", "train", a, b, labels, *([3] if "batch" in name else []))
    what = _not_regular(src / name, kind)
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"]
    rc, err = _bounded(lambda: write_main(argv), tmp_path / "err.log")
    _assert_one_line(rc, err, f"{src / name}: {what}")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", ["train_A_images_2.pt", "train_labels_0.pt", "train_batch_1.pt"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_replaced_after_the_scan_is_refused_when_read(
    tmp_path: Path, name: str, kind: str, workers: int
) -> None:
    """Between the scan and the read (the page phase, in the workers): refused, never
    opened if a FIFO, never read past its size."""
    from ffcv_pairs import write_pairs

    a, b, labels = make_arrays(40, (3, 4, 4))
    writer = write_batched if "batch" in name else write_per_sample
    src = writer(tmp_path / "pt", "train", a, b, labels)
    source = open_source(src, "train")
    what = _not_regular(src / name, kind)

    def run() -> int:
        try:
            write_pairs(source, tmp_path / "o.beton", workers=workers, progress=False)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0

    rc, err = _bounded(run, tmp_path / "err.log")
    _assert_one_line(rc, err, f"{src / name}: {what}")


def test_a_symlink_loop_is_refused_by_name(capsys, src: Path, tmp_path: Path) -> None:
    """A name that is a symlink loop: one line naming it and the loop (it was the raw
    '[Errno 40] Too many levels of symbolic links: ...')."""
    name = src / "train_A_images_2.pt"
    name.unlink()
    name.symlink_to(src / "loop.pt")
    (src / "loop.pt").symlink_to(name)
    rc = write_main([str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"])
    err = capsys.readouterr().err.strip()
    _assert_one_line(rc, err, f"error: {name}: cannot be read (", "symbolic links")


def test_a_symlink_to_a_regular_file_is_read(capsys, src: Path, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.pt"
    (src / "train_A_images_4.pt").rename(real)
    (src / "train_A_images_4.pt").symlink_to(real)
    rc = write_main([str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"])
    assert rc == 0, capsys.readouterr().err


def test_packs_whose_items_hold_other_tensors_are_refused_saying_how_to_fix(
    tmp_path: Path, capsys
) -> None:
    """Pack 0 keeps labels as Python ints, pack 2 as 0-d tensors: the zip directory's count
    of pack 2 (learned from pack 0) is wrong, so the pack is refused, naming it and what to
    do, never written short."""
    a, b, _ = make_arrays(4, (3, 4, 4))
    items = [(torch.from_numpy(a[i].copy()), torch.from_numpy(b[i].copy()), torch.tensor(i))
             for i in range(4)]  # fmt: skip
    src = _packs(tmp_path / "pt", items)
    args = [str(src), str(tmp_path / "out"), "--split", "train", "--workers", "1", "--no-progress"]
    assert write_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "train_batch_2.pt" in err, err
    assert "save every pack's items alike" in err, err
    assert not (tmp_path / "out" / "train.beton").exists()
