"""Floats of a declared range stored as uint8 (``--quantize uint8 --range LO,HI``), and read
back in that range: the codes, the note in the `.beton`, the loader's dequantization
(through the normalisation), ``verify --against``, and every refusal by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_per_sample

from ffcv_pairs import ArraySource, BetonError, PairAugment, make_loader, write_pairs
from ffcv_pairs.cli import main, write_main
from ffcv_pairs.format.reader import PairReader
from ffcv_pairs.format.schema import NOTE_OFFSET, ArraySpec, Jpeg, PairSchema, Quantization
from ffcv_pairs.format.sidecar import manifest_path
from ffcv_pairs.kernels.fused import fused_pairs, fused_pairs_serial
from ffcv_pairs.write.sources import SourceError

LO, HI = -1.0, 3.0
STEP = (HI - LO) / 255
EPS32 = float(np.finfo(np.float32).eps)


def bound(lo: float, hi: float) -> float:
    """The error a float32 read-back may show: half a step, plus four float32 roundings
    (shift, scale, difference, product) of values up to ``max(|lo|, |hi|)``."""
    return (hi - lo) / 255 / 2 + 4 * (EPS32 / 2) * max(abs(lo), abs(hi))


def floats(n: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Floats in [LO, HI], with both ends and a few exact half steps among them."""
    x = np.random.default_rng(seed).uniform(LO, HI, (n, *shape)).astype(np.float32)
    x.reshape(n, -1)[:, :4] = [LO, HI, LO + 0.5 * STEP, LO + 100.5 * STEP]
    return x


def written(tmp_path: Path, a: np.ndarray, b: np.ndarray, **kwargs) -> Path:
    path = tmp_path / "q.beton"
    labels = np.arange(len(a))
    write_pairs(
        ArraySource(a, b, labels),
        path,
        quantize="uint8",
        quantize_range=(LO, HI),
        page_size=1 << 14,
        progress=False,
        workers=1,
        **kwargs,
    )
    return path


