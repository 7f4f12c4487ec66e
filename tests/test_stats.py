"""Image statistics: the writer's ``.stats`` sidecar, checked against sums and maxima taken
with numpy from the images, and the loader's contrast, which reads its means from them
and gives the same bytes as without them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import make_arrays, write_batched

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.cli import main, write_main
from ffcv_pairs.format.sidecar import Manifest, manifest_path
from ffcv_pairs.format.stats import HEADER_BYTES, StatsWarning, hash_stats, stats_path
from ffcv_pairs.kernels.bytesums import STATS_FIRST, STATS_LAST, STATS_TOTAL, image_stats
from ffcv_pairs.kernels.photometric import ChannelPlanes, image_mean, stored_mean
from ffcv_pairs.write.shuffle import Permutation

N = 150


def _expected(images: np.ndarray, layout: str) -> np.ndarray:
    """``[max, s0, s1, s2]`` per image, from the definition (module docstring of
    :mod:`ffcv_pairs.format.stats`)."""
    n = len(images)
    x = images.reshape(n, -1).astype(np.int64)
    sums = np.zeros((n, 3), dtype=np.int64)
    if layout == "first":
        sums[:] = x.reshape(n, 3, -1).sum(axis=2)
    elif layout == "last":
        sums[:] = x.reshape(n, -1, 3).sum(axis=1)
    else:
        sums[:, 0] = x.sum(axis=1)
    return np.concatenate([x.max(axis=1, keepdims=True), sums], axis=1)


def _records(path: Path) -> np.ndarray:
    raw = np.fromfile(stats_path(path), dtype="<u4", offset=HEADER_BYTES)
    return raw.reshape(-1, 2, 4).astype(np.int64)


@pytest.mark.parametrize("n_values", [3 * 48, 3 * 48 + 45, 3 * 64 * 5 + 3, 3])
def test_image_stats_kernel(n_values: int) -> None:
    rng = np.random.default_rng(n_values)
    block = rng.integers(0, 256, (9, n_values + 5), dtype=np.uint8)
    block[4] = 0
    images = block[:, 2 : 2 + n_values]  # rows that do not start at a multiple of 64
    out = np.zeros((9, 4), dtype=np.uint32)
    for kind, layout in [(STATS_FIRST, "first"), (STATS_LAST, "last"), (STATS_TOTAL, "total")]:
        image_stats(images, kind, out)
        np.testing.assert_array_equal(out, _expected(images, layout), err_msg=layout)


@pytest.mark.parametrize(
    ("shape", "layout"), [((3, 12, 10), "first"), ((12, 10, 3), "last"), ((12, 10), "total")]
)
@pytest.mark.parametrize("shuffle", [None, 5])
def test_writer_records_follow_the_file_order(
    tmp_path: Path, shape: tuple[int, ...], layout: str, shuffle: int | None
) -> None:
    a, b, labels = make_arrays(N, shape, seed=len(shape))
    b = (b // 3).astype(np.uint8)  # a darker B: other maxima
    out = tmp_path / "s.beton"
    write_pairs(
        ArraySource(a, b, labels),
        out,
        page_size=4096,
        workers=2,
        progress=False,
        shuffle_seed=shuffle,
    )
    manifest = Manifest.load(manifest_path(out))
    assert manifest.stats is not None
    assert manifest.stats["layouts"] == {"A": layout, "B": layout}
    assert manifest.stats["file"] == "s.beton.stats"
    source = np.arange(N) if shuffle is None else Permutation(N, shuffle).source_of(np.arange(N))
    got = _records(out)
    np.testing.assert_array_equal(got[:, 0], _expected(a[source], layout))
    np.testing.assert_array_equal(got[:, 1], _expected(b[source], layout))


@pytest.mark.parametrize("shuffle", [None, 5])
def test_batched_source_records(tmp_path: Path, shuffle: int | None) -> None:
    """Batch files are scattered to their pages (pages shared between ranges of files)."""
    a, b, labels = make_arrays(N, (3, 8, 8), seed=7)
    src = write_batched(tmp_path / "pt", "train", a, b, labels, per_file=7)
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--page-size", "4KiB"]
    argv += [] if shuffle is None else ["--shuffle", str(shuffle)]
    assert write_main([*argv, "--workers", "2", "--no-progress"]) == 0
    got = _records(tmp_path / "out" / "train.beton")
    source = np.arange(N) if shuffle is None else Permutation(N, shuffle).source_of(np.arange(N))
    np.testing.assert_array_equal(got[:, 0], _expected(a[source], "first"))
    np.testing.assert_array_equal(got[:, 1], _expected(b[source], "first"))


def test_no_stats_for_floats(tmp_path: Path) -> None:
    a, b, labels = make_arrays(40, (3, 8, 8), seed=1)
    out = tmp_path / "f.beton"
    write_pairs(ArraySource(a, b, labels), out, store_dtype="float16", workers=1, progress=False)
    assert Manifest.load(manifest_path(out)).stats is None
    assert not stats_path(out).exists()
    mixed = tmp_path / "m.beton"
    write_pairs(ArraySource(a, b.astype(np.float32), labels), mixed, workers=1, progress=False)
    assert Manifest.load(manifest_path(mixed)).stats["layouts"] == {"A": "first", "B": None}
    np.testing.assert_array_equal(_records(mixed)[:, 0], _expected(a, "first"))
    assert not _records(mixed)[:, 1].any()


@pytest.mark.parametrize(
    "chans", [ChannelPlanes(3, 1, 30), ChannelPlanes(1, 3, 90), ChannelPlanes(1, 1, 30)]
)
def test_stored_mean_is_image_mean(chans: ChannelPlanes) -> None:
    """The same float64 when no value clamps; -1 (compute it) when one would."""
    rng = np.random.default_rng(chans.pixel)
    for i in range(200):
        top = int(rng.integers(1, 256))
        x = rng.integers(0, top + 1, chans.planes * chans.plane_size, dtype=np.uint8)
        bright = float(rng.uniform(0.5, 1.5))
        kind = "first" if chans.planes == 3 else ("last" if chans.pixel == 3 else "total")
        rec = _expected(x[None], kind)[0].astype(np.uint32)
        got = stored_mean(rec, chans, bright)
        if bright * int(x.max()) > 255:
            assert got == -1.0, (i, bright, x.max())
        else:
            assert got == image_mean(x, chans, bright, True), (i, bright)


def _epoch(path: Path, augment: PairAugment) -> list[np.ndarray]:
    loader = make_loader(path, batch_size=32, order="sequential", augment=augment, device="cpu")
    try:
        return [np.concatenate([a.numpy(), b.numpy()]) for a, b, _ in loader]
    finally:
        loader.close()


AUGMENTS = {  # augment, whether the means may come from the stats
    "plain": (PairAugment(brightness=0.4, contrast=0.4, contrast_paired=False), True),
    "flips": (PairAugment(brightness=0.3, contrast=0.3, hflip=0.5, vflip=0.5, rot90=True), True),
    "crop": (PairAugment(contrast=0.3, crop=(12, 12)), False),  # a crop drops pixels
    "translate": (PairAugment(contrast=0.3, translate=(2, 2)), False),  # pads some
}


@pytest.mark.parametrize("case", list(AUGMENTS))
def test_loader_means_from_stats_give_the_same_bytes(tmp_path: Path, case: str, caplog) -> None:
    """With the statistics (used where the geometry keeps every pixel: halving their sums
    changes the output), without them, and with another conversion's (ignored, with a
    warning): the same batches."""
    augment, used = AUGMENTS[case]
    a, b, labels = make_arrays(N, (3, 16, 16), seed=3)
    b = (b // 2).astype(np.uint8)  # no value of B clamps below brightness 2
    out = tmp_path / "l.beton"
    write_pairs(ArraySource(a, b, labels), out, page_size=1 << 16, workers=1, progress=False)
    with_stats = _epoch(out, augment)

    stats = stats_path(out)
    saved = stats.read_bytes()
    halved = np.frombuffer(saved, dtype=np.uint8).copy()
    records = halved[HEADER_BYTES:].view("<u4").reshape(-1, 2, 4)
    records[:, :, 1:] //= 2
    stats.write_bytes(halved.tobytes())
    _vouch_for(out)  # a sidecar that agrees: the loader trusts the halved sums
    tampered = _epoch(out, augment)
    assert any((x != y).any() for x, y in zip(with_stats, tampered)) == used

    stats.unlink()
    without = _epoch(out, augment)
    for x, y in zip(with_stats, without):
        np.testing.assert_array_equal(x, y)

    other = bytearray(saved)
    other[20] ^= 0xFF  # the header's digest of the `.beton`: another conversion's file
    stats.write_bytes(bytes(other))
    with caplog.at_level(logging.WARNING, logger="ffcv_pairs.format.stats"):
        stale = _epoch(out, augment)
    assert "does not belong to this file" in caplog.text
    for x, y in zip(with_stats, stale):
        np.testing.assert_array_equal(x, y)


def _vouch_for(beton: Path) -> None:
    """Make the sidecar's SHA-256 of the stats file match its bytes as they are now."""
    sidecar = manifest_path(beton)
    manifest = json.loads(sidecar.read_text())
    manifest["stats"]["sha256"] = hash_stats(stats_path(beton))
    sidecar.write_text(json.dumps(manifest))


