"""--shuffle: the seeded permutation (checked against its definition), written files that
round-trip through verify --against and inspect, in both layouts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import make_arrays, write_batched, write_per_sample

from ffcv_pairs import PairReader, open_source, write_pairs
from ffcv_pairs.cli import main, write_main
from ffcv_pairs.format.sidecar import Manifest, manifest_path
from ffcv_pairs.write.compare import compare_with_source
from ffcv_pairs.write.shuffle import Permutation

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _mix64(x: int) -> int:
    """splitmix64's finaliser, from its published constants."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _reference(n: int, seed: int) -> list[int]:
    """The documented definition: 6 Feistel rounds on 2h bits, then cycle walking."""
    half = (max(2, (n - 1).bit_length()) + 1) // 2
    mask = (1 << half) - 1
    keys = [_mix64(_mix64(_mix64((seed ^ GOLDEN) & M64) ^ r) ^ 0x5045524D) for r in range(6)]

    def feistel(x: int) -> int:
        left, right = x >> half, x & mask
        for k in keys:
            left, right = right, left ^ (_mix64(right ^ k) & mask)
        return (left << half) | right

    out = []
    for j in range(n):
        x = feistel(j)
        while x >= n:
            x = feistel(x)
        out.append(x)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 17, 255, 1000, 4097])
@pytest.mark.parametrize("seed", [0, 1, 2**63 + 5])
def test_permutation_is_a_seeded_bijection(n: int, seed: int) -> None:
    perm = Permutation(n, seed)
    src = perm.source_of(np.arange(n))
    assert sorted(src.tolist()) == list(range(n))
    np.testing.assert_array_equal(perm.position_of(src), np.arange(n))
    np.testing.assert_array_equal(Permutation(n, seed).source_of(np.arange(n)), src)
    if n >= 16:
        assert not np.array_equal(Permutation(n, seed + 1).source_of(np.arange(n)), src)


@pytest.mark.parametrize(("n", "seed"), [(5, 0), (100, 7), (1000, 2**40 + 3)])
def test_permutation_matches_its_definition(n: int, seed: int) -> None:
    assert Permutation(n, seed).source_of(np.arange(n)).tolist() == _reference(n, seed)


def test_permutation_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="seed"):
        Permutation(10, -1)
    with pytest.raises(ValueError, match="index 10 is outside"):
        Permutation(10, 1).source_of(np.array([3, 10]))


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("shuffle")
    a, b, labels = make_arrays(47, (3, 8, 8), seed=9)
    return (
        write_per_sample(root / "per", "train", a, b, labels),
        write_batched(root / "bat", "train", a, b, labels, per_file=6),
    )


def test_shuffle_round_trips_through_verify_and_inspect(capsys, tmp_path: Path, sources) -> None:
    per_sample, _ = sources
    out = tmp_path / "out"
    argv = [str(per_sample), str(out), "--split", "train", "--page-size", "4KiB"]
    assert write_main([*argv, "--shuffle", "7", "--workers", "2", "--no-progress"]) == 0
    beton = out / "train.beton"
    labels = np.asarray(PairReader(beton).metadata["f2"])
    want = Permutation(47, 7).source_of(np.arange(47))  # labels are the source indices
    np.testing.assert_array_equal(labels, want)
    assert not np.array_equal(labels, np.arange(47))
    manifest = Manifest.load(manifest_path(beton))
    assert (manifest.shuffle_seed, manifest.permutation) == (7, "feistel-mix64/1")

    capsys.readouterr()
    verify = ["verify", str(beton), "--against", str(per_sample), "--samples", "all"]
    assert main(verify) == 0
    assert "samples: OK (47 of 47" in capsys.readouterr().out
    assert main(["inspect", str(beton)]) == 0
    assert f"shuffled, seed 7 (position<-source index: 0<-{want[0]}, 1<-{want[1]}" in (
        capsys.readouterr().out
    )

    raw = json.loads(manifest_path(beton).read_text())
    raw["shuffle_seed"] = 8  # the wrong map back to the sources is caught
    manifest_path(beton).write_text(json.dumps(raw))
    assert main(verify) == 1
    assert "(source index" in capsys.readouterr().out


@pytest.mark.parametrize(("seed", "limit"), [(11, None), (11, 30), (None, 30)])
def test_batched_equals_per_sample(tmp_path: Path, sources, seed, limit) -> None:
    """Gathered (per-sample) and scattered (batched, files cut by --limit) give one file."""
    per_sample, batched = sources
    for name, root, workers in [("p", per_sample, 2), ("b", batched, 2), ("b1", batched, 1)]:
        write_pairs(
            open_source(root, "train"), tmp_path / f"{name}.beton", workers=workers,
            page_size=4096, shuffle_seed=seed, limit=limit, progress=False,
        )  # fmt: skip
    data = (tmp_path / "p.beton").read_bytes()
    assert (tmp_path / "b.beton").read_bytes() == data
    assert (tmp_path / "b1.beton").read_bytes() == data
    reader = PairReader(tmp_path / "b.beton")
    assert reader.num_samples == (limit or 47)
    source = open_source(batched, "train")
    bad = compare_with_source(reader, source, None, shuffle_seed=seed, source_count=len(source))
    assert bad is None
