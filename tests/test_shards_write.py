"""Datasets of many shards, the writing side: ``write --part K/N`` and ``merge``, ``write
--append-to``, and ``inspect``/``verify`` of a dataset manifest (issue 47)."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import signal
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import make_arrays, write_batched, write_per_sample
from distributed import Client, LocalCluster
from writer_proc import WAIT_SECONDS, finish, start_writer

from ffcv_pairs import ArraySource, open_source, write_pairs
from ffcv_pairs.cli import main, write_main
from ffcv_pairs.format.merging import add_shards, merge_parts
from ffcv_pairs.format.reader import BetonError, PairReader
from ffcv_pairs.format.schema import PairSchema
from ffcv_pairs.format.shards import DatasetManifest
from ffcv_pairs.format.sidecar import Manifest, manifest_path
from ffcv_pairs.write import tracker
from ffcv_pairs.write.shuffle import Permutation

FAST = {"workers": 1, "progress": False, "page_size": 4096}
ARGV = ["--page-size", "4KiB", "--no-progress", "--workers", "1"]


def _source(n: int, seed: int = 0, shape=(3, 8, 8)) -> ArraySource:
    return ArraySource(*make_arrays(n, shape, seed=seed))


def _rows(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every sample of a `.beton`, read by hand: the A and B bytes and the labels."""
    reader = PairReader(path)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    images = []
    for field in PairSchema.IMAGE_FIELDS:
        size = reader.schema.spec(field).nbytes
        images.append(np.stack([data[p : p + size] for p in reader.image_pointers(field).tolist()]))
    labels = np.asarray(reader.metadata[f"f{reader.field_index(PairSchema.LABEL_FIELD)}"])
    return images[0], images[1], labels.copy()


def _dataset_rows(manifest: Path) -> tuple[np.ndarray, ...]:
    """Every sample of a dataset, shard after shard (global id = offset + local id)."""
    shards = [_rows(p) for p in DatasetManifest.load(manifest).paths(manifest)]
    return tuple(np.concatenate(column) for column in zip(*shards))


def _expected(src: ArraySource, ids: np.ndarray) -> tuple[np.ndarray, ...]:
    """The definition: the source's samples ``ids``, as stored bytes."""
    n = len(ids)
    return src.a[ids].reshape(n, -1), src.b[ids].reshape(n, -1), src.labels[ids]


