"""The augmentation ops against their definitions (see tests/reference.py): resized crop,
brightness/contrast, the noise's distribution, CPU normalisation and output dtypes; A and B
move alike; the bytes do not depend on threads or runs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import reference as ref
import torch
from test_augment import SEED, _batches, _data, _file, assert_close_to, near_tie

from ffcv_pairs import ArraySource, ArraySpec, make_loader, write_pairs
from ffcv_pairs.augment.config import PairAugment, image_axes
from ffcv_pairs.augment.ops import AsBFloat16, NormalizeConvert, device_ops
from ffcv_pairs.augment.placement import place_ops
from ffcv_pairs.format.schema import PairSchema

RESIZES = [
    PairAugment(resized_crop=(10, 10), crop_scale=(0.2, 1.0), hflip=0.5, vflip=0.5),
    PairAugment(
        resized_crop=(12, 8), crop_scale=(0.3, 1.0), crop_ratio=(0.5, 2.0), translate=(3, 2)
    ),
    PairAugment(resized_crop=(10, 10), crop_scale=(0.2, 1.0), rot90=True, hflip=0.5),
    PairAugment(resized_crop=(26, 26), crop_scale=(0.05, 0.3)),  # upsampling, taps clamped at edges
    # downscaling by 1.8 to 2.2: some blocks of 8 outputs span more than the vector windows
    PairAugment(resized_crop=(9, 9), crop_scale=(0.8, 1.0), hflip=0.5),
]
SHAPES = [(3, 20, 20), (20, 20, 3), (20, 20), (4, 20, 20)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("aug", RESIZES, ids=range(len(RESIZES)))
def test_resized_crop_is_bilinear_within_one(tmp_path: Path, shape, aug) -> None:
    a, b, labels = _data(24, shape, "uint8", paired="same")
    xa, xb, ids = _batches(_file(tmp_path, a, b, labels), aug, epoch=5)
    lay = image_axes(ArraySpec(shape, "uint8"))
    for sid in ids:
        prm = ref.params(aug, lay, SEED, 5, sid, 0)
        assert_close_to(xa[sid], ref.resized(a[sid], lay, aug, prm), "uint8")
    np.testing.assert_array_equal(xa, xb)  # the same geometry for A and B


def test_a_and_b_move_together(tmp_path: Path) -> None:
    """B = 255 - A stays so (within the rounding) through a paired resized crop with flips."""
    aug = PairAugment(resized_crop=(12, 12), crop_scale=(0.3, 1.0), hflip=0.5, rot90=True)
    a, b, labels = _data(64, (3, 16, 16), "uint8")
    xa, xb, _ = _batches(_file(tmp_path, a, b, labels), aug)
    assert np.abs(xb.astype(int) + xa.astype(int) - 255).max() <= 1


def _channels(values, shape=(3, 6, 6)) -> np.ndarray:
    img = np.zeros(shape, dtype=np.uint8)
    for c, v in enumerate(values):
        img[c] = v
    return img


def test_contrast_is_around_the_grayscale_mean(tmp_path: Path) -> None:
    """torchvision's contrast: the mean of 0.2989 R + 0.587 G + 0.114 B, not of all values."""
    n = 64
    a = np.stack([_channels((200, 0, 40))] * n)
    path = _file(tmp_path, a, a.copy(), np.arange(n))
    aug = PairAugment(contrast=0.5)
    xa, _, ids = _batches(path, aug)
    lay = image_axes(ArraySpec((3, 6, 6), "uint8"))
    plain_mean_differs = 0
    for sid in ids:
        want = ref.photometric(a[sid], lay, aug, (SEED, 0, sid, 0))
        assert_close_to(xa[sid], want, "uint8")
        c = 1 + 0.5 * (2 * ref.uniform(ref.sample_key(SEED, 0, sid, ref.OP_CONTRAST, 0), 0) - 1)
        plain = c * a[sid].astype(float) + (1 - c) * a[sid].mean()
        plain_mean_differs += bool((ref.round_uint8(plain) != xa[sid]).any())
    assert plain_mean_differs > n // 2


def test_brightness_clamps_before_contrast(tmp_path: Path) -> None:
    n = 64
    a = np.stack([_channels((250, 120, 10))] * n)
    path = _file(tmp_path, a, a.copy(), np.arange(n))
    aug = PairAugment(brightness=0.9, contrast=0.9)
    xa, _, ids = _batches(path, aug)
    lay = image_axes(ArraySpec((3, 6, 6), "uint8"))
    for sid in ids:
        assert_close_to(xa[sid], ref.photometric(a[sid], lay, aug, (SEED, 0, sid, 0)), "uint8")
    # Without the clamp at 255 (as for float images) red differs wherever brightness > 1.02.
    diffs = 0
    for sid in ids:
        loose = ref.photometric(a[sid].astype(np.float32), lay, aug, (SEED, 0, sid, 0))
        diffs += bool((ref.round_uint8(loose) != xa[sid]).any())
    assert diffs > n // 4


