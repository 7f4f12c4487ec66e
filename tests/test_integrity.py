"""Checksums, inspect/verify, refusing bad files, fuzzing, and the RAM budget."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays, write_batched, write_per_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffcv_pairs import BetonError, PairReader, PairSchema, make_loader, write_pairs
from ffcv_pairs.cli import main
from ffcv_pairs.format.integrity import describe_block
from ffcv_pairs.format.sidecar import manifest_path
from ffcv_pairs.load.budget import MemoryBudgetError
from ffcv_pairs.write.source_kinds import open_source

N = 120


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, Path]:
    a, b, labels = make_arrays(N, (3, 8, 8), seed=5)
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    out = tmp_path / "out" / "train.beton"
    write_pairs(open_source(src, "train"), out, page_size=4096, workers=1, progress=False)
    return out, src


def _verify(capsys, *args: str) -> tuple[int, str]:
    rc = main(["verify", *args])
    return rc, capsys.readouterr().out


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_verify_ok_against_source(capsys, written) -> None:
    out, src = written
    rc, text = _verify(capsys, str(out), "--against", str(src), "--samples", "all")
    assert rc == 0, text
    assert "checksums: OK" in text and f"samples: OK ({N} of {N}" in text


def test_flipped_byte_in_a_page_is_named(capsys, written) -> None:
    out, _ = written
    reader = PairReader(out)
    ptr = int(reader.image_pointers("B")[57])
    _flip(out, ptr + 3)
    page = ptr // reader.page_size
    rc, text = _verify(capsys, str(out))
    assert rc == 1
    assert f"checksum mismatch in page {page} (data" in text and "samples" in text
    # The page's description, from the layout's definition: its byte range, and the samples
    # with data on it (A or B), a contiguous run that includes sample 57.
    ps = reader.page_size
    on_page = sorted(
        {
            int(i)
            for field in PairSchema.IMAGE_FIELDS
            for i in np.flatnonzero(reader.image_pointers(field) // ps == page)
        }
    )
    assert 57 in on_page and on_page == list(range(on_page[0], on_page[-1] + 1))
    assert describe_block(reader, page) == (
        f"page {page} (data, bytes {page * ps}-{(page + 1) * ps}, "
        f"samples {on_page[0]}-{on_page[-1]})"
    )
    assert f"checksum mismatch in {describe_block(reader, page)}" in text
    with pytest.raises(BetonError, match=f"page {page}"):
        make_loader(out, batch_size=8, verify=True)
    make_loader(out, batch_size=8)  # a data page is only checked on request


def test_corrupt_metadata_is_refused_on_open(written) -> None:
    out, _ = written
    reader = PairReader(out)
    label_offset = reader.metadata_offset + 33 * reader.metadata.itemsize + 16
    _flip(out, label_offset)  # a label: structurally fine, silently wrong without checksums
    with pytest.raises(BetonError, match="checksum mismatch in block 0"):
        make_loader(out, batch_size=8)


def test_source_mismatch_names_the_sample(capsys, written) -> None:
    out, src = written
    torch.save(torch.zeros(3, 8, 8, dtype=torch.uint8), src / "train_A_images_9.pt")
    rc, text = _verify(capsys, str(out), "--against", str(src), "--samples", "all")
    assert rc == 1 and "sample 9: field 'A' differs from" in text and "train_A_images_9.pt" in text


def test_verify_compares_the_source_count_with_the_file(capsys, tmp_path: Path) -> None:
    """A file written from fewer samples than the source holds (a pack counted empty,
    say) fails, though every sample it has matches; one cut short by --limit passes, as
    its sidecar says the source's count. Without a sidecar, the counts must be equal."""
    a, b, labels = make_arrays(9, (3, 4, 4), seed=2)
    src = write_batched(tmp_path / "pt", "train", a[:6], b[:6], labels[:6], per_file=3)
    out = tmp_path / "train.beton"
    write_pairs(open_source(src, "train"), out, page_size=4096, progress=False)
    write_batched(tmp_path / "more", "train", a, b, labels, per_file=3)
    shutil.copy(tmp_path / "more" / "train_batch_2.pt", src)  # the source now holds 9
    rc, text = _verify(capsys, str(out), "--against", str(src), "--samples", "all")
    assert rc == 1, text
    assert text.splitlines()[-1] == (
        f"FAIL: {out}: source has 9 samples, but the file was written from 6 (its sidecar says)"
    )
    limited = tmp_path / "limited" / "train.beton"
    write_pairs(open_source(src, "train"), limited, page_size=4096, limit=5, progress=False)
    rc, text = _verify(capsys, str(limited), "--against", str(src), "--samples", "all")
    assert rc == 0 and "samples: OK (5 of 5" in text, text
    manifest_path(limited).unlink()
    rc, text = _verify(capsys, str(limited), "--against", str(src), "--samples", "all")
    assert rc == 1 and f"FAIL: {limited}: source has 9 samples, the file 5" in text, text


