"""The writer: both layouts, several shapes and dtypes, read back bit-exactly by upstream FFCV."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays, read_upstream, write_batched, write_per_sample
from ffcv.types import FieldDescType, HeaderType

from ffcv_pairs import ArraySource, IndexedSource, PairReader, PairSchema, open_source, write_pairs
from ffcv_pairs.cli import write_main
from ffcv_pairs.format.sidecar import Manifest, manifest_path

CASES = [
    ((3, 16, 16), "uint8"),
    ((16, 16, 3), "float32"),
    ((1, 8, 12), "float16"),
    ((5, 7), "uint8"),
    ((4, 10, 10), "float32"),
]


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("layout", ["per-sample", "batched"])
@pytest.mark.parametrize(("shape", "dtype"), CASES)
def test_roundtrip_bit_exact(tmp_path: Path, layout: str, shape, dtype) -> None:
    a, b, labels = make_arrays(37, shape, dtype, seed=len(shape))
    src_dir = tmp_path / "pt"
    (write_per_sample if layout == "per-sample" else write_batched)(src_dir, "train", a, b, labels)
    out = tmp_path / "out"
    rc = write_main(
        [
            str(src_dir),
            str(out),
            "--split",
            "train",
            "--workers",
            "2",
            "--page-size",
            "8KiB",
            "--no-progress",
        ]
    )
    assert rc == 0
    ra, rb, rl = read_upstream(out / "train.beton")
    assert _same_bytes(ra, a)
    assert _same_bytes(rb, b)
    np.testing.assert_array_equal(rl, labels)
    assert Manifest.load(manifest_path(out / "train.beton")).num_samples == 37
    # Small pages: the layout's definition puts sample i on data page i // per_page, A then B,
    # never straddling a page; the data pointers must say so, and so must the bytes there.
    reader = PairReader(out / "train.beton")
    ps, na, nb = reader.page_size, a[0].nbytes, b[0].nbytes
    assert ps == 8192
    per_page = ps // (na + nb)
    ptr_a, ptr_b = (np.asarray(reader.image_pointers(f), np.int64) for f in PairSchema.IMAGE_FIELDS)
    first = int(ptr_a[0])
    assert first % ps == 0
    i = np.arange(37)
    np.testing.assert_array_equal(ptr_a, first + (i // per_page) * ps + (i % per_page) * (2 * na))
    np.testing.assert_array_equal(ptr_b, ptr_a + na)
    pages = np.unique(np.concatenate([ptr_a, ptr_b + nb - 1]) // ps)
    assert len(pages) == -(-37 // per_page)  # A and B of a sample end on the page they start
    if 37 * (na + nb) > ps:
        assert len(pages) >= 2, "the data should need several pages"
    raw = np.memmap(out / "train.beton", dtype=np.uint8, mode="r")
    for k in range(37):
        assert raw[ptr_a[k] : ptr_a[k] + na].tobytes() == a[k].tobytes()
        assert raw[ptr_b[k] : ptr_b[k] + nb].tobytes() == b[k].tobytes()


def test_several_splits_and_limit(tmp_path: Path) -> None:
    a, b, labels = make_arrays(20)
    write_per_sample(tmp_path / "pt", "train", a, b, labels)
    write_per_sample(tmp_path / "pt", "val", a[:9], b[:9], labels[:9])
    rc = write_main(
        [
            str(tmp_path / "pt"),
            str(tmp_path / "out"),
            "--split",
            "train",
            "--split",
            "val",
            "--limit",
            "12",
            "--no-progress",
        ]
    )
    assert rc == 0
    assert len(read_upstream(tmp_path / "out" / "train.beton")[2]) == 12
    assert len(read_upstream(tmp_path / "out" / "val.beton")[2]) == 9


def test_array_and_indexed_sources_match(tmp_path: Path) -> None:
    a, b, labels = make_arrays(50, (2, 6, 6))
    write_pairs(
        ArraySource(a, b, labels), tmp_path / "arr.beton", workers=2, page_size=4096, progress=False
    )
    triples = [(torch.from_numpy(a[i]), b[i], int(labels[i])) for i in range(50)]
    write_pairs(
        IndexedSource(triples), tmp_path / "idx.beton", workers=1, page_size=4096, progress=False
    )
    assert (tmp_path / "arr.beton").read_bytes() == (tmp_path / "idx.beton").read_bytes()
    ra, rb, rl = read_upstream(tmp_path / "arr.beton")
    assert _same_bytes(ra, a) and _same_bytes(rb, b)
    np.testing.assert_array_equal(rl, labels)


def test_a_and_b_may_differ_in_shape(tmp_path: Path) -> None:
    a, _, labels = make_arrays(10, (3, 8, 8))
    b = np.arange(10 * 4 * 5, dtype=np.float32).reshape(10, 4, 5)
    report = write_pairs(ArraySource(a, b, labels), tmp_path / "x.beton", progress=False)
    assert report.schema.b.shape == (4, 5) and report.schema.b.dtype == "float32"
    ra, rb, _ = read_upstream(tmp_path / "x.beton")
    assert _same_bytes(ra, a) and _same_bytes(rb, b)


def test_store_dtype_uint8_from_whole_floats(tmp_path: Path) -> None:
    a, b, labels = make_arrays(12, (3, 4, 4))
    src = write_per_sample(
        tmp_path / "pt", "train", a.astype(np.float32), b.astype(np.float32), labels
    )
    rc = write_main(
        [
            str(src),
            str(tmp_path / "out"),
            "--split",
            "train",
            "--store-dtype",
            "uint8",
            "--no-progress",
        ]
    )
    assert rc == 0
    ra, rb, _ = read_upstream(tmp_path / "out" / "train.beton")
    assert _same_bytes(ra, a) and _same_bytes(rb, b)


def test_manifest_matches_file(tmp_path: Path) -> None:
    a, b, labels = make_arrays(30)
    report = write_pairs(
        ArraySource(a, b, labels), tmp_path / "m.beton", page_size=4096, progress=False
    )
    m = Manifest.load(report.manifest)
    data = report.path.read_bytes()
    blocks = [data[i : i + m.page_size] for i in range(0, len(data), m.page_size)]
    # The definition: CRC32 per block; SHA-256 over the blocks' SHA-256 digests, in order.
    assert m.crcs() == [zlib.crc32(blk) for blk in blocks]
    assert (
        m.root_sha256
        == hashlib.sha256(b"".join(hashlib.sha256(blk).digest() for blk in blocks)).hexdigest()
    )
    assert m.format == "ffcv-pairs-manifest/2" and m.sha256 == ""
    assert m.file_size == report.path.stat().st_size
    assert m.schema == report.schema.to_json()
    assert json.loads(report.manifest.read_text())["source"] == "arrays"


def test_rewrite_replaces_old_file_only_when_complete(tmp_path: Path) -> None:
    a, b, labels = make_arrays(10)
    out = tmp_path / "r.beton"
    write_pairs(ArraySource(a, b, labels), out, progress=False)
    write_pairs(ArraySource(b, a, labels), out, progress=False)
    ra, rb, _ = read_upstream(out)
    assert _same_bytes(ra, b) and _same_bytes(rb, a)
    assert not out.with_name("r.beton.partial").exists()


def test_schema_is_the_only_place_with_field_names(tmp_path: Path) -> None:
    names = PairSchema.field_names()
    assert names == ("A", "B", "label")
    # The file's own field table (raw descriptors after the header) holds exactly these.
    a, b, labels = make_arrays(3, (2, 4, 4))
    path = tmp_path / "f.beton"
    write_pairs(ArraySource(a, b, labels), path, progress=False)
    header = np.fromfile(path, dtype=HeaderType, count=1)[0]
    table = np.fromfile(
        path, dtype=FieldDescType, count=int(header["num_fields"]), offset=HeaderType.itemsize
    )
    assert [bytes(d["name"]).rstrip(b"\0").decode() for d in table] == list(names)
    # No module but the schema spells a field name (all three, in every subpackage).
    root = Path(__file__).parents[1] / "ffcv_pairs"
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "schema.py" and any(f'"{n}"' in p.read_text() for n in names)
    ]
    assert offenders == []


def test_open_source_detects_layouts(pairs_dir) -> None:
    assert type(open_source(pairs_dir("per-sample"), "train")).__name__ == "PerSampleSource"
    batched = open_source(pairs_dir("batched", n=15), "train")
    assert type(batched).__name__ == "BatchedSource" and len(batched) == 15


def _refusing_direct_pwrite(real):
    """``os.pwrite`` of a file system that opens ``O_DIRECT`` but refuses its writes."""
    import errno
    import fcntl
    import os

    def pwrite(fd, data, offset):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    return pwrite


@pytest.mark.parametrize("layout", ["per-sample", "batched"])
def test_direct_and_buffered_page_writes_give_the_same_file(
    tmp_path: Path, layout: str, monkeypatch
) -> None:
    """Whole pages go through O_DIRECT where the file system offers it; the bytes must not
    depend on it (nor on a file system that refuses it: tmpfs, or EINVAL on the write)."""
    import os

    from ffcv_pairs.write import tasks

    a, b, labels = make_arrays(300, (3, 10, 10), seed=4)
    write = write_per_sample if layout == "per-sample" else write_batched
    src = write(tmp_path / "pt", "train", a, b, labels)
    probe = tasks._open_direct(tmp_path / "pt" / os.listdir(tmp_path / "pt")[0])
    if probe is None:
        pytest.skip("tmp_path's file system has no O_DIRECT (tmpfs?)")
    os.close(probe)
    runs = {}
    for how in ("direct", "buffered", "refused"):
        if how == "buffered":
            monkeypatch.setattr(tasks, "_open_direct", lambda path: None)
        if how == "refused":
            monkeypatch.undo()
            monkeypatch.setattr(os, "pwrite", _refusing_direct_pwrite(os.pwrite))
        out = tmp_path / f"{how}.beton"
        write_pairs(open_source(src, "train"), out, workers=2, page_size=4096, progress=False)
        runs[how] = out.read_bytes()
    assert runs["direct"] == runs["buffered"] == runs["refused"]
    assert len(runs["direct"]) > 10 * 4096


def test_a_slow_page_write_never_sees_the_next_page(tmp_path: Path, monkeypatch) -> None:
    """Pages are written by a helper thread while the next one is gathered into the other
    buffer; a write that takes long must still write its own page's bytes."""
    import time

    from ffcv_pairs.write import tasks

    a, b, labels = make_arrays(400, (3, 10, 10), seed=5)
    src = ArraySource(a, b, labels)
    write_pairs(src, tmp_path / "plain.beton", workers=1, page_size=4096, progress=False)
    slow = tasks._write_page

    def late(fd: int, buf: np.ndarray, offset: int) -> None:
        time.sleep(0.02)  # longer than gathering the next two pages
        slow(fd, buf, offset)

    monkeypatch.setattr(tasks, "_write_page", late)
    write_pairs(src, tmp_path / "slow.beton", workers=1, page_size=4096, progress=False)
    plain, slowed = ((tmp_path / f"{n}.beton").read_bytes() for n in ("plain", "slow"))
    assert len(plain) > 20 * 4096
    assert plain == slowed
