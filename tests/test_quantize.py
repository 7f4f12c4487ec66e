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
from ffcv_pairs.format.schema import NOTE_OFFSET, Quantization
from ffcv_pairs.format.sidecar import manifest_path
from ffcv_pairs.kernels.fused import fused_pairs, fused_pairs_serial
from ffcv_pairs.write.sources import SourceError

LO, HI = -1.0, 3.0
STEP = (HI - LO) / 255


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
        "max_abs_error": STEP / 2,
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
    assert "quantized from [-1, 3], max abs error 0.00784 (half a step)" in line
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