def _assert_rows(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    for g, w in zip(got, want):
        assert g.tobytes() == np.ascontiguousarray(w).tobytes()


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("count", [1, 3, 7])
def test_parts_merged_hold_the_source_in_order(tmp_path: Path, count: int) -> None:
    n = 50
    src = _source(n, seed=count)
    whole = tmp_path / "whole.beton"
    write_pairs(src, whole, **FAST)
    parts = [tmp_path / f"p{k}.beton" for k in range(count)]
    for k in reversed(range(count)):  # the order parts finish in does not matter
        write_pairs(src, parts[k], part=f"{k}/{count}", **FAST)
    manifest = tmp_path / "train.json"
    merge_parts(parts[::-1], manifest).save(manifest)  # nor the order they are given in

    dataset = DatasetManifest.load(manifest)
    assert [e.path for e in dataset.shards] == [p.name for p in parts]
    sizes = [n * (k + 1) // count - n * k // count for k in range(count)]  # near-equal slices
    assert [e.samples for e in dataset.shards] == sizes
    got = _dataset_rows(manifest)
    _assert_rows(got, _expected(src, np.arange(n)))
    _assert_rows(got, _rows(whole))


def test_parts_after_limit_and_shuffled_within_the_part(tmp_path: Path) -> None:
    src, limit, seed = _source(64, seed=5), 41, 9
    paths = [tmp_path / f"p{k}.beton" for k in range(3)]
    for k, path in enumerate(paths):
        write_pairs(src, path, part=(k, 3), limit=limit, shuffle_seed=seed, **FAST)
    firsts = [0, 13, 27, 41]  # k * 41 // 3
    for k, path in enumerate(paths):
        m = firsts[k + 1] - firsts[k]
        order = firsts[k] + Permutation(m, seed).source_of(np.arange(m))
        _assert_rows(_rows(path), _expected(src, order))
        record = Manifest.load(manifest_path(path)).fingerprint["part"]
        assert {k: record[k] for k in ("index", "count", "first", "stop", "of")} == {
            "index": k,
            "count": 3,
            "first": firsts[k],
            "stop": firsts[k + 1],
            "of": limit,
        }
    manifest = tmp_path / "d.json"
    merge_parts(paths, manifest).save(manifest)
    labels = np.sort(_dataset_rows(manifest)[2])
    np.testing.assert_array_equal(labels, np.arange(limit))


@pytest.mark.parametrize("bad", ["3/2", "x", "-1/4", "1/0", (True, 2), (1,), "1/2/3"])
def test_a_bad_part_is_refused_by_name(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match=r"^part must be K/N") as e:
        write_pairs(_source(10), tmp_path / "x.beton", part=bad, **FAST)
    assert str(bad).replace("'", "") in str(e.value).replace("'", "").replace(" (tuple)", "")
    with pytest.raises(ValueError, match=r"part 0/20: 20 parts of 10 samples"):
        write_pairs(_source(10), tmp_path / "x.beton", part="0/20", **FAST)
    assert not any(tmp_path.iterdir())


def _three_parts(tmp_path: Path, src: ArraySource, count: int = 3) -> list[Path]:
    paths = [tmp_path / f"p{k}.beton" for k in range(count)]
    for k, path in enumerate(paths):
        write_pairs(src, path, part=(k, count), **FAST)
    return paths


def _refused(betons: list[Path], manifest: Path, *words: str) -> str:
    with pytest.raises(BetonError) as e:
        merge_parts(betons, manifest)
    message = str(e.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


def test_merge_refuses_what_is_not_one_whole_conversion(tmp_path: Path) -> None:
    p0, p1, p2 = _three_parts(tmp_path, _source(30))
    out = tmp_path / "d.json"
    _refused([p0, p2], out, "part 1/3", "is missing", str(p0))
    _refused([p0, p1, p2, p1], out, str(p1), "given twice")
    twin = tmp_path / "twin.beton"  # part 1 written twice
    shutil.copy(p1, twin)
    shutil.copy(manifest_path(p1), manifest_path(twin))
    _refused([p0, p1, twin, p2], out, str(twin), "part 1/3 again", str(p1))
    partial = tmp_path / "p3.beton.partial"
    partial.write_bytes(b"")
    _refused([p0, p1, p2, partial], out, str(partial), "half-written")
    journal = p2.with_name(p2.name + ".journal")
    journal.write_bytes(b"")
    _refused([p0, p1, p2], out, str(p2), "p2.beton.journal is beside it")
    journal.unlink()
    for name, src, count, words in [
        ("halves", _source(30), 2, ("different conversions",)),  # parts of 2, not 3
        ("other", _source(30, seed=1), 3, ("different conversions",)),  # another source
        ("wide", _source(30, shape=(3, 8, 9)), 3, (str(p0), "different schemas")),
    ]:
        (tmp_path / name).mkdir()
        odd = _three_parts(tmp_path / name, src, count)[1]
        _refused([p0, odd, p2], out, str(odd), *words)
    assert not out.exists()


def test_append_rewrites_the_manifest_atomically_and_never_touches_shards(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    manifest = data / "train.json"
    first = [data / "a.beton", data / "b.beton"]
    for i, path in enumerate(first):
        write_pairs(_source(20, seed=i), path, **FAST)
    add_shards(manifest, first[:1])
    add_shards(manifest, first[1:])
    before, inode = _digests(data), manifest.stat().st_ino
    new = data / "c.beton"
    write_pairs(_source(12, seed=7), new, **FAST)
    dataset = add_shards(manifest, [new])

    after = _digests(data)
    assert manifest.stat().st_ino != inode, "the manifest is replaced by rename, not rewritten"
    assert {k: after[k] for k in before if k != "train.json"} == {
        k: v for k, v in before.items() if k != "train.json"
    }
    assert not [p.name for p in data.iterdir() if p.name.endswith(".tmp")]
    assert [e.path for e in dataset.shards] == ["a.beton", "b.beton", "c.beton"]
    assert DatasetManifest.load(manifest) == dataset
    with pytest.raises(BetonError, match=r"b\.beton: already a shard of .*train\.json"):
        add_shards(manifest, [first[1]])
    assert DatasetManifest.load(manifest) == dataset


def _appender(tmp_path: Path, name: str, seed: int, hooks: Path) -> object:
    src = write_per_sample(tmp_path / name, "train", *make_arrays(15, seed=seed))
    argv = [str(src), str(tmp_path / "out"), "--split", "train", *ARGV]
    argv += ["--append-to", str(tmp_path / "out" / "train.json")]
    return start_writer(argv, tmp_path / f"{name}.log", hook="start:block", hook_dir=hooks)


def test_two_appends_at_once_both_land_in_the_manifest(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    procs = [_appender(tmp_path, f"src{i}", i, hooks) for i in range(2)]
    deadline = time.monotonic() + WAIT_SECONDS
    while len(list(hooks.glob("reached.*"))) < 2:  # both have started their shard
        if not all(p.is_alive() for p in procs) or time.monotonic() > deadline:
            (hooks / "release").touch()
            [finish(p) for p in procs]
            logs = [(tmp_path / f"src{i}.log").read_text() for i in range(2)]
            pytest.fail(f"both appends should be writing at once: {logs}")
        time.sleep(0.02)
    (hooks / "release").touch()
    assert [finish(p) for p in procs] == [0, 0]
    manifest = tmp_path / "out" / "train.json"
    dataset = DatasetManifest.load(manifest)
    assert sorted(e.path for e in dataset.shards) == ["train-00000.beton", "train-00001.beton"]
    assert sorted(_dataset_rows(manifest)[2].tolist()) == sorted(2 * list(range(15)))
    assert main(["verify", str(manifest)]) == 0


@pytest.mark.parametrize("kind", ["per-sample", "batched"])
def test_cli_parts_merge_inspect_and_verify(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    a, b, labels = make_arrays(45, seed=4)
    maker = write_per_sample if kind == "per-sample" else write_batched
    src, out = maker(tmp_path / "pt", "train", a, b, labels), tmp_path / "out"
    for k in range(3):
        assert write_main([str(src), str(out), "--split", "train", "--part", f"{k}/3", *ARGV]) == 0
    parts = sorted(out.glob("train.part-*.beton"))
    assert [p.name for p in parts] == [f"train.part-0000{k}-of-00003.beton" for k in range(3)]
    capsys.readouterr()
    manifest = out / "train.json"
    assert main(["merge", *map(str, parts[::-1]), "-o", str(manifest)]) == 0
    assert capsys.readouterr().out.strip() == f"merged 3 shards, 45 samples into {manifest}"
    _assert_rows(_dataset_rows(manifest), (a.reshape(45, -1), b.reshape(45, -1), labels))

    assert main(["inspect", str(manifest)]) == 0
    printed = capsys.readouterr().out
    assert "shards:       3" in printed and "samples:      45" in printed
    for k, first in enumerate([0, 15, 30]):
        assert f"train.part-0000{k}-of-00003.beton          15  {first:>10}" in printed
    assert main(["verify", str(manifest)]) == 0
    assert capsys.readouterr().out.count(": OK") == 4
    assert main(["verify", str(manifest), "--against", str(src)]) == 2
    assert "verify each shard with --against" in _one_line_error(capsys)
    sidecar = manifest_path(parts[0])  # -o never overwrites a file that is not a manifest
    assert main(["merge", *map(str, parts), "-o", str(sidecar)]) == 2
    assert "a dataset manifest is named <name>.json" in _one_line_error(capsys)
    assert main(["verify", str(parts[1]), "--against", str(src)]) == 0
    assert "samples: OK (15 of 15 match" in capsys.readouterr().out

    other = maker(tmp_path / "other", "train", a[::-1].copy(), b[::-1].copy(), labels)
    assert main(["verify", str(parts[1]), "--against", str(other)]) == 1
    assert "FAIL" in capsys.readouterr().out
    at = int(PairReader(parts[2]).image_pointers(PairSchema.IMAGE_FIELDS[0])[3])
    with open(parts[2], "r+b") as f:  # one byte of a shard's data
        byte = os.pread(f.fileno(), 1, at)
        os.pwrite(f.fileno(), bytes([byte[0] ^ 1]), at)
    assert main(["verify", str(manifest)]) == 1
    assert f"FAIL: shard 2 {parts[2]}: checksum mismatch" in capsys.readouterr().out
    parts[0].unlink()
    assert main(["verify", str(manifest)]) == 1
    assert f"FAIL: {parts[0]}: missing" in capsys.readouterr().out


def test_cli_verify_compares_a_shard_with_its_manifest_entry(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    paths = _three_parts(tmp_path, _source(30), count=2)
    manifest = tmp_path / "d.json"
    merge_parts(paths, manifest).save(manifest)
    write_pairs(_source(30, seed=3), paths[1], part=(1, 2), **FAST)  # rewritten since
    assert main(["verify", str(manifest)]) == 1
    assert f"FAIL: {paths[1]}: digest is" in capsys.readouterr().out


def test_cli_append_to(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    manifest, out = tmp_path / "data" / "train.json", tmp_path / "out"
    for seed in (1, 2):
        src = write_per_sample(tmp_path / f"pt{seed}", "train", *make_arrays(12, seed=seed))
        argv = [str(src), str(out), "--split", "train", *ARGV, "--append-to", str(manifest)]
        assert write_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"appended {out / 'train-00001.beton'} to {manifest}: 2 shards, 24 samples" in printed
    dataset = DatasetManifest.load(manifest)
    assert [e.path for e in dataset.shards] == [
        "../out/train-00000.beton",
        "../out/train-00001.beton",
    ]
    assert sorted(p.name for p in out.iterdir() if "journal" in p.name) == []
    assert main(["inspect", str(manifest), "--preview", "2"]) == 2
    assert "inspect" in _one_line_error(capsys)
    argv = [str(src), str(out), "--split", "train", "--split", "val", "--append-to", str(manifest)]
    assert write_main(argv) == 2
    assert "give one --split, got 2" in _one_line_error(capsys)
    assert write_main([*argv[:4], "--part", "0/2", "--append-to", str(manifest)]) == 2
    assert "goes without --part" in _one_line_error(capsys)


def test_a_failed_append_leaves_no_reservation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, b, labels = make_arrays(6, dtype="float32")
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    out, manifest = tmp_path / "out", tmp_path / "out" / "train.json"
    argv = [str(src), str(out), "--split", "train", *ARGV, "--append-to", str(manifest)]
    assert write_main([*argv, "--store-dtype", "uint8"]) == 2  # refused at sample 0
    assert "would change when stored as uint8" in _one_line_error(capsys)
    assert list(out.iterdir()) == []
    assert write_main(argv) == 0
    assert [e.path for e in DatasetManifest.load(manifest).shards] == ["train-00000.beton"]


def test_an_interrupted_append_resumes_its_own_shard(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tracker, "JOURNAL_SECONDS", 0.0)  # journal after every page
    src = write_per_sample(tmp_path / "pt", "train", *make_arrays(60, seed=8))
    out, manifest = tmp_path / "out", tmp_path / "out" / "train.json"
    argv = [str(src), str(out), "--split", "train", *ARGV, "--append-to", str(manifest)]
    assert finish(start_writer(argv, tmp_path / "log", hook="journal@2:kill")) == -signal.SIGKILL
    assert write_main(argv) == 0  # a new append leaves the interrupted one alone
    assert write_main([*argv, "--resume"]) == 0
    assert "train-00000.beton: 60 pairs" in capsys.readouterr().out
    shards = [e.path for e in DatasetManifest.load(manifest).shards]
    assert shards == ["train-00001.beton", "train-00000.beton"]
    assert main(["verify", str(manifest)]) == 0


@pytest.mark.parametrize("bad", ["3/2", "x", "=-1/4", "-1/4"])
def test_cli_bad_part_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, bad: str):
    src = write_per_sample(tmp_path / "pt", "train", *make_arrays(4))
    flag = ["--part" + bad] if bad.startswith("=") else ["--part", bad]
    try:  # argparse exits itself where it takes -1/4 for a flag
        code = main(["write", str(src), str(tmp_path / "out"), "--split", "train", *flag])
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = _one_line_error(capsys)
    assert "--part" in err and (bad.lstrip("=") in err or "expected one argument" in err), err
    assert not (tmp_path / "out").exists()


def test_part_in_the_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = write_per_sample(tmp_path / "pt", "train", *make_arrays(20))
    config = tmp_path / "write.yaml"
    config.write_text(f"src_dir: {src}\nout_dir: {tmp_path / 'out'}\nsplit: train\npart: 1/2\n")
    assert write_main(["--config", str(config), *ARGV]) == 0
    assert (tmp_path / "out" / "train.part-00001-of-00002.beton").exists()
    config.write_text(config.read_text().replace("part: 1/2", "part: 2/2"))
    assert write_main(["--config", str(config), *ARGV]) == 2
    assert f"part in {config} must be K/N" in _one_line_error(capsys)


def test_a_part_resumes_and_refuses_another_part(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tracker, "JOURNAL_SECONDS", 0.0)  # journal after every page
    a, b, labels = make_arrays(120, seed=3)
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--part", "1/2", *ARGV]
    assert finish(start_writer(argv, tmp_path / "log", hook="journal@2:kill")) == -signal.SIGKILL
    part = tmp_path / "out" / "train.part-00001-of-00002.beton"
    assert part.with_name(part.name + ".partial").exists()
    assert write_main([*argv, "--resume"]) == 0
    assert "resumed: kept" in capsys.readouterr().out
    _assert_rows(_rows(part), (a[60:].reshape(60, -1), b[60:].reshape(60, -1), labels[60:]))
    assert main(["verify", str(part), "--against", str(src), "--samples", "all"]) == 0

    assert finish(start_writer(argv, tmp_path / "log", hook="journal@2:kill")) == -signal.SIGKILL
    from ffcv_pairs.write.source_kinds import open_source

    with pytest.raises(ValueError, match=r"cannot resume: part changed"):
        write_pairs(open_source(src, "train"), part, part=(0, 2), resume=True, **FAST)


def _rank_main(rank: int, world: int, folder: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"file://{folder}/pg",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),  # a rank left waiting fails the test, not hangs it
    )
    try:
        a, b, labels = (np.load(f"{folder}/{name}.npy") for name in ("a", "b", "labels"))
        out = Path(folder) / f"train.part-{rank:05d}-of-{world:05d}.beton"
        write_pairs(ArraySource(a, b, labels), out, part=(rank, world), **FAST)
        done = [None] * world
        dist.all_gather_object(done, str(out))  # the parts that reported success
        if rank == 0:
            merge_parts(done, f"{folder}/train.json").save(f"{folder}/train.json")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(f"{folder}/rank{rank}.pkl", "wb") as f:
        pickle.dump(rank, f)


def test_torch_distributed_ranks_write_the_parts(tmp_path: Path) -> None:
    n, world = 77, 3
    a, b, labels = make_arrays(n, seed=11)
    for name, value in (("a", a), ("b", b), ("labels", labels)):
        np.save(tmp_path / f"{name}.npy", value)
    mp.spawn(_rank_main, args=(world, str(tmp_path)), nprocs=world, join=True)
    assert sorted(pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(world)) == [
        0,
        1,
        2,
    ]
    whole = tmp_path / "whole.beton"
    write_pairs(ArraySource(a, b, labels), whole, **FAST)
    _assert_rows(_dataset_rows(tmp_path / "train.json"), _rows(whole))
    assert len(DatasetManifest.load(tmp_path / "train.json").shards) == world


def _dask_part(src: str, folder: str, k: int, n: int) -> str:
    """One Dask task: part ``k`` of ``n``, written in a worker process; returns its path."""
    out = f"{folder}/train.part-{k:05d}-of-{n:05d}.beton"
    write_pairs(open_source(src, "train"), out, part=(k, n), workers=1, progress=False)
    return out


def test_dask_tasks_write_the_parts(tmp_path: Path) -> None:
    n, parts = 61, 3
    a, b, labels = make_arrays(n, seed=12)
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    out = tmp_path / "out"
    out.mkdir()
    with (
        LocalCluster(
            n_workers=parts,
            threads_per_worker=1,
            processes=True,  # 3 worker processes stand for 3 machines
            dashboard_address=None,
            memory_limit=0,
            death_timeout=120,  # a worker that cannot start fails the test, not hangs it
        ) as cluster,
        Client(cluster, timeout=120) as client,
    ):
        tasks = [client.submit(_dask_part, str(src), str(out), k, parts) for k in range(parts)]
        done = [task.result(timeout=120) for task in tasks]  # the parts that succeeded
    assert sorted(done) == [str(out / f"train.part-0000{k}-of-00003.beton") for k in range(3)]
    manifest = out / "train.json"
    merge_parts(done, manifest).save(manifest)
    whole = tmp_path / "whole.beton"
    write_pairs(ArraySource(a, b, labels), whole, **FAST)
    _assert_rows(_dataset_rows(manifest), _rows(whole))
    assert [e.samples for e in DatasetManifest.load(manifest).shards] == [20, 20, 21]


def test_merge_never_drops_the_shards_of_a_manifest_it_rewrites(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shards = [tmp_path / f"s{k}.beton" for k in range(3)]
    for k, path in enumerate(shards):
        write_pairs(_source(8, seed=k), path, **FAST)
    manifest = tmp_path / "d.json"
    assert main(["merge", str(shards[0]), str(shards[1]), "-o", str(manifest)]) == 0
    before = manifest.read_bytes()
    capsys.readouterr()
    assert main(["merge", str(shards[2]), "-o", str(manifest)]) == 2  # before: rewritten
    assert _one_line_error(capsys) == (
        f"error: -o {manifest} already lists {shards[0]} and 1 more, which this merge does "
        f"not: remove {manifest} first or give another -o"
    )
    assert manifest.read_bytes() == before
    assert main(["merge", *map(str, shards), "-o", str(manifest)]) == 0  # a superset: fine
    assert len(DatasetManifest.load(manifest).shards) == 3
    capsys.readouterr()
    assert main(["merge", str(manifest), "-o", str(tmp_path / "e.json")]) == 2
    assert _one_line_error(capsys) == (
        f"error: {manifest}: a dataset manifest, not a .beton: give its shards' .beton files"
    )


def test_inspect_and_verify_of_a_bad_listing_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write_pairs(_source(8), tmp_path / "s.beton", **FAST)
    manifest = tmp_path / "d.json"
    add_shards(manifest, [tmp_path / "s.beton"])
    body = manifest.read_text()
    manifest.write_text(body.replace('"part": null', '"part": [1]'))
    assert main(["inspect", str(manifest)]) == 2  # before: a TypeError's traceback
    assert "part must be null or an object with integers" in _one_line_error(capsys)
    (tmp_path / "dir.beton").mkdir()
    manifest.write_text(body.replace('"s.beton"', '"dir.beton"'))
    assert main(["verify", str(manifest)]) == 1
    assert (
        capsys.readouterr().out
        == f"FAIL: {tmp_path / 'dir.beton'}: not a regular file (the manifest lists it)\n"
    )
