"""Labels of any kind and extra fields: float, vector and mask labels and extra scalar
and array fields, through every source kind, the writer, the loader, upstream's
``Reader`` and ``Loader``, ``inspect`` and ``verify``."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from ffcv_pairs import ArraySource, PairReader, make_loader, write_pairs
from ffcv_pairs.cli import main
from ffcv_pairs.format.fields import FieldSpec
from ffcv_pairs.write.compare import compare_with_source
from ffcv_pairs.write.source_kinds import open_source
from ffcv_pairs.write.sources import SourceError

N = 23
LABELS = {
    "float": lambda rng: rng.random(N),  # float64 scalars
    "vector": lambda rng: rng.random((N, 4)).astype(np.float32),
    "mask": lambda rng: rng.integers(0, 3, (N, 8, 8), dtype=np.uint8),
}
WANT = {
    "float": FieldSpec((), "float64"),
    "vector": FieldSpec((4,), "float32"),
    "mask": FieldSpec((8, 8), "uint8"),
}


def _data(kind: str, seed: int = 1) -> dict[str, np.ndarray]:
    """Images, labels of ``kind`` and two extras: ``depth`` (int16[2, 3]) and ``ident``
    (an int, ``7 * i``, which names the sample in a batch)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (N, 3, 8, 8), dtype=np.uint8)
    return {
        "a": a,
        "b": (255 - a).astype(np.uint8),
        "label": LABELS[kind](rng),
        "depth": rng.integers(-900, 900, (N, 2, 3), dtype=np.int16),
        "ident": np.arange(N, dtype=np.int64) * 7,
    }


def _extras(d: dict[str, np.ndarray], i: int) -> dict[str, object]:
    return {"depth": torch.from_numpy(d["depth"][i].copy()), "ident": int(d["ident"][i])}


def _label(d: dict[str, np.ndarray], i: int) -> object:
    value = d["label"][i]
    return float(value) if np.ndim(value) == 0 else torch.from_numpy(np.array(value))


def _source(kind: str, d: dict[str, np.ndarray], root: Path) -> object:
    """The same samples as an ArraySource, a list of tuples, per-sample or batched files."""
    if kind == "arrays":
        return ArraySource(d["a"], d["b"], d["label"], depth=d["depth"], ident=d["ident"])
    items = [
        (torch.from_numpy(d["a"][i]), torch.from_numpy(d["b"][i]), _label(d, i), _extras(d, i))
        for i in range(N)
    ]
    if kind == "sequence":
        return items
    root.mkdir(parents=True)
    if kind == "batched":
        for k, start in enumerate(range(0, N, 5)):
            torch.save(items[start : start + 5], root / f"train_batch_{k}.pt")
    else:
        for i, (a, b, label, extras) in enumerate(items):
            torch.save(a, root / f"train_A_images_{i}.pt")
            torch.save(b, root / f"train_B_images_{i}.pt")
            torch.save(
                label
                if isinstance(label, torch.Tensor)
                else torch.tensor(label, dtype=torch.float64),
                root / f"train_labels_{i}.pt",
            )
            for name, value in extras.items():
                saved = value if isinstance(value, torch.Tensor) else torch.tensor(value)
                torch.save(saved, root / f"train_{name}_{i}.pt")
    return open_source(root, "train")