def test_a_damaged_stats_file_is_never_used(tmp_path: Path) -> None:
    """One sample's channel sums zeroed (the sidecar not told): the loader warns, names the
    file, and computes that mean from the pixels; the batches are those without stats."""
    a, b, labels = make_arrays(N, (3, 16, 16), seed=6)
    b = (b // 2).astype(np.uint8)
    out = tmp_path / "d.beton"
    write_pairs(ArraySource(a, b, labels), out, page_size=1 << 16, workers=1, progress=False)
    augment = AUGMENTS["plain"][0]
    stats = stats_path(out)
    saved = stats.read_bytes()
    stats.unlink()
    without = _epoch(out, augment)
    damaged = np.frombuffer(saved, dtype=np.uint8).copy()
    damaged[HEADER_BYTES:].view("<u4").reshape(-1, 2, 4)[7, 0, 1:] = 0
    stats.write_bytes(damaged.tobytes())
    with pytest.warns(StatsWarning, match=r"d\.beton\.stats fails its checksum"):
        got = _epoch(out, augment)
    for x, y in zip(without, got):
        np.testing.assert_array_equal(x, y)


def test_verify_checks_the_stats(tmp_path: Path, capsys) -> None:
    a, b, labels = make_arrays(60, (3, 8, 8), seed=4)
    out = tmp_path / "v.beton"
    write_pairs(ArraySource(a, b, labels), out, page_size=4096, workers=1, progress=False)
    assert main(["verify", str(out)]) == 0
    assert "image statistics OK" in capsys.readouterr().out

    data = bytearray(stats_path(out).read_bytes())
    data[HEADER_BYTES + 5] ^= 1
    stats_path(out).write_bytes(bytes(data))
    assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "image statistics v.beton.stats: SHA-256" in printed, printed

    stats_path(out).unlink()
    assert main(["verify", str(out)]) == 0
    assert "image statistics missing (optional)" in capsys.readouterr().out
    assert json.loads(manifest_path(out).read_text())["stats"]["sha256"]
