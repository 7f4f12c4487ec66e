"""JPEG storage (``--codec jpeg``): the packed writer, the file plain FFCV reads, the loader's
decode with every augmentation drawn as on raw data, resume, verify, and the refusals."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import numpy as np
import pytest
import reference as ref
import torch
from conftest import write_per_sample
from writer_proc import finish, start_writer

from ffcv_pairs import ArraySource, LoaderError, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.axes import image_axes
from ffcv_pairs.cli import main, write_main
from ffcv_pairs.format.reader import PairReader
from ffcv_pairs.kernels.decode import decode_pairs, decode_pairs_serial
from ffcv_pairs.kernels.fused import fused_pairs, fused_pairs_serial
from ffcv_pairs.kernels.geometry import scaled_size
from ffcv_pairs.kernels.jpeg import decode_rgb
from ffcv_pairs.load import prefetch
from ffcv_pairs.write import tracker
from ffcv_pairs.write.sources import SourceError

SEED = 11


def photos(n: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Smooth seeded images with a little noise (JPEG material), in ``shape``'s layout."""
    rng = np.random.default_rng(seed)
    h, w = (shape[1], shape[2]) if shape[0] in (1, 3) and len(shape) == 3 else shape[:2]
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    out = np.empty((n, *shape), dtype=np.uint8)
    for i in range(n):
        fx, fy, phase = rng.uniform(1, 4, 3)
        base = 128 + 90 * np.sin(fx * 3 * x + phase) * np.cos(fy * 3 * y)
        img = base[..., None] + rng.uniform(-30, 30, 3) + rng.normal(0, 3, (h, w, 3))
        img = img.clip(0, 255).astype(np.uint8)
        if len(shape) == 2:
            out[i] = img[..., 0]
        elif shape[0] in (1, 3) and shape[0] < shape[2]:
            out[i] = np.moveaxis(img[..., : shape[0]], -1, 0)
        else:
            out[i] = img[..., : shape[2]]
    return out


def written(tmp_path: Path, a, b, name="j.beton", **kwargs) -> Path:
    path = tmp_path / name
    kwargs = {"codec": "jpeg", "workers": 2, "page_size": 1 << 14, **kwargs}
    write_pairs(ArraySource(a, b, np.arange(len(a)) * 3), path, progress=False, **kwargs)
    return path


def batches(path: Path, aug: PairAugment | None = None, **kwargs):
    kwargs = {"order": "sequential", **kwargs}
    loader = make_loader(path, batch_size=16, seed=SEED, augment=aug, drop_last=False, **kwargs)
    out = [[t.clone() for t in batch] for batch in loader]
    return [torch.cat([x[i] for x in out]).numpy() for i in range(3)]


def psnr(x: np.ndarray, y: np.ndarray) -> float:
    mse = float(np.mean((x.astype(np.float64) - y.astype(np.float64)) ** 2))
    return 10 * np.log10(255**2 / max(mse, 1e-12))