def _tail(k: float) -> float:
    return math.erfc(k / math.sqrt(2))


def test_noise_is_the_stated_normal(tmp_path: Path) -> None:
    """z on float zeros: mean 0, std 1, tails of N(0, 1) within 5 binomial sigmas, |z| <= 4.33."""
    n, shape = 300, (3, 32, 32)
    zeros = np.zeros((n, *shape), dtype=np.float32)
    path = _file(tmp_path, zeros, zeros.copy(), np.arange(n))
    wide = (-10.0, 10.0)  # the default (0, 1) would clamp the noise's negative half
    xa, xb, _ = _batches(path, PairAugment(noise_std=1.0, value_range=wide), bs=50)
    z = np.concatenate([xa.ravel(), xb.ravel()]).astype(np.float64)
    m = z.size
    assert abs(z.mean()) < 5 / math.sqrt(m)
    assert abs(z.std() - 1.0) < 5 * math.sqrt(2 / m)
    for k in (1.0, 2.0, 3.0):
        p = _tail(k)
        assert abs((np.abs(z) > k).mean() - p) < 5 * math.sqrt(p * (1 - p) / m), k
    assert np.abs(z).max() <= 4.33
    # A and B draw their own noise (noise_paired=False), the same with noise_paired.
    assert np.corrcoef(xa.ravel(), xb.ravel())[0, 1] < 0.01
    paired = PairAugment(noise_std=1.0, noise_paired=True, value_range=wide)
    xa2, xb2, _ = _batches(path, paired, bs=50)
    np.testing.assert_array_equal(xa2, xb2)


def test_noise_on_uint8_rounds_and_keeps_its_spread(tmp_path: Path) -> None:
    n = 200
    grey = np.full((n, 3, 16, 16), 128, dtype=np.uint8)
    path = _file(tmp_path, grey, grey.copy(), np.arange(n))
    xa, _, _ = _batches(path, PairAugment(noise_std=5.0), bs=50)
    v = xa.astype(np.float64).ravel()
    assert abs(v.mean() - 128) < 5 * 5 / math.sqrt(v.size)
    assert abs(v.std() - math.sqrt(25 + 1 / 12)) < 0.05  # plus the rounding's 1/12


NORMALIZED = [
    ((3, 8, 8), {}),
    ((8, 8, 3), {"brightness": 0.3, "contrast": 0.3, "noise_std": 2.0}),
    ((8, 8), {"resized_crop": (6, 6), "crop_scale": (0.3, 1.0), "hflip": 0.5}),
    ((3, 8, 8), {"crop": (6, 6), "crop_padding": 2, "contrast": 0.4, "contrast_paired": False}),
]


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("shape", "extra"), NORMALIZED, ids=range(len(NORMALIZED)))
def test_cpu_normalisation_and_dtype(tmp_path: Path, shape, extra, out_dtype) -> None:
    channels = 1 if len(shape) == 2 else min(shape[0], shape[-1])
    mean, std = (100.0, 120.0, 90.0)[:channels], (50.0, 60.0, 70.0)[:channels]
    aug = PairAugment(normalize_mean=mean, normalize_std=std, out_dtype=out_dtype, **extra)
    a, b, labels = _data(16, shape, "uint8")
    path = _file(tmp_path, a, b, labels)
    loader = make_loader(
        path, batch_size=16, order="sequential", seed=SEED, augment=aug, device="cpu"
    )
    xa, xb, ids = (t.clone() for t in next(iter(loader)))
    lay = image_axes(ArraySpec(shape, "uint8"))
    assert xa.dtype == getattr(torch, out_dtype)
    assert tuple(xa.shape[1:]) == aug.output_shape(lay)
    # float32's rounding, or half an ulp of float16 (2**-11) and bfloat16 (2**-8), plus a
    # little: rounding toward zero (a whole ulp) would not pass.
    tol = {"float32": 1e-6, "float16": 6e-4, "bfloat16": 4.5e-3}[out_dtype]
    for x, src, tag in ((xa, a, 0), (xb, b, 1)):
        for i, sid in enumerate(ids.tolist()):
            img, tie = src[sid], False
            if aug.resizes:
                prm = ref.params(aug, lay, SEED, 0, sid, tag)
                exact = ref.resized(img, lay, aug, prm)
                img, tie = ref.round_uint8(exact).astype(np.uint8), near_tie(exact)
            elif aug.has_geometry:
                img = ref.geometry(img, lay, aug, ref.params(aug, lay, SEED, 0, sid, tag))
            exact = ref.photometric(img, lay, aug, (SEED, 0, sid, tag))
            q, tie = ref.round_uint8(exact), tie | near_tie(exact)
            got = x[i].float().numpy()

            def close(v: np.ndarray, got=got) -> np.ndarray:
                want = ref.normalize(v, lay, aug)
                return np.abs(got - want) <= tol * (1 + np.abs(want))

            # Only a rounding tie (resize, photometric) may move q, by one level.
            assert close(q)[~tie].all()
            assert (close(q) | close(q - 1) | close(q + 1)).all()