def _check_batches(path: Path, d: dict[str, np.ndarray], order: str, cache: bool = True) -> None:
    """Every sample once, each field equal to its source, in ``order`` (``cache``: through
    the OS cache, else upstream's process cache)."""
    loader = make_loader(path, batch_size=4, order=order, drop_last=False, seed=3, os_cache=cache)
    seen = []
    for batch in loader:
        a, b, label, depth, ident = batch
        rows = (ident // 7).numpy()
        seen += rows.tolist()
        assert np.array_equal(a.numpy(), d["a"][rows]) and np.array_equal(b.numpy(), d["b"][rows])
        want = torch.from_numpy(np.ascontiguousarray(d["label"][rows]))
        assert label.dtype == want.dtype and torch.equal(label, want)
        assert depth.dtype == torch.int16 and np.array_equal(depth.numpy(), d["depth"][rows])
        assert ident.dtype == torch.int64 and ident.shape == (len(rows),)
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("source", ["arrays", "sequence", "per-sample", "batched"])
@pytest.mark.parametrize("label", ["float", "vector", "mask"])
def test_labels_and_extras_round_trip(tmp_path: Path, source: str, label: str) -> None:
    d = _data(label)
    src = _source(source, d, tmp_path / "src")
    out = tmp_path / "f.beton"
    write_pairs(src, out, page_size=4096, workers=1, progress=False)
    schema = PairReader(out).schema
    assert schema.label == WANT[label]
    assert dict(schema.extras) == {
        "depth": FieldSpec((2, 3), "int16"),
        "ident": FieldSpec((), "int64"),
    }
    for order in ("sequential", "random", "quasi_random"):
        _check_batches(out, d, order)
    _check_batches(out, d, "random", cache=False)


@pytest.mark.parametrize("label", ["float", "vector", "mask"])
def test_shuffled_write_keeps_every_field_with_its_sample(tmp_path: Path, label: str) -> None:
    d = _data(label, seed=2)
    out = tmp_path / "s.beton"
    src = _source("arrays", d, tmp_path)
    write_pairs(src, out, page_size=4096, workers=2, progress=False, shuffle_seed=11)
    reader = PairReader(out)
    ident = reader.metadata[f"f{reader.field_index('ident')}"]
    assert not np.array_equal(ident, d["ident"])  # shuffled
    _check_batches(out, d, "sequential")
    assert compare_with_source(reader, src, None, shuffle_seed=11) is None  # type: ignore[arg-type]


def test_upstream_reader_and_loader_read_every_field(tmp_path: Path) -> None:
    from ffcv.fields.basics import FloatDecoder, IntDecoder
    from ffcv.fields.decoders import NDArrayDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.reader import Reader

    d = _data("float")
    src = ArraySource(d["a"], d["b"], d["label"], mask=LABELS["mask"](np.random.default_rng(4)))
    out = tmp_path / "u.beton"
    write_pairs(src, out, page_size=4096, workers=1, progress=False)
    reader = Reader(str(out))
    kinds = {name: type(h).__name__ for name, h in reader.handlers.items()}
    assert kinds == {
        "A": "NDArrayField",
        "B": "NDArrayField",
        "label": "FloatField",
        "mask": "NDArrayField",
    }
    assert np.array_equal(reader.metadata["f2"], d["label"])
    pipelines = {
        "A": [NDArrayDecoder()],
        "B": [NDArrayDecoder()],
        "label": [FloatDecoder()],
        "mask": [NDArrayDecoder()],
    }
    loader = Loader(
        str(out), batch_size=N, num_workers=1, order=OrderOption.SEQUENTIAL, pipelines=pipelines
    )
    a, _, label, mask = next(iter(loader))
    assert np.array_equal(a, d["a"]) and np.array_equal(label.reshape(-1), d["label"])
    assert np.array_equal(mask, src.extras["mask"])
    del IntDecoder


@pytest.mark.parametrize("source", ["per-sample", "batched"])
def test_inspect_and_verify_cover_every_field(capsys, tmp_path: Path, source: str) -> None:
    d = _data("mask")
    root = tmp_path / "src"
    _source(source, d, root)
    out = tmp_path / "train.beton"
    write_pairs(open_source(root, "train"), out, page_size=4096, workers=1, progress=False)
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "label    NDArrayField   uint8 [8, 8] (64 bytes)" in text
    assert "depth    NDArrayField   int16 [2, 3] (12 bytes)" in text
    assert "ident    IntField       int64 scalar" in text
    assert "distinct" not in text  # a histogram only of integer scalar labels
    assert main(["verify", str(out), "--against", str(root), "--samples", "all"]) == 0
    assert f"samples: OK ({N} of {N}" in capsys.readouterr().out
    # One element of one extra field changed in the source: verify names it.
    d["depth"][9, 1, 2] += 1
    if source == "per-sample":
        torch.save(torch.from_numpy(d["depth"][9].copy()), root / "train_depth_9.pt")
    else:
        items = torch.load(root / "train_batch_1.pt")
        items[4][3]["depth"] = torch.from_numpy(d["depth"][9].copy())
        torch.save(items, root / "train_batch_1.pt")
    assert main(["verify", str(out), "--against", str(root), "--samples", "all"]) != 0
    text = capsys.readouterr()
    assert "sample 9: field 'depth' (int16[2, 3]) differs from" in text.out + text.err


def test_int_label_with_extras_keeps_its_histogram(capsys, tmp_path: Path) -> None:
    d = _data("float")
    out = tmp_path / "h.beton"
    src = ArraySource(d["a"], d["b"], np.arange(N) % 3, ident=d["ident"])
    write_pairs(src, out, page_size=4096, workers=1, progress=False)
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "labels:       3 distinct" in text and "ident    IntField" in text
    _, _, label, ident = next(iter(make_loader(out, batch_size=N, order="sequential")))
    assert label.tolist() == (np.arange(N) % 3).tolist() and ident.tolist() == d["ident"].tolist()


@pytest.mark.parametrize(
    ("field", "bad", "said"),
    [
        ("label", torch.zeros(5), "float32[5] differs from sample 0 (float32[4])"),
        ("label", torch.zeros(4, dtype=torch.float64), "float64[4] differs from sample 0"),
        ("depth", torch.zeros(2, 3, dtype=torch.int32), "int32[2, 3] differs from sample 0"),
        ("ident", 2.5, "float64 differs from sample 0 (int64)"),
    ],
)
def test_a_sample_unlike_sample_0_is_refused_by_name(
    tmp_path: Path, field: str, bad: object, said: str
) -> None:
    d = _data("vector")
    items = list(_source("sequence", d, tmp_path))  # type: ignore[call-overload]
    a, b, label, extras = items[13]
    if field == "label":
        items[13] = (a, b, bad, extras)
    else:
        items[13] = (a, b, label, {**extras, field: bad})
    with pytest.raises(SourceError) as e:
        write_pairs(items, tmp_path / "x.beton", page_size=4096, workers=1, progress=False)
    assert f"list[13].{field}: {said}" in str(e.value) and "\n" not in str(e.value)


def test_a_missing_extra_field_is_refused_by_name(tmp_path: Path) -> None:
    d = _data("vector")
    items = list(_source("sequence", d, tmp_path))  # type: ignore[call-overload]
    a, b, label, extras = items[5]
    items[5] = (a, b, label, {"depth": extras["depth"]})
    with pytest.raises(SourceError, match=r"list\[5\]\.label: extra fields \['depth'\] differ"):
        write_pairs(items, tmp_path / "x.beton", page_size=4096, workers=1, progress=False)


def _check_values(path: Path, d: dict[str, np.ndarray]) -> None:
    """Every sample once, its label and extras equal to its source (images: JPEG)."""
    seen = []
    for _, _, label, depth, ident in make_loader(path, batch_size=4, drop_last=False, seed=1):
        rows = (ident // 7).numpy()
        seen += rows.tolist()
        assert torch.equal(label, torch.from_numpy(np.ascontiguousarray(d["label"][rows])))
        assert np.array_equal(depth.numpy(), d["depth"][rows])
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("source", ["arrays", "batched"])
@pytest.mark.parametrize("label", ["float", "mask"])
def test_jpeg_images_with_labels_and_extras(
    capsys, tmp_path: Path, source: str, label: str
) -> None:
    d = _data(label)
    src = _source(source, d, tmp_path / "src")
    out = tmp_path / "train.beton"
    write_pairs(src, out, page_size=4096, workers=2, codec="jpeg", progress=False, shuffle_seed=4)
    reader = PairReader(out)
    assert reader.schema.a.jpeg is not None and reader.schema.label == WANT[label]
    _check_values(out, d)
    if source == "batched":
        args = [str(out), "--against", str(tmp_path / "src"), "--samples", "all"]
        assert main(["verify", *args]) == 0, capsys.readouterr()


def test_jpeg_kill_then_resume_is_byte_identical(
    capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Pages packed before the kill are kept (their trailers give back each sample's
    pointers and scalar fields); the rest is encoded again, to the same bytes."""
    from conftest import small_argv
    from writer_proc import finish, start_writer

    from ffcv_pairs.cli import write_main
    from ffcv_pairs.write import tracker

    monkeypatch.setattr(tracker, "JOURNAL_SECONDS", 0.0)  # journal after every page

    d = _data("mask", seed=8)
    src = tmp_path / "src"
    _source("per-sample", d, src)
    jpeg = ["--codec", "jpeg", "--workers", "1"]
    whole, out = tmp_path / "whole", tmp_path / "out"
    assert write_main(small_argv(src, whole, *jpeg)) == 0
    proc = start_writer(small_argv(src, out, *jpeg), tmp_path / "log", "page@2:kill")
    assert finish(proc) != 0
    capsys.readouterr()
    assert write_main(small_argv(src, out, *jpeg, "--resume")) == 0
    kept = int(capsys.readouterr().out.split("resumed: kept ")[1].split()[0])
    assert kept >= 2
    assert (out / "train.beton").read_bytes() == (whole / "train.beton").read_bytes()
    _check_values(out / "train.beton", d)


def test_kill_then_resume_keeps_every_field(
    capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from conftest import small_argv
    from writer_proc import finish, start_writer

    from ffcv_pairs.cli import write_main
    from ffcv_pairs.write import tracker

    monkeypatch.setattr(tracker, "JOURNAL_SECONDS", 0.0)  # journal after every task
    d = _data("mask")
    src = tmp_path / "src"
    _source("per-sample", d, src)
    whole, out = tmp_path / "whole", tmp_path / "out"
    assert write_main(small_argv(src, whole, "--workers", "1")) == 0
    proc = start_writer(small_argv(src, out, "--workers", "1"), tmp_path / "log", "journal@1:kill")
    assert finish(proc) != 0
    assert not (out / "train.beton").exists()
    assert write_main(small_argv(src, out, "--workers", "2", "--resume")) == 0
    assert "resumed: kept" in capsys.readouterr().out
    assert (out / "train.beton").read_bytes() == (whole / "train.beton").read_bytes()
    _check_batches(out / "train.beton", d, "sequential")


def test_sidecar_schema_and_pointer_checks_cover_array_fields(tmp_path: Path) -> None:
    import json

    from ffcv_pairs import BetonError
    from ffcv_pairs.format.sidecar import manifest_path

    d = _data("vector")
    out = tmp_path / "p.beton"
    write_pairs(_source("arrays", d, tmp_path), out, page_size=4096, progress=False)
    schema = json.loads(manifest_path(out).read_text())["schema"]
    assert schema["label"] == {"dtype": "float32", "shape": [4]}
    assert schema["depth"] == {"dtype": "int16", "shape": [2, 3]}
    assert schema["ident"] == {"dtype": "int64"}
    assert "label=float32[4] depth=int16[2, 3] ident=int64" in PairReader(out).schema.describe()
    reader = PairReader(out)
    column = reader.field_index("depth")
    row = reader.metadata_offset + 6 * reader.metadata.itemsize
    at = row + reader.metadata.dtype.fields[f"f{column}"][1]
    del reader
    data = bytearray(out.read_bytes())
    data[at : at + 8] = np.uint64(len(data) - 4).tobytes()  # sample 6's depth: past the end
    out.write_bytes(bytes(data))
    with pytest.raises(BetonError, match=r"sample 6 field 'depth' points at byte \d+, outside"):
        PairReader(out)


def test_device_stage_delivers_every_field(tmp_path: Path) -> None:
    """Through the device stage (a simulated GPU): the label and extras arrive as the
    CPU path gives them, images unchanged."""
    from ffcv_pairs.load.delivery.simulated import SimulatedEngine
    from ffcv_pairs.load.loader import LoaderConfig, PairLoader

    d = _data("mask")
    out = tmp_path / "g.beton"
    write_pairs(_source("arrays", d, tmp_path), out, page_size=4096, progress=False)
    cfg = LoaderConfig(batch_size=4, order="sequential", device="cpu", drop_last=False)
    want = [[t.clone() for t in batch] for batch in PairLoader(out, cfg)]
    engine = SimulatedEngine(0.001, 0.0)
    loader = PairLoader(out, cfg, copy_engine=engine)
    got = []
    with engine.stream(engine.default_stream):
        for batch in loader:
            engine.run(lambda b=batch: got.append([t.clone() for t in b]), engine.default_stream)
    engine.synchronize()
    loader.close()
    engine.close()
    assert len(got) == len(want) == -(-N // 4)
    for g, w in zip(got, want, strict=True):
        assert len(g) == 5 and all(torch.equal(x, y) and x.dtype == y.dtype for x, y in zip(g, w))
    assert torch.equal(torch.cat([w[2] for w in want]), torch.from_numpy(d["label"]))


@pytest.mark.parametrize("source", ["sequence", "batched"])
def test_items_with_no_extras_write_a_plain_file(tmp_path: Path, source: str) -> None:
    """``(A, B, label, {})`` is ``(A, B, label)``: an int64 label, no extra field."""
    d = _data("float")
    items = [(torch.from_numpy(d["a"][i]), torch.from_numpy(d["b"][i]), i, {}) for i in range(N)]
    src: object = items
    if source == "batched":
        (tmp_path / "src").mkdir()
        torch.save(items, tmp_path / "src" / "train_batch_0.pt")
        src = open_source(tmp_path / "src", "train")
    out = tmp_path / "plain.beton"
    write_pairs(src, out, page_size=4096, workers=1, progress=False)
    assert PairReader(out).schema.plain
    _, _, label = next(iter(make_loader(out, batch_size=N, order="sequential")))
    assert label.tolist() == list(range(N))


def test_shards_of_a_dataset_keep_every_field(tmp_path: Path) -> None:
    """A dataset manifest of three shards reads every field as one file would."""
    from ffcv_pairs.format.merging import merge_parts

    d = _data("mask", seed=5)
    cuts = [0, 7, 15, N]
    shards = []
    for k, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        part = {key: value[lo:hi] for key, value in d.items()}
        src = ArraySource(
            part["a"], part["b"], part["label"], depth=part["depth"], ident=part["ident"]
        )
        shards.append(tmp_path / "parts" / f"s{k}.beton")
        write_pairs(src, shards[-1], page_size=4096, workers=1, progress=False)
    manifest = tmp_path / "all.json"
    merge_parts(shards, manifest).save(manifest)
    for order in ("sequential", "quasi_random"):
        _check_batches(manifest, d, order)


def test_a_mask_under_geometric_augmentation_is_refused_by_name(tmp_path: Path) -> None:
    """A mask field shaped like the images would not follow a crop or flip (not yet): the
    loader refuses it rather than hand back masks misaligned with their images; photometric
    ops alone are fine."""
    from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs

    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (16, 3, 12, 12), dtype=np.uint8)
    mask = (a[:, 0] > 128).astype(np.uint8)
    path = tmp_path / "m.beton"
    write_pairs(ArraySource(a, a, np.arange(16), mask=mask), path, workers=1, progress=False)
    with pytest.raises(
        ValueError, match=r"m\.beton: field 'mask' \(uint8\[12, 12\]\) is shaped like"
    ):
        make_loader(path, batch_size=4, augment=PairAugment(hflip=0.5))
    batches = list(make_loader(path, batch_size=4, augment=PairAugment(brightness=0.2)))
    assert len(batches) == 4 and batches[0][3].shape == (4, 12, 12)


def test_batches_are_named_by_the_files_fields(tmp_path: Path) -> None:
    from ffcv_pairs import ArraySource, make_loader, write_pairs
    from ffcv_pairs.load.batches import PairBatch

    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (8, 3, 6, 6), dtype=np.uint8)
    plain, extra = tmp_path / "plain.beton", tmp_path / "extra.beton"
    write_pairs(ArraySource(a, a, np.arange(8)), plain, workers=1, progress=False)
    depth = rng.random((8, 2), dtype=np.float32)
    write_pairs(ArraySource(a, a, np.arange(8), depth=depth), extra, workers=1, progress=False)
    first = next(iter(make_loader(plain, batch_size=4, order="sequential")))
    assert type(first) is PairBatch and first._fields == ("A", "B", "label")
    a0, b0, label = first  # unpacks as before
    assert torch.equal(first.B, b0)
    assert torch.equal(first.label, label) and torch.equal(first.A, a0)
    named = next(iter(make_loader(extra, batch_size=4, order="sequential")))
    assert named._fields == ("A", "B", "label", "depth")
    assert np.array_equal(named.depth.numpy(), depth[:4])


def test_lightning_trains_the_example_model_on_a_file_with_extras(tmp_path: Path) -> None:
    import lightning as L

    from ffcv_pairs import ArraySource, PairDataModule, write_pairs
    from ffcv_pairs.lightning.model import SiamesePairClassifier

    rng = np.random.default_rng(8)
    a = rng.integers(0, 256, (64, 3, 16, 16), dtype=np.uint8)
    path = tmp_path / "x.beton"
    extra = {"ident": np.arange(64) * 7}
    write_pairs(ArraySource(a, a, np.arange(64) % 2, **extra), path, workers=1, progress=False)
    dm = PairDataModule(train_path=str(path), val_path=str(path), batch_size=16)
    seen: list[int] = []

    class Model(SiamesePairClassifier):
        def training_step(self, batch, batch_idx):  # the extra field arrives by name
            seen.extend(batch.ident.tolist())
            return super().training_step(batch, batch_idx)

    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Model(num_classes=2, width=4), datamodule=dm)
    assert trainer.global_step == 4 and sorted(seen) == sorted((np.arange(64) * 7).tolist())
