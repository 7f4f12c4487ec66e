"""ffcv_pairs.write.ptfile: raw reads of one-tensor .pt files, checked against torch.load."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from ffcv_pairs.write.ptfile import learn_template, read_label, read_tensor, read_zip_entries

DTYPES = [torch.uint8, torch.float16, torch.float32, torch.int64, torch.bool]
SHAPES = {"CHW": (3, 8, 6), "HWC": (8, 6, 3)}


def _random(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    return torch.randint(0, 256 if dtype == torch.uint8 else 2**40, shape, generator=g, dtype=dtype)


def _expected(path: Path) -> np.ndarray:
    """The definition: what torch.load gives."""
    return torch.load(path, weights_only=True).numpy()


def _assert_bit_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def _rewrite(
    src: Path,
    dst: Path,
    edit: Callable[[str, bytes], bytes | None],
    compression: int = zipfile.ZIP_STORED,
) -> None:
    """Copy an archive entry by entry through Python's zipfile; ``edit`` may change or drop one."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            data = edit(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info.filename.replace(src.stem, dst.stem), data)


def _patch(path: Path, old: bytes, new: bytes) -> None:
    """Overwrite bytes in place (same length; torch checks no CRC)."""
    raw = path.read_bytes()
    assert raw.count(old) == 1 and len(old) == len(new)
    path.write_bytes(raw.replace(old, new))


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fast_path_is_bit_exact(tmp_path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    paths = []
    for i in range(4):
        paths.append(tmp_path / f"train_A_images_{i * 7}.pt")  # top folders of different length
        torch.save(_random(shape, dtype, seed=i), paths[-1])
    template = learn_template(paths[0])
    assert template.reason == ""
    for p in paths:
        _assert_bit_equal(read_tensor(p, template), _expected(p))
    assert (template.fast_reads, template.fallback_reads) == (4, 0)


def test_labels(tmp_path: Path) -> None:
    values = [0, 7, -3, 2**40 + 1]
    for i, v in enumerate(values):
        torch.save(torch.tensor(v), tmp_path / f"train_labels_{i}.pt")
    template = learn_template(tmp_path / "train_labels_0.pt")
    got = [read_label(tmp_path / f"train_labels_{i}.pt", template) for i in range(len(values))]
    assert got == values and all(type(v) is int for v in got)
    assert template.fast_reads == len(values)
    _assert_bit_equal(read_tensor(tmp_path / "train_labels_1.pt", template), np.array(7))
    torch.save(torch.tensor(1.5), tmp_path / "float.pt")
    with pytest.raises(ValueError, match=r"float\.pt: label must be an integer"):
        read_label(tmp_path / "float.pt", template)


def _view_rows(p: Path, t: torch.Tensor) -> None:
    torch.save(t[1:], p)


def _view_strided(p: Path, t: torch.Tensor) -> None:
    torch.save(t[:, ::2], p)


def _transposed(p: Path, t: torch.Tensor) -> None:
    torch.save(t.transpose(1, 2), p)  # the storage is exactly the tensor, in another order


def _legacy(p: Path, t: torch.Tensor) -> None:
    torch.save(t, p, _use_new_zipfile_serialization=False)


def _other_dtype(p: Path, t: torch.Tensor) -> None:
    torch.save(t.view(torch.int8), p)  # same byte length, different storage class


def _other_shape(p: Path, t: torch.Tensor) -> None:
    torch.save(t.reshape(4, 3, 4), p)  # same byte length, different shape


def _tampered_pkl(p: Path, t: torch.Tensor) -> None:
    torch.save(t, p)  # shape (3, 4, 4), strides (16, 4, 1) -> (4, 3, 4), (12, 4, 1)
    _patch(p, b"K\x03K\x04K\x04\x87", b"K\x04K\x03K\x04\x87")
    _patch(p, b"K\x10K\x04K\x01\x87", b"K\x0cK\x04K\x01\x87")


def _big_endian(p: Path, t: torch.Tensor) -> None:
    torch.save(t.view(torch.int16), p.with_suffix(".tmp"))

    def edit(name: str, data: bytes) -> bytes:
        if name.endswith("/byteorder"):
            return b"big"
        if name.endswith("/data/0"):
            return np.frombuffer(data, "<i2").astype(">i2").tobytes()
        return data

    _rewrite(p.with_suffix(".tmp"), p, edit)


def _no_byteorder(p: Path, t: torch.Tensor) -> None:
    torch.save(t, p.with_suffix(".tmp"))
    _rewrite(p.with_suffix(".tmp"), p, lambda n, d: None if n.endswith("/byteorder") else d)


def _compressed(p: Path, t: torch.Tensor) -> None:
    torch.save(t, p.with_suffix(".tmp"))
    _rewrite(p.with_suffix(".tmp"), p, lambda n, d: d, zipfile.ZIP_DEFLATED)


FALLBACKS = [
    _view_rows,
    _view_strided,
    _transposed,
    _legacy,
    _other_dtype,
    _other_shape,
    _tampered_pkl,
    _big_endian,
    _no_byteorder,
    _compressed,
]


@pytest.mark.parametrize("make", FALLBACKS, ids=lambda f: f.__name__.strip("_"))
def test_fallbacks_are_taken_and_correct(tmp_path: Path, make: Callable[..., None]) -> None:
    t = _random((3, 4, 4), torch.uint8, seed=1)
    torch.save(_random((3, 4, 4), torch.uint8, seed=0), tmp_path / "x_0.pt")
    template = learn_template(tmp_path / "x_0.pt")
    path = tmp_path / "x_1.pt"
    make(path, t)
    want = _expected(path)
    if make is _big_endian:  # torch swaps the bytes back; the values are the saved ones
        _assert_bit_equal(want, t.view(torch.int16).numpy())
    _assert_bit_equal(read_tensor(path, template), want)
    assert (template.fast_reads, template.fallback_reads) == (0, 1)
    # learnt from such a file, the template has no fast path (a dtype or shape of its own is fine)
    own = learn_template(path)
    assert (own.reason != "") == (make not in (_other_dtype, _other_shape, _tampered_pkl))
    _assert_bit_equal(read_tensor(path, own), want)


def test_fast_path_reads_other_zip_writers(tmp_path: Path) -> None:
    """An archive rewritten by Python's zipfile (no padding, no zip64, a comment)."""
    torch.save(_random((3, 4, 4), torch.float32, seed=0), tmp_path / "x_0.pt")
    torch.save(_random((3, 4, 4), torch.float32, seed=1), tmp_path / "x_1.tmp")
    _rewrite(tmp_path / "x_1.tmp", tmp_path / "x_1.pt", lambda n, d: d)
    with zipfile.ZipFile(tmp_path / "x_1.pt", "a") as z:
        z.comment = b"written by zipfile"
    template = learn_template(tmp_path / "x_0.pt")
    _assert_bit_equal(read_tensor(tmp_path / "x_1.pt", template), _expected(tmp_path / "x_1.pt"))
    assert template.fast_reads == 1


def test_what_torch_refuses_is_refused(tmp_path: Path) -> None:
    """A comment holding an end-record signature misleads torch's reader; ours agrees."""
    torch.save(_random((3, 4, 4), torch.float32, seed=0), tmp_path / "x_0.pt")
    _rewrite(tmp_path / "x_0.pt", tmp_path / "x_1.pt", lambda n, d: d)
    with zipfile.ZipFile(tmp_path / "x_1.pt", "a") as z:
        z.comment = b"PK\x05\x06 looks like an end record"
    template = learn_template(tmp_path / "x_0.pt")
    try:
        want = _expected(tmp_path / "x_1.pt")
    except RuntimeError:  # torch 2.13: "unsupported multidisk archive"
        with pytest.raises(ValueError, match=r"x_1\.pt: not a readable torch.save file"):
            read_tensor(tmp_path / "x_1.pt", template)
    else:
        _assert_bit_equal(read_tensor(tmp_path / "x_1.pt", template), want)


def test_read_zip_entries_matches_zipfile(tmp_path: Path) -> None:
    path = tmp_path / "train_B_images_3.pt"
    torch.save(_random((5, 7), torch.float32, seed=2), path)
    buf = path.read_bytes()
    entries = read_zip_entries(buf, str(path))
    with zipfile.ZipFile(path) as z:
        assert entries is not None and sorted(entries) == sorted(z.namelist())
        for name, (start, size) in entries.items():
            assert buf[start : start + size] == z.read(name)
    assert read_zip_entries(memoryview(buf), "m") == entries
    _compressed(tmp_path / "c.pt", torch.zeros(4))
    assert read_zip_entries((tmp_path / "c.pt").read_bytes(), "c.pt") is None
    with pytest.raises(ValueError, match=r"^cut\.pt: "):
        read_zip_entries(buf[:-30], "cut.pt")


@pytest.mark.parametrize("cut", ["empty", "half", "end", "garbage", "list", "bfloat16"])
def test_bad_files_raise_naming_the_file(tmp_path: Path, cut: str) -> None:
    torch.save(_random((3, 4, 4), torch.uint8, seed=0), tmp_path / "good.pt")
    template = learn_template(tmp_path / "good.pt")
    raw = (tmp_path / "good.pt").read_bytes()
    bad = tmp_path / "bad_1.pt"
    if cut == "list":
        torch.save([1, 2], bad)
    elif cut == "bfloat16":
        torch.save(torch.zeros(3, dtype=torch.bfloat16), bad)
    else:
        content = {"empty": b"", "half": raw[: len(raw) // 2], "end": raw[:-5]}
        bad.write_bytes(content.get(cut, b"not a pickle" * 9))
    for read in (lambda: read_tensor(bad, template), lambda: learn_template(bad)):
        with pytest.raises(ValueError, match=r"bad_1\.pt: "):
            read()
    with pytest.raises(FileNotFoundError):
        read_tensor(tmp_path / "missing.pt", template)


def test_layout_is_checked_not_only_the_bytes(tmp_path: Path) -> None:
    """A transposed all-zero sample 0 decodes the same either way; its template must refuse."""
    torch.save(torch.zeros(3, 4, 5, dtype=torch.uint8).transpose(1, 2), tmp_path / "x_0.pt")
    template = learn_template(tmp_path / "x_0.pt")
    assert "contiguous" in template.reason
    torch.save(_random((3, 4, 5), torch.uint8, seed=3).transpose(1, 2), tmp_path / "x_1.pt")
    _assert_bit_equal(read_tensor(tmp_path / "x_1.pt", template), _expected(tmp_path / "x_1.pt"))


def test_skeletons_skip_the_parse_and_stay_bit_exact(tmp_path: Path, monkeypatch) -> None:
    """Files of one name length repeat one skeleton: only the first of each is parsed."""
    import ffcv_pairs.write.ptfile as ptfile

    parsed = []
    full = ptfile._parsed
    monkeypatch.setattr(
        ptfile, "_parsed", lambda buf, t, where: parsed.append(where) or full(buf, t, where)
    )
    ids = [0, 1, 2, 9, 10, 11, 99, 100, 101]  # top folders of 16, 17 and 18 bytes
    for i in ids:
        torch.save(_random((3, 8, 6), torch.uint8, seed=i), tmp_path / f"train_A_images_{i}.pt")
    template = learn_template(tmp_path / "train_A_images_0.pt")
    for i in ids:
        p = tmp_path / f"train_A_images_{i}.pt"
        _assert_bit_equal(read_tensor(p, template), _expected(p))
    assert len(template.skeletons) == 3
    assert [Path(w).name for w in parsed] == [f"train_A_images_{i}.pt" for i in (0, 10, 100)]
    assert (template.fast_reads, template.fallback_reads) == (len(ids), 0)


@pytest.mark.parametrize("rename", ["one entry's folder", "a slash in the folder"])
def test_a_skeleton_checks_the_folder_names(tmp_path: Path, rename: str) -> None:
    """Same length, same bytes but for the folder names: only torch.load may decide."""
    for i in (0, 1):
        torch.save(_random((3, 8, 6), torch.uint8, seed=i), tmp_path / f"train_A_images_{i}.pt")
    template = learn_template(tmp_path / "train_A_images_0.pt")
    assert len(template.skeletons) == 1
    path = tmp_path / "train_A_images_1.pt"
    raw = path.read_bytes()
    if rename == "one entry's folder":  # the storage entry, in its local and central header
        raw = raw.replace(b"train_A_images_1/data/0", b"train_A_images_2/data/0")
    else:
        raw = raw.replace(b"train_A_images_1/", b"train/A_images_1/")
    path.write_bytes(raw)
    try:
        want = _expected(path)
    except Exception:  # torch cannot find its records: the fast path must not find them either
        with pytest.raises(ValueError, match=r"train_A_images_1\.pt: not a readable"):
            read_tensor(path, template)
    else:
        _assert_bit_equal(read_tensor(path, template), want)
    assert (template.fast_reads, template.fallback_reads) == (0, 1)