def _short(real, calls: list[int]):
    """``real`` (``os.pread``, ``os.preadv`` or ``os.pwrite``) moving at most 1000 bytes per
    call, as Linux moves at most 2,147,479,552; ``calls`` gets every size asked for."""
    cap = 1000

    def short(fd, data, offset, *rest):
        if isinstance(data, int):  # pread(fd, n, offset)
            calls.append(data)
            return real(fd, min(data, cap), offset)
        if isinstance(data, list):  # preadv(fd, [buffer], offset)
            view = memoryview(data[0]).cast("B")
            calls.append(len(view))
            return real(fd, [view[:cap]], offset, *rest)
        view = memoryview(data).cast("B")  # pwrite(fd, data, offset)
        calls.append(len(view))
        return real(fd, view[:cap], offset)

    return short


@pytest.mark.parametrize("workers", [1, 2])
def test_short_reads_and_writes_give_the_same_file_and_checksums(
    capsys, tmp_path: Path, monkeypatch, workers: int
) -> None:
    """Every read and write of the writer and of verify goes on from where a short one
    stopped: the file, its block CRCs and digest are those of a run without short ones,
    and verify (itself reading short) passes it."""
    import os

    from ffcv_pairs.format.sidecar import Manifest, hash_file

    a, b, labels = make_arrays(N, (3, 8, 8), seed=5)
    src = write_batched(tmp_path / "pt", "train", a, b, labels, per_file=25)
    plain = tmp_path / "plain.beton"
    write_pairs(open_source(src, "train"), plain, page_size=4096, workers=workers, progress=False)
    calls: list[int] = []
    for name in ("pread", "preadv", "pwrite"):
        monkeypatch.setattr(os, name, _short(getattr(os, name), calls))
    short = tmp_path / "short" / "train.beton"  # verify takes the split from the name
    write_pairs(open_source(src, "train"), short, page_size=4096, workers=workers, progress=False)
    assert max(calls) >= 4096, "no read or write was asked for more than the cap"
    assert short.read_bytes() == plain.read_bytes()
    want, got = Manifest.load(manifest_path(plain)), Manifest.load(manifest_path(short))
    assert (got.block_crc32, got.root_sha256) == (want.block_crc32, want.root_sha256)
    assert hash_file(short, 4096) == (got.crcs(), got.root_sha256)
    rc = main(["verify", str(short), "--against", str(src), "--samples", "all"])
    text = capsys.readouterr()
    assert rc == 0, text


def test_a_read_that_meets_the_end_of_the_file_names_it(tmp_path: Path) -> None:
    import os

    from ffcv_pairs._fileio import ShortReadError, pread_exact

    path = tmp_path / "ten"
    path.write_bytes(bytes(range(10)))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_exact(fd, 6, 4, str(path)) == bytes(range(4, 10))
        with pytest.raises(ShortReadError, match=rf"^{path}: ends at byte 10, before the 8 "):
            pread_exact(fd, 8, 4, str(path))
    finally:
        os.close(fd)


def test_truncated_file(capsys, written) -> None:
    out, _ = written
    out.write_bytes(out.read_bytes()[:-100])
    with pytest.raises(BetonError, match="truncated"):
        make_loader(out, batch_size=8)
    rc, text = _verify(capsys, str(out))
    assert rc == 1 and "FAIL" in text and "truncated" in text


