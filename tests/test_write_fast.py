"""The writer's fast .pt path end to end: bit-exact through write_pairs and upstream FFCV,
every fallback taken (and counted), and bad files still named as before."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from ffcv_pairs import PairReader, PairSchema, open_source, write_pairs
from ffcv_pairs.write.ptfile import read_zip_entries

SHAPES = {"CHW": (3, 6, 5), "HWC": (6, 5, 3)}


def _images(n: int, shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn((n, *shape), generator=g) * 50).to(dtype)
    return torch.randint(0, 256, (n, *shape), generator=g, dtype=dtype)


def read_back(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B and labels of a written file, from its pointers and metadata (no loader)."""
    reader = PairReader(path)
    raw = np.fromfile(path, dtype=np.uint8)
    out = []
    for field in PairSchema.IMAGE_FIELDS:
        spec = reader.schema.spec(field)
        ptrs = np.asarray(reader.image_pointers(field), dtype=np.int64)
        rows = raw[ptrs[:, None] + np.arange(spec.nbytes)]
        out.append(rows.view(spec.np_dtype).reshape(len(ptrs), *spec.shape))
    labels = np.asarray(reader.metadata[f"f{reader.field_index(PairSchema.LABEL_FIELD)}"])
    return out[0], out[1], labels


def _save(root: Path, a: torch.Tensor, b: torch.Tensor, labels: list[int]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(labels):
        torch.save(a[i].clone(), root / f"train_A_images_{i}.pt")
        torch.save(b[i].clone(), root / f"train_B_images_{i}.pt")
        torch.save(torch.tensor(label), root / f"train_labels_{i}.pt")
    return root


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize(
    ("dtype", "store"),
    [
        (torch.uint8, None),
        (torch.float16, None),
        (torch.float32, None),
        (torch.int64, "uint8"),  # read raw, then cast by the writer's checks
    ],
    ids=["uint8", "float16", "float32", "int64"],
)
def test_fast_path_through_the_writer_is_bit_exact(
    tmp_path: Path, dtype: torch.dtype, store: str | None, shape: tuple[int, ...]
) -> None:
    n = 23
    a, b = _images(n, shape, dtype, 0), _images(n, shape, dtype, 1)
    labels = [(-1) ** i * (i * 7919) for i in range(n)]  # negative and large int64 labels
    src = _save(tmp_path / "pt", a, b, labels)
    report = write_pairs(
        open_source(src, "train"), tmp_path / "x.beton", workers=2, page_size=4096,
        store_dtype=store, progress=False,
    )  # fmt: skip
    assert (report.fast_reads, report.fallback_reads) == (3 * n, 0)
    ra, rb, rl = read_back(tmp_path / "x.beton")
    want_a = torch.stack([torch.load(src / f"train_A_images_{i}.pt") for i in range(n)]).numpy()
    want_b = torch.stack([torch.load(src / f"train_B_images_{i}.pt") for i in range(n)]).numpy()
    if store is not None:
        want_a, want_b = want_a.astype(store), want_b.astype(store)
    assert ra.dtype == want_a.dtype and ra.tobytes() == want_a.tobytes()
    assert rb.dtype == want_b.dtype and rb.tobytes() == want_b.tobytes()
    np.testing.assert_array_equal(rl, labels)


def _big_endian_copy(path: Path, t: torch.Tensor) -> None:
    """``path`` holding ``t`` (float32) stored big-endian, as torch.load reads it back."""
    import zipfile

    tmp = path.with_suffix(".tmp")
    torch.save(t, tmp)
    with zipfile.ZipFile(tmp) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/byteorder"):
                data = b"big"
            elif info.filename.endswith("/data/0"):
                data = np.frombuffer(data, "<f4").astype(">f4").tobytes()
            zout.writestr(info.filename.replace(tmp.stem, path.stem), data)
    tmp.unlink()


def _tamper(path: Path) -> None:
    """Flip ``requires_grad`` in ``data.pkl`` (False -> True) without rewriting the archive."""
    raw = bytearray(path.read_bytes())
    entries = read_zip_entries(bytes(raw), str(path))
    assert entries is not None
    start, size = next(span for name, span in entries.items() if name.endswith("/data.pkl"))
    pkl = raw[start : start + size]
    at = pkl.rindex(b"\x89")  # NEWFALSE: the requires_grad argument of the rebuild call
    raw[start + at] = 0x88  # NEWTRUE
    path.write_bytes(bytes(raw))


def test_every_fallback_is_taken_and_counted(tmp_path: Path) -> None:
    n, shape = 12, (3, 4, 4)
    a, b = _images(n, shape, torch.float32, 2), _images(n, shape, torch.float32, 3)
    src = _save(tmp_path / "pt", a, b, list(range(n)))
    wide = torch.cat([torch.zeros(1, 4, 4), a[3]])  # a view whose storage is larger
    torch.save(wide[1:], src / "train_A_images_3.pt")
    torch.save(a[5].clone(), src / "train_A_images_5.pt", _use_new_zipfile_serialization=False)
    _big_endian_copy(src / "train_A_images_7.pt", a[7].clone())
    _tamper(src / "train_A_images_9.pt")  # data.pkl edited in place
    torch.save(b[2].clone().requires_grad_(), src / "train_B_images_2.pt")  # other data.pkl
    torch.save(10, src / "train_labels_10.pt")  # a Python int, not a tensor
    report = write_pairs(
        open_source(src, "train"), tmp_path / "x.beton", workers=2, page_size=4096, progress=False
    )
    assert (report.fast_reads, report.fallback_reads) == (3 * n - 6, 6)
    assert "6 by torch.load" in report.summary()
    ra, rb, rl = read_back(tmp_path / "x.beton")
    assert ra.tobytes() == a.numpy().tobytes() and rb.tobytes() == b.numpy().tobytes()
    np.testing.assert_array_equal(rl, np.arange(n))


def _other_version(path: Path) -> None:
    """The archive's ``version`` record (stored after the tensor's bytes) 3 -> 2, its two
    CRC-32s fixed: every other byte as saved, and ``torch.load`` still reads it."""
    raw = bytearray(path.read_bytes())
    at = raw.index(b"3\n", raw.index(b"/version"))
    raw[at] = ord("2")
    old, new = struct.pack("<I", zlib.crc32(b"3\n")), struct.pack("<I", zlib.crc32(b"2\n"))
    path.write_bytes(bytes(raw).replace(old, new))


def test_a_page_read_at_once_sends_odd_files_one_by_one(tmp_path: Path) -> None:
    """One page of 40 samples read a field at a time: indices 9 -> 10 change the files'
    length mid-page, and a file that differs only after its tensor's bytes (a record the
    skeleton fixes) goes through torch.load."""
    n, shape = 40, (3, 24, 24)  # storage over a kilobyte: the skeleton checks two spans
    a, b = _images(n, shape, torch.uint8, 5), _images(n, shape, torch.uint8, 6)
    src = _save(tmp_path / "pt", a, b, list(range(n)))
    _other_version(src / "train_A_images_17.pt")
    _other_version(src / "train_labels_30.pt")
    report = write_pairs(
        open_source(src, "train"), tmp_path / "x.beton", workers=1, page_size=1 << 20,
        progress=False,
    )  # fmt: skip
    assert (report.fast_reads, report.fallback_reads) == (3 * n - 2, 2)
    ra, rb, rl = read_back(tmp_path / "x.beton")
    assert ra.tobytes() == a.numpy().tobytes() and rb.tobytes() == b.numpy().tobytes()
    np.testing.assert_array_equal(rl, np.arange(n))


def test_read_samples_puts_every_file_in_its_row(tmp_path: Path) -> None:
    from ffcv_pairs.write.ptblock import read_samples, stage_bytes

    n = 37
    a, b = _images(n, (2, 5), torch.uint8, 9), _images(n, (2, 5), torch.uint8, 10)
    src = _save(tmp_path / "pt", a, b, list(range(n)))
    source = open_source(src, "train")
    source.read(0)
    source.read(n - 1)  # both name lengths learnt
    templates = source._templates
    paths = [[source.path(f, i) for i in range(n)] for f in range(3)]
    missing = src / "train_B_images_5.pt"
    missing.unlink()
    stages = [np.zeros(stage_bytes(t, n), np.uint8) for t in templates]
    staged = read_samples(paths, templates, stages)
    for f in range(3):
        for j in range(n):
            path = Path(paths[f][j])
            want = path.read_bytes() if path.exists() else None
            got = staged[f]
            if want is None:
                assert got.lengths[j] == -1
            else:
                assert got.lengths[j] == len(want)
                assert got.rows[j, : len(want)].tobytes() == want


def test_sample_zero_without_a_fast_path_still_converts(tmp_path: Path) -> None:
    """Sample 0 is the template: a legacy A_images_0 sends field A to torch.load, Python-int
    labels have no template at all; field B stays fast."""
    n = 6
    a = _images(n, (2, 3), torch.uint8, 4)
    src = _save(tmp_path / "pt", a, a, list(range(n)))
    torch.save(a[0].clone(), src / "train_A_images_0.pt", _use_new_zipfile_serialization=False)
    for i in range(n):
        torch.save(i, src / f"train_labels_{i}.pt")
    report = write_pairs(open_source(src, "train"), tmp_path / "x.beton", progress=False)
    assert (report.fast_reads, report.fallback_reads) == (n, 2 * n)
    ra, _, rl = read_back(tmp_path / "x.beton")
    assert ra.tobytes() == a.numpy().tobytes()
    np.testing.assert_array_equal(rl, np.arange(n))