def batches(path: Path, **kwargs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    loader = make_loader(
        path, batch_size=8, order="sequential", device="cpu", drop_last=False, **kwargs
    )

    def arr(t: torch.Tensor) -> np.ndarray:
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()

    xa, xb, ids = zip(*((arr(x), arr(y), i.numpy()) for x, y, i in loader))
    return np.concatenate(xa), np.concatenate(xb), np.concatenate(ids)


@pytest.mark.parametrize("shape", [(3, 6, 5), (6, 5, 3), (1, 6, 5), (6, 5)], ids=str)
def test_floats_come_back_within_half_a_step(tmp_path: Path, shape) -> None:
    a, b = floats(24, shape), floats(24, shape, seed=1)
    path = written(tmp_path, a, b)
    xa, xb, ids = batches(path)
    assert xa.dtype == xb.dtype == np.float32
    q = Quantization(LO, HI)
    for got, want in ((xa, a[ids]), (xb, b[ids])):
        err = np.abs(got.astype(np.float64) - want)
        assert err.max() <= q.max_error * (1 + 1e-5), err.max()
        assert err.max() > q.max_error * 0.9  # the half steps: the bound is reached
        ulp = 4 * np.finfo(np.float32).eps * max(abs(LO), abs(HI))  # float32 normalisation
        assert got.min() >= LO - ulp and got.max() <= HI + ulp
    codes, _, ids = batches(path, dequantize=False)
    assert codes.dtype == np.uint8
    np.testing.assert_array_equal(codes, q.encode(a[ids]))
    np.testing.assert_allclose(q.decode(codes), xa, rtol=0, atol=1e-6)


def test_normalisation_is_given_in_the_floats_units(tmp_path: Path) -> None:
    a = floats(16, (3, 4, 4))
    path = written(tmp_path, a, a)
    mean, std = (0.5, 1.0, -0.5), (2.0, 0.5, 1.0)
    before = {k: set(k.overloads) for k in (fused_pairs, fused_pairs_serial)}
    for out_dtype, tol in (("float32", 1e-5), ("float16", 4e-3), ("bfloat16", 3e-2)):
        aug = PairAugment(normalize_mean=mean, normalize_std=std, out_dtype=out_dtype)
        xa, _, ids = batches(path, augment=aug)
        m, s = (np.array(v, np.float64)[:, None, None] for v in (mean, std))
        want = (a[ids] - m) / s
        bound = Quantization(LO, HI).max_error / s.min() + tol * np.abs(want).max()
        assert np.abs(xa.astype(np.float64) - want).max() <= bound
    for kernel, seen in before.items():  # one compiled kernel writes every output dtype
        assert len(set(kernel.overloads) - seen) <= 1, kernel.__name__


def test_geometry_moves_the_codes_of_a_and_b_together(tmp_path: Path) -> None:
    a = floats(16, (3, 8, 8))
    path = written(tmp_path, a, a.copy())
    aug = PairAugment(hflip=0.5, crop=(6, 6), crop_padding=1, rot90=True)
    xa, xb, _ = batches(path, augment=aug)
    assert xa.shape == (16, 3, 6, 6) and xa.dtype == np.float32
    np.testing.assert_array_equal(xa, xb)


def test_the_file_says_it_is_quantized_and_upstream_reads_the_codes(tmp_path: Path) -> None:
    from conftest import read_upstream

    a = floats(10, (3, 4, 4))
    path = written(tmp_path, a, a)
    reader = PairReader(path)
    assert reader.schema.quantized == Quantization(LO, HI)
    assert reader.schema.a.dtype == "uint8"
    side = json.loads(manifest_path(path).read_text())
    assert side["schema"]["A"]["quantize"] == {
        "dtype": "uint8",
        "range": [LO, HI],
        "max_abs_error": bound(LO, HI),
    }
    up_a, _, labels = read_upstream(path)
    np.testing.assert_array_equal(up_a, Quantization(LO, HI).encode(a[labels]))


def test_a_note_this_version_cannot_read_is_refused_by_name(tmp_path: Path) -> None:
    a = floats(10, (3, 4, 4))
    path = written(tmp_path, a, a)
    reader = PairReader(path)
    at = reader.field_descriptors.dtype.fields["arguments"][1]  # offset within one row
    offset = reader.field_descriptors.itemsize * 0 + at + NOTE_OFFSET
    from ffcv.types import HeaderType

    with open(path, "r+b") as f:
        f.seek(HeaderType.itemsize + offset)
        f.write(b"something-else/9 {}")
    with pytest.raises(BetonError, match=r"q\.beton: field 'A': unknown note .*something-else"):
        PairReader(path)


def test_a_and_b_with_different_ranges_are_refused(tmp_path: Path) -> None:
    from ffcv.types import HeaderType

    a = floats(10, (3, 4, 4))
    path = written(tmp_path, a, a)
    reader = PairReader(path)
    row = reader.field_descriptors.itemsize  # B is the second field
    at = HeaderType.itemsize + row + reader.field_descriptors.dtype.fields["arguments"][1]
    note = reader.field_descriptors[1]["arguments"].tobytes()[NOTE_OFFSET:].rstrip(b"\0")
    changed = note.replace(b"3.0", b"4.0")
    assert changed != note and len(changed) == len(note)
    with open(path, "r+b") as f:
        f.seek(at + NOTE_OFFSET)
        f.write(changed)
    with pytest.raises(BetonError, match=r"q\.beton: fields 'A' and 'B' note different quant"):
        PairReader(path)


def test_out_of_range_and_nan_are_refused_naming_the_value(tmp_path: Path) -> None:
    a = floats(12, (3, 4, 4))
    bad = a.copy()
    bad[7, 1, 2, 3] = 3.5
    with pytest.raises(SourceError, match=r"value 3\.5 at index \(7, 1, 2, 3\) is outside .*-1, 3"):
        written(tmp_path, a, bad)
    bad[7, 1, 2, 3] = np.nan
    with pytest.raises(SourceError, match=r"value nan at index \(7, 1, 2, 3\) is outside"):
        written(tmp_path, a, bad)
    assert not (tmp_path / "q.beton").exists()


def test_integer_images_are_not_quantized(tmp_path: Path) -> None:
    a = np.zeros((4, 3, 4, 4), np.uint8)
    with pytest.raises(SourceError, match="quantize stores floating-point images, got uint8"):
        written(tmp_path, a, a)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"quantize": "uint8"}, "quantize uint8 needs quantize_range LO,HI"),
        ({"quantize_range": (0, 1)}, "quantize_range applies to quantize uint8"),
        ({"quantize": "int8", "quantize_range": (0, 1)}, "quantize must be one of"),
        ({"quantize": "uint8", "quantize_range": (1, 1)}, "two finite numbers LO < HI, got"),
        ({"quantize": "uint8", "quantize_range": (0, np.inf)}, r"quantize_range\[1\] must be a"),
        ({"quantize": "uint8", "quantize_range": (0, 1, 2)}, "quantize_range"),
        (
            {"quantize": "uint8", "quantize_range": (0, 1), "store_dtype": "float16"},
            "quantize uint8 and store dtype 'float16': choose one",
        ),
    ],
)
def test_bad_quantize_arguments_are_named(tmp_path: Path, kwargs, needle) -> None:
    a = floats(4, (3, 4, 4))
    with pytest.raises(ValueError, match=needle):
        write_pairs(ArraySource(a, a, np.arange(4)), tmp_path / "x.beton", **kwargs)