def test_stale_manifest(written) -> None:
    out, _ = written
    a, b, labels = make_arrays(N + 5, (3, 8, 8))
    sidecar = manifest_path(out).read_bytes()
    write_pairs(
        __import__("ffcv_pairs").ArraySource(a, b, labels), out, page_size=4096, progress=False
    )
    manifest_path(out).write_bytes(sidecar)
    with pytest.raises(BetonError, match=r"stale manifest|does not match"):
        make_loader(out, batch_size=8)


def test_upstream_file_loads_and_verify_says_unchecked(capsys, tmp_path: Path) -> None:
    from ffcv.fields import IntField, NDArrayField
    from ffcv.writer import DatasetWriter

    a, b, labels = make_arrays(50, (2, 4, 4))
    path = tmp_path / "up.beton"
    fields = {
        "A": NDArrayField(np.dtype("uint8"), (2, 4, 4)),
        "B": NDArrayField(np.dtype("uint8"), (2, 4, 4)),
        "label": IntField(),
    }
    DatasetWriter(str(path), fields, num_workers=1).from_indexed_dataset(
        [(a[i], b[i], int(labels[i])) for i in range(50)]
    )
    loader = make_loader(path, batch_size=10, order="sequential")
    got = torch.cat([x.clone() for x, _, _ in loader])
    assert got.numpy().tobytes() == a.tobytes()
    rc, text = _verify(capsys, str(path))
    assert rc == 3 and text == (
        f"NOT CHECKED: {path}: no sidecar at {path}.json, so no checksums to check; "
        "--against SRC_DIR compares samples\n"
    )


def test_inspect_and_preview(capsys, written, tmp_path: Path) -> None:
    out, _ = written
    png = tmp_path / "p.png"
    assert main(["inspect", str(out), "--preview", "6", "--out", str(png)]) == 0
    text = capsys.readouterr().out
    for needle in (
        "samples:      120",
        "page size:    4096",
        "NDArrayField",
        "uint8 [3, 8, 8]",
        "IntField",
        "labels:       120 distinct",
        "manifest:",
        "preview:",
    ):
        assert needle in text, needle
    from PIL import Image

    assert Image.open(png).size[0] > 0


def test_inspect_bad_file_one_line(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "x.beton"
    bad.write_bytes(b"\x00" * 100)
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "x.beton" in err and "\n" not in err


# -- fuzzing ----------------------------------------------------------------------------

REGIONS = ["header", "fields", "metadata", "alloc", "truncate"]


@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory) -> tuple[Path, np.ndarray]:
    from ffcv_pairs import ArraySource

    a, b, labels = make_arrays(64, (2, 6, 6), seed=9)
    path = tmp_path_factory.mktemp("fuzz") / "base.beton"
    write_pairs(ArraySource(a, b, labels), path, page_size=4096, progress=False)
    return path, a


def _corrupt(base: Path, dest: Path, region: str, where: float, value: int, wide: bool) -> None:
    reader = PairReader(base)
    data = bytearray(base.read_bytes())
    meta_lo = reader.metadata_offset
    bounds = {
        "header": (0, 24),
        "fields": (24, meta_lo),
        "metadata": (meta_lo, meta_lo + reader.metadata.nbytes),
        "alloc": (int(reader.header["alloc_table_ptr"]), len(data)),
    }
    if region == "truncate":
        cut = int(where * len(data))
        dest.write_bytes(bytes(data[:cut]))
        return
    lo, hi = bounds[region]
    off = lo + int(where * (hi - lo - 8))
    if wide:  # an 8-byte field (a pointer, a count) set to something arbitrary
        data[off : off + 8] = int(value).to_bytes(8, "little")
    else:
        data[off] = value & 0xFF if data[off] != (value & 0xFF) else data[off] ^ 0x01
    dest.write_bytes(bytes(data))


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    region=st.sampled_from(REGIONS),
    where=st.floats(0, 1),
    value=st.integers(0, 2**64 - 1),
    wide=st.booleans(),
    with_manifest=st.booleans(),
)
def test_fuzz_corrupt_headers_and_tables(
    tmp_path: Path, fuzz_base, region, where, value, wide, with_manifest
) -> None:
    base, a = fuzz_base
    dest = tmp_path / "f.beton"
    _corrupt(base, dest, region, where, value, wide)
    manifest_path(dest).unlink(missing_ok=True)
    if with_manifest:
        shutil.copy(manifest_path(base), manifest_path(dest))
    result: dict[str, object] = {}

    def load() -> None:
        try:
            loader = make_loader(
                dest, batch_size=16, order="sequential", drop_last=False, num_threads=1
            )
            result["got"] = torch.cat([x.clone() for x, _, _ in loader]).numpy()
        except (BetonError, ValueError) as e:
            result["refused"] = e
        except BaseException as e:  # anything else is a failure of the test
            result["error"] = e

    # A watchdog, not a speed check: a corrupt file must be refused or loaded, never hang.
    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(timeout=300)
    assert not worker.is_alive(), "opening or reading the corrupt file hung"
    assert "error" not in result, f"unexpected {result.get('error')!r}"
    if "got" in result and with_manifest:
        got = result["got"]
        assert isinstance(got, np.ndarray)
        assert got.tobytes() == a[: len(got)].tobytes() and len(got) == len(a), (
            "wrong data returned from a corrupt file that has a manifest"
        )


