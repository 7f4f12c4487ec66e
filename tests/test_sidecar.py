"""One pass: the writer never reads its data pages back, the sidecar's whole-file digest is
derived from block digests, verify checks it, and older (format 1) sidecars still verify."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import make_arrays

from ffcv_pairs import ArraySource, write_pairs
from ffcv_pairs.cli import main
from ffcv_pairs.format import sidecar
from ffcv_pairs.format.integrity import load_manifest, load_stats, open_beton
from ffcv_pairs.format.reader import PairReader
from ffcv_pairs.format.sidecar import Manifest, manifest_path
from ffcv_pairs.format.stats import stats_path


@pytest.fixture
def written(tmp_path: Path) -> Path:
    a, b, labels = make_arrays(200, (3, 8, 8), seed=2)
    out = tmp_path / "s.beton"
    write_pairs(ArraySource(a, b, labels), out, page_size=4096, workers=1, progress=False)
    return out


def test_writer_reads_back_only_the_table_blocks(tmp_path: Path, monkeypatch) -> None:
    a, b, labels = make_arrays(200, (3, 8, 8), seed=2)
    read = []
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        read.append(n)
        return real(fd, n, offset)

    def forbidden(*args: object) -> None:
        raise AssertionError("the writer hashed the whole file again")

    monkeypatch.setattr(os, "pread", counting)
    monkeypatch.setattr(sidecar, "hash_file", forbidden)
    report = write_pairs(
        ArraySource(a, b, labels), tmp_path / "x.beton", page_size=4096, workers=1, progress=False
    )
    tables = report.file_size - report.num_pages * 4096  # header, metadata, allocation table
    assert report.num_pages == 20 and sum(read) <= tables + 2 * 4096, sum(read)


def test_root_digest_and_verify(capsys, written: Path) -> None:
    m = Manifest.load(manifest_path(written))
    data = written.read_bytes()
    blocks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    want = hashlib.sha256(b"".join(hashlib.sha256(x).digest() for x in blocks)).hexdigest()
    assert m.root_sha256 == want and m.digest_kind == "root_sha256"
    assert main(["verify", str(written)]) == 0

    raw = json.loads(manifest_path(written).read_text())
    raw["root_sha256"] = "0" * 64
    manifest_path(written).write_text(json.dumps(raw))
    capsys.readouterr()
    assert main(["verify", str(written)]) == 1
    assert "whole-file digest" in capsys.readouterr().out


def test_format_1_sidecars_still_verify(capsys, written: Path) -> None:
    raw = json.loads(manifest_path(written).read_text())
    for key in ("root_sha256", "shuffle_seed", "permutation"):
        del raw[key]
    raw["format"] = "ffcv-pairs-manifest/1"
    raw["sha256"] = hashlib.sha256(written.read_bytes()).hexdigest()
    manifest_path(written).write_text(json.dumps(raw))
    assert Manifest.load(manifest_path(written)).digest_kind == "sha256"
    assert main(["verify", str(written)]) == 0
    open_beton(written, full_check=True)
    capsys.readouterr()
    assert main(["inspect", str(written)]) == 0
    assert f"sha256 {raw['sha256'][:16]}" in capsys.readouterr().out

    raw["sha256"] = "f" * 64
    manifest_path(written).write_text(json.dumps(raw))
    assert main(["verify", str(written)]) == 1
    assert "whole-file digest" in capsys.readouterr().out


def test_unknown_sidecar_format_is_refused(written: Path) -> None:
    raw = json.loads(manifest_path(written).read_text())
    raw["format"] = "ffcv-pairs-manifest/9"
    manifest_path(written).write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="unreadable manifest"):
        Manifest.load(manifest_path(written))


def test_a_symlink_finds_the_sidecars_beside_its_target(capsys, written: Path) -> None:
    """The sidecars lie beside the file a link points to (or, failing that, beside the
    link): the loader, ``verify`` and ``inspect`` find them through the link."""
    links = written.parent / "links"
    links.mkdir()
    link = links / "s.beton"
    link.symlink_to(written)
    reader = PairReader(link)
    manifest = load_manifest(reader)
    assert manifest is not None and manifest.root_sha256
    assert load_stats(reader) is not None, "the image statistics were not found"
    capsys.readouterr()
    assert main(["verify", str(link)]) == 0
    assert "checksums: OK" in capsys.readouterr().out
    assert main(["inspect", str(link)]) == 0
    assert "block checksums" in capsys.readouterr().out
    # Sidecars beside the link only (the target's directory has none) are found too.
    manifest_path(written).rename(manifest_path(link))
    stats_path(written).rename(stats_path(link))
    assert load_manifest(PairReader(link)) is not None
    assert load_stats(PairReader(link)) is not None