def test_an_integer_out_dtype_with_dequantize_is_refused(tmp_path: Path) -> None:
    a = floats(8, (3, 4, 4))
    path = written(tmp_path, a, a)
    with pytest.raises(ValueError, match="out_dtype='uint8' with dequantize"):
        make_loader(path, batch_size=4, augment=PairAugment(out_dtype="uint8"), device="cpu")


def test_the_write_command_quantizes_and_verify_compares_a_fresh_encode(
    tmp_path: Path, capsys
) -> None:
    a, b = floats(20, (3, 5, 5)), floats(20, (3, 5, 5), seed=2)
    src = write_per_sample(tmp_path / "pt", "train", a, b, np.arange(20))
    out = tmp_path / "out"
    argv = [str(src), str(out), "--split", "train", "--no-progress", "--page-size", "4KiB"]
    assert write_main([*argv, "--quantize", "uint8", f"--range={LO},{HI}"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "quantized from [-1, 3], max abs error 0.00784 (half a step, plus float32" in line
    beton = out / "train.beton"
    assert main(["verify", str(beton), "--against", str(src), "--samples", "all"]) == 0
    capsys.readouterr()
    c = a.copy()
    c[13, 0, 0, 0] += STEP  # one code off: a fresh encode differs
    torch.save(torch.from_numpy(c[13]), src / "train_A_images_13.pt")
    assert main(["verify", str(beton), "--against", str(src), "--samples", "all"]) == 1
    assert "sample 13: field 'A' differs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--range", "0,1"], "--range applies to --quantize uint8"),
        (["--quantize", "uint8"], "--quantize uint8 needs --range LO,HI"),
        (["--quantize", "uint8", "--range", "0,x"], "--range must be LO,HI"),
        (["--quantize", "uint8", "--range", "2,1"], "--range must be two finite numbers"),
    ],
)
def test_write_command_refuses_bad_quantize_flags_in_one_line(
    tmp_path: Path, capsys, extra, needle
) -> None:
    a = floats(4, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, a, np.arange(4))
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--no-progress", *extra]
    assert write_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_a_value_outside_the_range_names_the_file(tmp_path: Path, capsys) -> None:
    a = floats(6, (3, 4, 4))
    a[4, 2, 1, 0] = -7.0
    src = write_per_sample(tmp_path / "pt", "train", a, a, np.arange(6))
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"]
    assert write_main([*argv, "--quantize", "uint8", "--range=-1,3"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "train_A_images_4.pt: value -7.0 at index (2, 1, 0) is outside" in err[0], err


# -- ranges float32 cannot resolve, and bounds that hold ------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi", "needle"),
    [
        (-1e308, 1e308, r"\[-1e\+308, 1e\+308\] exceeds float32's largest value"),
        (1e7, 1e7 + 1, r"\[10000000\.0, 10000001\.0\]: its step 0\.003922 is too fine for float32"),
        (1e4, 1e4 + 1, r"\[10000\.0, 10001\.0\]: its step 0\.003922 is too fine for float32"),
        (0.0, 1e-40, r"\[0\.0, 1e-40\]: its step 3\.922e-43 is below float32's smallest normal"),
    ],
)
def test_a_range_float32_cannot_resolve_is_refused_by_name(tmp_path: Path, lo, hi, needle) -> None:
    a = floats(4, (3, 4, 4))
    with pytest.raises(ValueError, match=rf"quantize_range {needle}"):
        write_pairs(
            ArraySource(a, a, np.arange(4)),
            tmp_path / "x.beton",
            quantize="uint8",
            quantize_range=(lo, hi),
        )
    with pytest.raises(ValueError, match=rf"quantize range {needle}"):
        Quantization(lo, hi)
    assert not list(tmp_path.iterdir())


def test_the_write_command_refuses_a_range_float32_cannot_resolve(tmp_path: Path, capsys) -> None:
    a = floats(4, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, a, np.arange(4))
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"]
    for given, needle in (
        ("-1e308,1e308", "--range [-1e+308, 1e+308] exceeds float32's largest value"),
        ("1e7,10000001", "--range [10000000.0, 10000001.0]: its step 0.003922 is too fine"),
    ):
        assert write_main([*argv, "--quantize", "uint8", f"--range={given}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "out" / "train.beton").exists()


def near_half_steps(
    lo: float, hi: float, n: int, shape: tuple[int, ...], seed: int = 3
) -> np.ndarray:
    """float32 in [lo, hi], two thirds of them at or next to a half step (the worst case)."""
    rng = np.random.default_rng(seed)
    step = (hi - lo) / 255
    half = (lo + (rng.integers(0, 255, (n, *shape)) + 0.5) * step).astype(np.float32)
    up, down = np.nextafter(half, np.float32(np.inf)), np.nextafter(half, np.float32(-np.inf))
    worst = np.choose(rng.integers(0, 3, half.shape), [half, up, down])
    x = np.where(rng.random(half.shape) < 2 / 3, worst, rng.uniform(lo, hi, half.shape))
    return x.clip(lo, hi).astype(np.float32)


def test_the_stated_bound_holds_far_from_zero(tmp_path: Path) -> None:
    """At 1000, float32's rounding of the read-back adds to the half step: the bound the
    sidecar and the summary state includes it, and the data reaches past the half step."""
    lo, hi = 1000.0, 1001.0
    a, b = near_half_steps(lo, hi, 32, (3, 8, 8)), near_half_steps(lo, hi, 32, (3, 8, 8), 4)
    path = tmp_path / "far.beton"
    report = write_pairs(
        ArraySource(a, b, np.arange(32)),
        path,
        quantize="uint8",
        quantize_range=(lo, hi),
        page_size=1 << 14,
        progress=False,
        workers=1,
    )
    stated = json.loads(manifest_path(path).read_text())["schema"]["A"]["quantize"]
    xa, xb, ids = batches(path)
    err = max(np.abs(xa.astype(np.float64) - a[ids]).max(), np.abs(xb - b[ids]).max())
    assert err <= stated["max_abs_error"], (err, stated)
    assert err > (hi - lo) / 255 / 2  # half a step alone is not a bound here
    assert stated["max_abs_error"] == pytest.approx(bound(lo, hi), rel=1e-12)
    assert f"max abs error {bound(lo, hi):.3g}" in report.summary()


def test_jpeg_of_quantized_codes_states_no_bound(tmp_path: Path) -> None:
    lo, hi = 0.0, 1.0
    a = np.random.default_rng(4).uniform(lo, hi, (8, 3, 16, 16)).astype(np.float32)
    path = tmp_path / "jq.beton"
    report = write_pairs(
        ArraySource(a, a.copy(), np.arange(8)),
        path,
        quantize="uint8",
        quantize_range=(lo, hi),
        codec="jpeg",
        quality=90,
        page_size=1 << 14,
        progress=False,
        workers=1,
    )
    stated = json.loads(manifest_path(path).read_text())["schema"]["A"]["quantize"]
    assert stated["max_abs_error"] is None and stated["error"] == "JPEG: lossy, see PSNR"
    assert "max abs error" not in report.summary()
    assert "JPEG: lossy, see PSNR" in report.summary()
    xa, _, ids = batches(path)
    assert np.abs(xa - a[ids]).max() > Quantization(lo, hi).max_error  # no bound to claim
    q, shape = Quantization(lo, hi), (3, 16, 16)
    mixed = PairSchema(ArraySpec(shape, "uint8", q, Jpeg(90)), ArraySpec(shape, "uint8", q))
    text = mixed.describe()  # A=jpeg,B=raw: the bound is B's alone
    assert "A=uint8[3, 16, 16] as JPEG quality 90 quantized from [0, 1], then JPEG: lossy" in text
    assert text.count("max abs error") == 1 and "B=uint8[3, 16, 16] quantized from" in text


# -- the units of the normalisation and the noise, and A and B of other channels ------------


def unit_file(tmp_path: Path, a: np.ndarray, b: np.ndarray) -> Path:
    path = tmp_path / "unit.beton"
    write_pairs(
        ArraySource(a, b, np.arange(len(a))),
        path,
        quantize="uint8",
        quantize_range=(0.0, 1.0),
        page_size=1 << 14,
        progress=False,
        workers=1,
    )
    return path


def test_a_mean_in_other_units_is_refused_naming_it(tmp_path: Path) -> None:
    a = np.random.default_rng(5).uniform(0, 1, (8, 3, 4, 4)).astype(np.float32)
    path = unit_file(tmp_path, a, a)
    readme = PairAugment(normalize_mean=(123.7, 116.3, 103.5), normalize_std=(58.4, 57.1, 57.4))
    with pytest.raises(ValueError, match=r"normalize_mean\[0\]=123\.7 lies outside \[0, 1\]"):
        make_loader(path, batch_size=4, augment=readme, device="cpu")
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    xa, _, ids = batches(path, augment=PairAugment(normalize_mean=mean, normalize_std=std))
    m, s = (np.array(v)[:, None, None] for v in (mean, std))
    want = (a[ids] - m) / s
    assert np.abs(xa - want).max() <= Quantization(0, 1).max_error / s.min() + 1e-5
    got, _, ids = batches(path, augment=readme, dequantize=False)  # the codes: 0..255
    m, s = (np.array(v)[:, None, None] for v in (readme.normalize_mean, readme.normalize_std))
    np.testing.assert_allclose(got, (Quantization(0, 1).encode(a[ids]) - m) / s, atol=1e-5)
    uint8 = tmp_path / "u8.beton"
    u8 = np.zeros((8, 3, 4, 4), np.uint8)
    write_pairs(ArraySource(u8, u8, np.arange(8)), uint8, progress=False, workers=1)
    wrong = PairAugment(normalize_mean=(128.0, 300.0, 0.0), normalize_std=(1.0,) * 3)
    with pytest.raises(ValueError, match=r"normalize_mean\[1\]=300 lies outside \[0, 255\]"):
        make_loader(uint8, batch_size=4, augment=wrong, device="cpu")
    unit = PairAugment(normalize_mean=mean, normalize_std=std)  # for 0..1 values, not 0..255
    with pytest.raises(
        ValueError,
        match=r"^augment normalize_mean=\(0.485, 0.456, 0.406\) and normalize_std=\(0.229, "
        r"0.224, 0.225\) are in \[0, 1\] units, but A's uint8 values run 0..255: give them x255",
    ):
        make_loader(uint8, batch_size=4, augment=unit, device="cpu")
    for fine in (readme, PairAugment(normalize_mean=(0.0,), normalize_std=(1.0,))):
        make_loader(uint8, batch_size=4, augment=fine, device="cpu")


def test_noise_std_is_in_the_floats_units(tmp_path: Path) -> None:
    a = np.full((16, 3, 8, 8), 0.5, np.float32)  # far from the clamp at 0 and 1
    path = unit_file(tmp_path, a, a)
    xa, xb, _ = batches(path, augment=PairAugment(noise_std=0.05))
    for got in (xa, xb):
        spread = float(np.std(got - Quantization(0, 1).decode(Quantization(0, 1).encode(a))))
        assert 0.045 < spread < 0.055, spread


@pytest.mark.parametrize("b_shape", [(1, 6, 5), (6, 5)], ids=str)
def test_a_of_three_channels_and_b_of_one_load_with_defaults(tmp_path: Path, b_shape) -> None:
    a, b = floats(12, (3, 6, 5)), floats(12, b_shape, seed=6)
    path = written(tmp_path, a, b)
    xa, xb, ids = batches(path)
    assert xa.shape == (12, 3, 6, 5) and xb.shape == (12, *b_shape)
    for got, want in ((xa, a[ids]), (xb, b[ids])):
        assert np.abs(got.astype(np.float64) - want).max() <= bound(LO, HI)
    one = PairAugment(normalize_mean=(0.5,), normalize_std=(2.0,))  # one value: every channel
    xa, xb, ids = batches(path, augment=one)
    for got, want in ((xa, a[ids]), (xb, b[ids])):
        assert np.abs(got - (want - 0.5) / 2).max() <= bound(LO, HI) / 2 + 1e-6