# -- RAM budget -------------------------------------------------------------------------

BUDGET_SCRIPT = """
import gc, json, sys
from ffcv_pairs import make_loader, PairAugment
from ffcv_pairs.load.budget import process_bytes
cfg = json.loads(sys.argv[2])
aug = PairAugment(**cfg.pop("augment")) if "augment" in cfg else None
# Compile (or load from numba's cache) the kernels first: in a fresh checkout the first
# batch would otherwise add the compiler's memory, which is not the loader's.
warm = make_loader(sys.argv[1], augment=aug, num_threads=2, **cfg)
next(iter(warm))
warm.close()
del warm
gc.collect()
loader = make_loader(sys.argv[1], augment=aug, num_threads=2, **cfg)
est = loader.memory_estimate
for _ in range(2):
    for batch in loader:
        pass
print(json.dumps({"estimate": est.per_rank, "measured": process_bytes(sys.argv[1]),
                  "loader": est.loader, "process": est.process}))
"""


@pytest.mark.parametrize(
    "cfg",
    [
        {"batch_size": 1024, "batches_ahead": 3},
        {
            "batch_size": 512,
            "batches_ahead": 6,
            "augment": {
                "resized_crop": [48, 48],
                "crop_scale": [0.3, 1.0],
                "hflip": 0.5,
                "normalize_mean": [1.0, 2.0, 3.0],
                "normalize_std": [2.0, 2.0, 2.0],
            },
        },
    ],
    ids=["plain-1024", "resized-normalize-512"],
)
def test_ram_estimate_matches_measured_uss(tmp_path: Path, cfg) -> None:
    from ffcv_pairs import ArraySource

    a, b, labels = make_arrays(4096, (3, 64, 64), seed=1)
    path = tmp_path / "m.beton"
    write_pairs(ArraySource(a, b, labels), path, progress=False)
    out = subprocess.run(
        [sys.executable, "-c", BUDGET_SCRIPT, str(path), json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["loader"] > 0.15 * r["process"], "configuration too small to test the model"
    assert abs(r["estimate"] - r["measured"]) <= 0.25 * r["measured"], r


def _nbytes(buffers) -> int:
    """Bytes of the buffers a pipeline allocated (arrays, tensors, nested in dicts/tuples)."""
    if buffers is None:
        return 0
    if isinstance(buffers, np.ndarray):
        return buffers.nbytes
    if isinstance(buffers, torch.Tensor):
        return buffers.numel() * buffers.element_size()
    if isinstance(buffers, dict):
        return sum(_nbytes(v) for v in buffers.values())
    return sum(_nbytes(v) for v in buffers)


@pytest.mark.parametrize(
    ("augment", "stage"),
    [
        (None, "decoder"),
        (
            {
                "resized_crop": (12, 12),
                "crop_scale": (0.3, 1.0),
                "normalize_mean": (1.0, 2.0, 3.0),
                "normalize_std": (2.0, 2.0, 2.0),
            },
            "resize",
        ),
        ({"crop": (12, 12), "crop_padding": 2, "out_dtype": "float16"}, "decoder-crop"),
    ],
    ids=["plain", "resized-normalize", "crop-cast-float16"],
)
def test_ram_estimate_components_from_their_definitions(tmp_path: Path, augment, stage) -> None:
    """Each component of the estimate against a value derived from its definition, with
    sizes taken from the source arrays and the batches actually delivered (not from the
    code that makes the estimate), and the buffers against what the pipeline allocated."""
    from ffcv_pairs import ArraySource, PairAugment

    n, batch_size, ahead = 600, 32, 2
    a, b, labels = make_arrays(n, (3, 16, 16), seed=3)
    path = tmp_path / "c.beton"
    write_pairs(ArraySource(a, b, labels), path, page_size=1 << 14, progress=False)
    aug = PairAugment(**augment) if augment else None
    loader = make_loader(
        path, batch_size=batch_size, batches_ahead=ahead, augment=aug, num_threads=1
    )
    est = loader.memory_estimate
    for batch in loader:
        xa, xb, lab = batch
    slots = ahead + 3  # documented: batches_ahead + 3 reused slots per allocating stage
    label = lab.element_size()
    assert label == 8
    # uint8 pairs on the CPU: every op (crop, resized crop, photometric, normalise, cast)
    # is fused into the decoder, so its one output buffer holds the delivered batch.
    per_sample = xa[0].nbytes + xb[0].nbytes + label
    assert est.buffers == slots * batch_size * per_sample, est.buffer_formula
    assert est.buffers == _nbytes(loader.graph.buffers), "not what the pipeline allocated"
    # Transients: only a cast/normalise run as torch ops after the decoder makes new
    # tensors per batch; fused into the decoder there is none.
    assert est.transients == 0
    # Index: the page index (pages, starts, samples) and an epoch's order, twice at an
    # epoch boundary (the old epoch's thread still holds its own), all int64. Above that,
    # at most the per-sample page numbers PageIndex.build holds while it groups samples.
    index = loader.index
    held = index.pages.nbytes + index.starts.nbytes + index.samples.nbytes
    held += 2 * loader.epoch_order(0).nbytes
    assert index.samples.dtype == np.int64 and loader.epoch_order(0).dtype == np.int64
    assert held <= est.index <= held + 8 * n, (held, est.index)
    assert est.loader == est.buffers + est.index + est.transients


def test_budget_refuses_with_a_hint(written) -> None:
    out, _ = written
    with pytest.raises(MemoryBudgetError, match=r"max_ram_gb=0\.01.*lower batch_size"):
        make_loader(out, batch_size=8, max_ram_gb=0.01)


def test_verify_against_catches_codes_that_mean_nothing_even_if_the_writer_took_the_range(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Issue 43's silent loss: --range=-1e308,1e308 made the step infinite and every code 0,
    and verify --against, which re-encodes the source with the writer's own encoder, said
    OK. With the writer's range check switched off (the fix reverted), verify must still
    FAIL: it checks what the codes stand for from the definition."""
    from ffcv_pairs.format import quantization
    from ffcv_pairs.write import arguments

    monkeypatch.setattr(quantization, "check_range", lambda *a, **k: None)
    monkeypatch.setattr(arguments, "check_range", lambda *a, **k: None)
    rng = np.random.default_rng(3)
    a, b = rng.random((6, 3, 4, 4), dtype=np.float32), rng.random((6, 3, 4, 4), dtype=np.float32)
    src = write_per_sample(tmp_path / "pt", "train", a, b, np.arange(6))
    assert main(["write", str(src), str(tmp_path / "out"), "--split", "train", "--workers", "1",
                 "--quantize", "uint8", "--range=-1e308,1e308", "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    beton = tmp_path / "out" / "train.beton"
    assert main(["verify", str(beton), "--against", str(src), "--samples", "all"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "no finite step" in out, out


def test_a_loader_reads_each_sidecar_once(tmp_path: Path, monkeypatch) -> None:
    """Opening, the image statistics and the resume identity all ask for the sidecar; one
    reader reads it once (a dataset of shards asked for each up to three times)."""
    from conftest import write_small_beton

    from ffcv_pairs import PairAugment
    from ffcv_pairs.format import sidecar

    path, _, _ = write_small_beton(tmp_path)
    load, reads = sidecar.Manifest.load, []
    monkeypatch.setattr(sidecar.Manifest, "load", lambda p: reads.append(p) or load(p))
    loader = make_loader(path, batch_size=8, augment=PairAugment(hflip=0.5, contrast=0.2))
    next(iter(loader))
    loader.state_dict()
    assert len(reads) == 1, reads