def test_cpu_normalisation_runs_in_the_decoder_and_gpu_keeps_it() -> None:
    schema = PairSchema(ArraySpec((3, 8, 8), "uint8"), ArraySpec((3, 8, 8), "uint8"))
    aug = PairAugment(normalize_mean=(1.0,) * 3, normalize_std=(2.0,) * 3, out_dtype="bfloat16")
    cpu = place_ops(aug, schema, on_cpu=True)
    assert cpu.fused and cpu.cpu_output and cpu.output_dtype == "bfloat16"
    assert [type(op) for op in device_ops(aug, "A", schema, cpu)] == [AsBFloat16]
    gpu = place_ops(aug, schema, on_cpu=False)
    assert not gpu.cpu_output and gpu.output_dtype == "uint8"
    assert [type(op) for op in device_ops(aug, "A", schema, gpu)] == [NormalizeConvert]
    floats = PairSchema(ArraySpec((3, 8, 8), "float32"), ArraySpec((3, 8, 8), "float32"))
    assert not place_ops(aug, floats, on_cpu=True).fused


def test_fused_pipeline_reproducible_across_threads_runs_and_caches(tmp_path: Path) -> None:
    aug = PairAugment(
        resized_crop=(8, 8),
        crop_scale=(0.35, 1.0),
        hflip=0.5,
        brightness=0.2,
        contrast=0.2,
        brightness_paired=False,
        contrast_paired=False,
        noise_std=3.0,
        normalize_mean=(120.0, 110.0, 100.0),
        normalize_std=(60.0, 60.0, 60.0),
        out_dtype="float16",  # bfloat16 bits come from the same kernel; numpy has no bfloat16
    )
    a, b, labels = _data(96, (3, 16, 16), "uint8")
    path = _file(tmp_path, a, b, labels)
    runs = [
        _batches(path, aug, epoch=2, threads=1),
        _batches(path, aug, epoch=2, threads=2),
        _batches(path, aug, epoch=2, threads=2),
        _batches(path, aug, epoch=2, threads=2, order="random", bs=7, os_cache=False),
    ]
    for other in runs[1:]:
        for x, y in zip(runs[0], other):
            assert x.tobytes() == y.tobytes()
    assert runs[0][0].tobytes() != _batches(path, aug, epoch=3)[0].tobytes()


def test_mixed_dtypes_take_the_separate_ops(tmp_path: Path) -> None:
    """A uint8 and B float32: no fused decoder; the CPU ops follow the same definitions."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (16, 3, 10, 10), dtype=np.uint8)
    b = rng.standard_normal((16, 3, 10, 10)).astype(np.float32) * 50
    path = tmp_path / "mixed.beton"
    write_pairs(ArraySource(a, b, np.arange(16)), path, page_size=1 << 16, progress=False)
    # No contrast: its mean would carry a resize tie of one pixel into every pixel.
    aug = PairAugment(
        resized_crop=(6, 6),
        crop_scale=(0.3, 1.0),
        brightness=0.3,
        noise_std=2,
        value_range=(-400, 400),
    )
    xa, xb, ids = _batches(path, aug, epoch=1)
    lay = image_axes(ArraySpec((3, 10, 10), "uint8"))
    for sid in ids:
        prm = ref.params(aug, lay, SEED, 1, sid, 0)
        exact = ref.resized(a[sid], lay, aug, prm)
        img_a = ref.round_uint8(exact).astype(np.uint8)
        want = ref.photometric(img_a, lay, aug, (SEED, 1, sid, 0))
        assert_close_to(xa[sid], want, "uint8", ties=near_tie(exact))
        img_b = ref.resized(b[sid], lay, aug, prm).astype(np.float32)
        assert_close_to(xb[sid], ref.photometric(img_b, lay, aug, (SEED, 1, sid, 1)), "float32")


def test_float16_and_bfloat16_bits_round_to_nearest_even() -> None:
    import numba as nb

    from ffcv_pairs.kernels.floatbits import bfloat16_bits, float16_bits

    @nb.njit
    def bits(x, f16, bf16):  # pragma: no cover - JIT
        for j in range(x.shape[0]):
            f16[j], bf16[j] = float16_bits(x[j]), bfloat16_bits(x[j])

    rng = np.random.default_rng(0)
    ties16 = (np.arange(1, 200, dtype=np.float32) + 0.5) * np.float32(2.0**-10)  # halfway
    ties_bf = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 3 + 2.0**-7], dtype=np.float32)
    x = np.concatenate(
        [
            rng.standard_normal(20000).astype(np.float32) * 100,
            rng.standard_normal(2000).astype(np.float32) * 1e-6,  # float16 subnormals
            ties16,
            ties_bf,
            np.array([0.0, -0.0, 65504.0, 1e6, -np.inf], dtype=np.float32),
        ]
    )
    f16, bf16 = np.empty(len(x), np.uint16), np.empty(len(x), np.uint16)
    bits(x, f16, bf16)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(f16, x.astype(np.float16).view(np.uint16))
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bf16, want)