def upstream_rgb(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A and B as plain FFCV decodes them (HWC RGB, a grayscale JPEG as three channels)."""
    from ffcv.fields.decoders import IntDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption

    loader = Loader(
        str(path),
        batch_size=16,
        order=OrderOption.SEQUENTIAL,
        drop_last=False,
        pipelines={
            "A": [SimpleRGBImageDecoder()],
            "B": [SimpleRGBImageDecoder()],
            "label": [IntDecoder()],
        },
    )
    parts = [(x.copy(), y.copy()) for x, y, _ in loader]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def as_layout(rgb: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Upstream's ``(N, H, W, 3)`` decode in the layout of ``shape``."""
    if len(shape) == 2:
        return rgb[..., 0]
    if shape[0] in (1, 3) and shape[0] < shape[2]:
        return np.moveaxis(rgb[..., : shape[0]], -1, 1)
    return rgb[..., : shape[2]]


@pytest.mark.parametrize("shape", [(3, 24, 40), (24, 40, 3), (24, 40), (1, 24, 40), (24, 40, 1)])
def test_round_trip_is_upstreams_decode_and_close_to_the_source(tmp_path: Path, shape) -> None:
    a, b = photos(40, shape, seed=1), photos(40, shape, seed=2)
    path = written(tmp_path, a, b, quality=90)
    xa, xb, labels = batches(path)
    assert xa.shape == a.shape and xa.dtype == np.uint8
    np.testing.assert_array_equal(labels, np.arange(40) * 3)
    ua, ub = upstream_rgb(path)
    np.testing.assert_array_equal(xa, as_layout(ua, shape))
    np.testing.assert_array_equal(xb, as_layout(ub, shape))
    assert psnr(xa, a) > 30 and psnr(xb, b) > 30, (psnr(xa, a), psnr(xb, b))
    reader = PairReader(path)
    assert reader.schema.a.jpeg is not None and reader.schema.a.jpeg.quality == 90
    assert len(np.unique(reader.image_sizes())) > 10  # sizes vary: packed, not slotted


AUGMENTS = [  # every geometry op, the resized crop, every photometric op and the output
    PairAugment(
        hflip=0.5,
        vflip=0.5,
        rot90=True,
        crop=(20, 20),
        crop_padding=3,
        pad_mode="reflect",
        translate=(2, 3),
    ),
    PairAugment(resized_crop=(12, 16), crop_scale=(0.3, 1.0), hflip=0.5),
    PairAugment(
        hflip=0.5,
        brightness=0.3,
        contrast=0.3,
        noise_std=4.0,
        normalize_mean=(127.5,) * 3,
        normalize_std=(64.0,) * 3,
    ),
]


@pytest.mark.slow  # compiles the decode and every op's kernels for the JPEG path
@pytest.mark.parametrize("aug", AUGMENTS, ids=lambda a: repr(a)[12:50])
def test_augmentation_draws_as_on_raw_data_and_pairs_identical_images(
    tmp_path: Path, aug: PairAugment
) -> None:
    """A JPEG file and a raw file of its decoded pixels give the same batches under every
    op; A and B encoded from identical images stay identical under paired ops."""
    a = photos(48, (3, 24, 40), seed=3)
    path = written(tmp_path, a, a.copy())
    da, db, _ = batches(path)
    raw = tmp_path / "raw.beton"
    write_pairs(ArraySource(da, db, np.arange(48) * 3), raw, progress=False, workers=1)
    kernels = (fused_pairs, fused_pairs_serial, decode_pairs, decode_pairs_serial)
    before = [set(k.overloads) for k in kernels]
    for cache in (True, False):
        got = batches(path, aug, os_cache=cache, jpeg_downscale=False)
        want = batches(raw, aug, os_cache=cache)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        if aug.noise_std == 0:  # noise is drawn per image unless noise_paired
            np.testing.assert_array_equal(got[0], got[1])
    # The file's mapping, the process cache's slots and the decoded JPEGs reach a kernel
    # as the same types, so it compiles (tens of seconds) once for all of them.
    for kernel, seen in zip(kernels, before):
        added = set(kernel.overloads) - seen
        assert len(added) <= 1, (kernel.__name__, added)
        for refs, mm, *_ in added:
            ptrs = (refs.types[2], refs.types[3], mm)
            assert all(p.layout == "A" or p is mm for p in ptrs), (kernel.__name__, ptrs)
            assert not any(p.mutable for p in ptrs), (kernel.__name__, ptrs)


def _reduced_region(prm, out: tuple[int, int]) -> int:
    """The reduction a region allows: the largest of 8, 4, 2 it spans the output at, or 1."""
    return next((d for d in (8, 4, 2) if prm.rh >= d * out[0] and prm.rw >= d * out[1]), 1)


@pytest.mark.parametrize("shape", [(3, 64, 80), (64, 80, 3), (64, 80)], ids=str)
def test_a_resized_crop_decodes_each_jpeg_at_the_reduction_its_region_allows(
    tmp_path: Path, shape
) -> None:
    """With ``jpeg_downscale`` (the default), a region that spans the output 2, 4 or 8 times
    over is resized from the JPEG decoded at that reduction, its edges divided by it:
    within 1 of the exact bilinear value of that image; A and B stay paired."""
    a = photos(32, shape, seed=21)
    path = written(tmp_path, a, a.copy())
    out = (8, 8)
    aug = PairAugment(resized_crop=out, crop_scale=(0.04, 1.0), hflip=0.5)
    xa, xb, labels = batches(path, aug)
    np.testing.assert_array_equal(xa, xb)
    reader = PairReader(path)
    lay, data = image_axes(reader.schema.a), np.fromfile(path, np.uint8)
    ptrs, sizes = reader.image_pointers("A"), reader.image_sizes()
    h, w = lay.height, lay.width
    seen = set()
    for sid in labels // 3:
        prm = ref.params(aug, lay, SEED, 0, sid, 0)
        d = _reduced_region(prm, out)
        seen.add(d)
        rgb = np.zeros((*scaled_size(h, w, d), 3), np.uint8)
        assert decode_rgb(data, int(ptrs[sid]), int(sizes[sid, 0]), rgb, h, w, d) == 0
        small = rgb[..., : lay.num_channels]
        exact = ref.bilinear(small, prm.y0 / d, prm.x0 / d, prm.rh / d, prm.rw / d, out)
        want = ref.from_hwc(np.ascontiguousarray(ref.flips_rot(exact, prm)), lay)
        diff = np.abs(xa[sid].astype(np.int64) - ref.round_uint8(want))
        assert diff.max() <= 1, (sid, d, diff.max())
    assert seen == {1, 2, 4, 8}, seen  # every reduction drawn, and the full size
    full = batches(path, aug, jpeg_downscale=False)[0]
    assert (full != xa).any()  # the option decides


def test_prefetch_by_pages_or_by_images_never_changes_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = photos(64, (3, 24, 40), seed=12)
    path = written(tmp_path, a, a[::-1].copy())
    aug = PairAugment(hflip=0.5)
    want = batches(path, aug, order="random", prefetch=0)
    for ram in (None, 1):  # this machine's RAM: whole pages; 1 byte: each JPEG's bytes
        if ram is not None:
            monkeypatch.setattr(prefetch, "physical_ram", lambda: 1)
        assert prefetch.prefetch_mode("random", path.stat().st_size) == (
            "samples" if ram else "pages"
        )
        for g, w in zip(batches(path, aug, order="random", prefetch=2), want):
            np.testing.assert_array_equal(g, w)
    reader = PairReader(path)
    order = np.random.default_rng(0).permutation(64)
    columns = [reader.image_pointers(name) for name in ("A", "B")]
    sizes = [reader.stored_bytes(name) for name in ("A", "B")]
    _, starts, lengths = prefetch.sample_schedule(order, 16, columns, sizes)
    np.testing.assert_array_equal(lengths, reader.image_sizes()[order].reshape(-1))
    np.testing.assert_array_equal(starts[::2], columns[0][order])


def test_one_field_jpeg_and_the_other_raw(tmp_path: Path) -> None:
    a, b = photos(30, (24, 40, 3), seed=4), photos(30, (3, 24, 40), seed=5)
    path = written(tmp_path, a, b, codec={"A": "jpeg"}, quality=75)
    xa, xb, _ = batches(path, PairAugment(hflip=1.0))
    np.testing.assert_array_equal(xb, b[..., ::-1])  # raw: exact
    assert 25 < psnr(xa, a[:, :, ::-1]) < 60
    assert PairReader(path).schema.b.jpeg is None


def test_a_corrupt_jpeg_is_named_by_sample_and_field(tmp_path: Path) -> None:
    a = photos(20, (3, 24, 40), seed=6)
    path = written(tmp_path, a, a.copy())
    ptr = int(PairReader(path).image_pointers("B")[7])
    with open(path, "r+b") as f:  # the JPEG's start-of-image marker
        f.seek(ptr)
        f.write(b"\0\0")
    with pytest.raises(LoaderError, match=r"sample 7 field 'B': corrupt or truncated JPEG"):
        batches(path)
    assert main(["verify", str(path)]) == 1


@pytest.mark.parametrize(
    ("shape", "dtype", "kwargs", "needle"),
    [
        ((3, 8, 8), "float32", {}, r"a\.pt: JPEG stores uint8 images, got float32\[3, 8, 8\]"),
        ((2, 8, 8), "uint8", {}, r"a\.pt: JPEG stores images of shape .* got \[2, 8, 8\]"),
        ((8, 8, 4), "uint8", {}, r"got \[8, 8, 4\]"),
        ((3, 8, 8), "uint8", {"quality": 0}, r"quality must be between 1 and 100, got 0"),
        ((3, 8, 8), "uint8", {"codec": "png"}, r"codec must be one of .*got 'png'"),
        ((3, 8, 8), "uint8", {"codec": {"C": "jpeg"}}, r"codec per field must map A"),
        ((3, 8, 8), "uint8", {"codec": None, "quality": 80}, r"quality applies to codec jpeg"),
    ],
)
def test_what_jpeg_cannot_store_is_refused_by_name(
    tmp_path: Path, shape, dtype, kwargs, needle
) -> None:
    class Named(ArraySource):
        def where(self, i: int, part: str) -> str:
            return "a.pt"

    a = np.zeros((2, *shape), dtype=dtype)
    kwargs = {"codec": "jpeg", **kwargs}
    with pytest.raises((SourceError, ValueError), match=needle):
        write_pairs(Named(a, a, np.arange(2)), tmp_path / "x.beton", progress=False, **kwargs)
    assert not (tmp_path / "x.beton").exists()


def _pt_source(tmp_path: Path, n: int = 60) -> Path:
    a, b = photos(n, (3, 24, 40), seed=8), photos(n, (3, 24, 40), seed=9)
    return write_per_sample(tmp_path / "pt", "train", a, b, np.arange(n))


def _argv(src: Path, out: Path, *extra: str) -> list[str]:
    return [str(src), str(out), "--split", "train", "--page-size", "4KiB", "--no-progress", *extra]


def test_the_write_command_stores_jpeg_and_verify_and_inspect_read_it(
    tmp_path: Path, capsys
) -> None:
    src = _pt_source(tmp_path)
    out = tmp_path / "out"
    assert write_main(_argv(src, out, "--codec", "jpeg", "--quality", "75", "--workers", "2")) == 0
    printed = capsys.readouterr().out
    assert "as JPEG quality 75" in printed
    path = out / "train.beton"
    assert main(["verify", str(path), "--against", str(src)]) == 0
    png = tmp_path / "preview.png"
    assert main(["inspect", str(path), "--preview", "3", "--out", str(png)]) == 0
    assert "as JPEG quality 75:" in capsys.readouterr().out
    assert png.stat().st_size > 0
    manifest = (out / "train.beton.json").read_text()
    assert '"codec": "jpeg"' in manifest and '"quality": 75' in manifest
    # a different quality is a different encode: verify --against says which sample
    raw_out = tmp_path / "q90"
    assert write_main(_argv(src, raw_out, "--codec", "jpeg", "--workers", "1")) == 0
    with open(raw_out / "train.beton", "r+b") as f:  # not a bit of q90 is q75: swap files
        f.write(path.read_bytes())
    assert main(["verify", str(raw_out / "train.beton"), "--against", str(src)]) == 1


def test_bad_codec_flags_are_one_line_errors(tmp_path: Path, capsys) -> None:
    src = _pt_source(tmp_path, 4)
    assert write_main(_argv(src, tmp_path / "o", "--codec", "webp")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--codec" in err and "webp" in err
    assert write_main(_argv(src, tmp_path / "o", "--codec", "jpeg", "--quality", "101")) == 2
    assert "--quality" in capsys.readouterr().err


def test_kill_then_resume_is_byte_identical(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracker, "JOURNAL_SECONDS", 0.0)  # journal after every page
    src = _pt_source(tmp_path)
    flags = ("--codec", "jpeg", "--workers", "2")
    reference = tmp_path / "ref"
    assert write_main(_argv(src, reference, *flags)) == 0
    out = tmp_path / "out"
    proc = start_writer(_argv(src, out, *flags), tmp_path / "log", hook="journal@3:kill")
    assert finish(proc) == -signal.SIGKILL
    assert (out / "train.beton.partial").exists()
    capsys.readouterr()
    assert write_main(_argv(src, out, *flags, "--resume")) == 0
    printed = capsys.readouterr().out
    kept, pages = (int(x) for x in re.search(r"resumed: kept (\d+) of (\d+)", printed).groups())
    assert 3 <= kept < pages  # journaled pages kept (a chunk may finish two pages at once)
    assert (out / "train.beton").read_bytes() == (reference / "train.beton").read_bytes()
    assert main(["verify", str(out / "train.beton"), "--against", str(src)]) == 0
