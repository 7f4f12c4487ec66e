"""Every message says what actually happened: the file, field or value, and what is wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_arrays, write_per_sample, write_small_beton
from PIL import Image

from ffcv_pairs import ArraySource, BetonError, make_loader, write_pairs
from ffcv_pairs.cli import main, write_main
from ffcv_pairs.format.reader import PairReader
from ffcv_pairs.format.sidecar import manifest_path
from ffcv_pairs.inspection import NONFINITE_RGB, preview_png
from ffcv_pairs.write.source_kinds import open_source
from ffcv_pairs.write.sources import SourceError

MAGENTA = list(NONFINITE_RGB)


# -- zero-padding -----------------------------------------------------------------------


def test_mis_padded_name_is_the_one_named(tmp_path: Path) -> None:
    """``train_A_images_5.pt`` renamed ``..._05.pt`` among 14 unpadded names."""
    a, b, labels = make_arrays(14, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    (src / "train_A_images_5.pt").rename(src / "train_A_images_05.pt")
    with pytest.raises(SourceError) as info:
        open_source(src, "train")
    msg = str(info.value)
    assert msg.startswith(f"{src / 'train_A_images_05.pt'}: index 5 is zero-padded to 2 digits")
    assert "13 of the 14 train_A_images_*.pt files are not zero-padded" in msg, msg
    assert "\n" not in msg


def test_mis_padded_name_exits_2_naming_it(tmp_path: Path, capsys) -> None:
    a, b, labels = make_arrays(14, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    (src / "train_labels_5.pt").rename(src / "train_labels_05.pt")
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"]
    assert write_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train_labels_05.pt: index 5 is zero-padded" in err, err


# -- a directory where a .beton should be -----------------------------------------------


def test_directory_is_named_a_directory(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "train.beton"
    folder.mkdir()
    with pytest.raises(BetonError, match=r"train\.beton: is a directory, not a \.beton file"):
        make_loader(folder, batch_size=4)
    with pytest.raises(BetonError, match="is a directory"):
        PairReader(folder)
    for command in ("inspect", "verify"):
        assert main([command, str(folder)]) == 2, command
        out, err = capsys.readouterr()
        assert err == f"error: {folder}: is a directory, not a .beton file\n", (command, err)
        assert "no such file" not in out + err


def test_missing_file_is_misuse_for_verify(tmp_path: Path, capsys) -> None:
    assert main(["verify", str(tmp_path / "gone.beton")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'gone.beton'}: no such file\n"


# -- inspect --preview ------------------------------------------------------------------


@pytest.mark.parametrize("k", ["0", "-3"])
@pytest.mark.parametrize("with_out", [False, True])
def test_preview_below_one_is_refused(tmp_path: Path, capsys, k: str, with_out: bool) -> None:
    path, _, _ = write_small_beton(tmp_path, n=20)
    png = tmp_path / "p.png"
    argv = ["inspect", str(path), "--preview", k] + (["--out", str(png)] if with_out else [])
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err == f"error: --preview K must be at least 1 (pairs to draw), got {k}\n"
    assert out == "" and not png.exists()


def test_out_without_preview_is_refused(tmp_path: Path, capsys) -> None:
    path, _, _ = write_small_beton(tmp_path, n=20)
    assert main(["inspect", str(path), "--out", str(tmp_path / "p.png")]) == 2
    assert "goes with --preview K" in capsys.readouterr().err


def test_preview_beyond_the_file_says_what_it_drew(tmp_path: Path, capsys) -> None:
    n = 200
    path, _, _ = write_small_beton(tmp_path, n=n, shape=(3, 4, 4))
    png = tmp_path / "p.png"
    assert main(["inspect", str(path), "--preview", "1000", "--out", str(png)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == f"preview:      {n} pairs (A | B, all the file has (1000 asked for)) in {png}"
    rows = _grid_rows(png, image_h=4)
    assert rows == n  # 200 rows drawn, as the line says


def test_preview_within_the_file_draws_k(tmp_path: Path, capsys) -> None:
    path, _, _ = write_small_beton(tmp_path, n=50, shape=(3, 4, 4))
    png = tmp_path / "p.png"
    assert main(["inspect", str(path), "--preview", "7", "--out", str(png)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"preview:      7 pairs (A | B) in {png}"
    assert _grid_rows(png, image_h=4) == 7


def _grid_rows(png: Path, image_h: int) -> int:
    """Rows of the preview grid: each is ``image_h`` pixels and a 4-pixel white gap."""
    with Image.open(png) as image:
        height = image.size[1]
    scale = max(1, 96 // image_h)  # rows of h pixels are scaled up to 96
    return height // (scale * (image_h + 4))


# -- labels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "shape"),
    [(torch.tensor(3.0), "()"), (torch.tensor([3.0]), "(1,)"), (torch.zeros(2, 1), "(2, 1)")],
)
def test_bad_label_reports_its_real_shape(tmp_path: Path, capsys, label, shape: str) -> None:
    a, b, labels = make_arrays(6, (3, 4, 4))
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    torch.save(label, src / "train_labels_4.pt")
    argv = [str(src), str(tmp_path / "out"), "--split", "train", "--no-progress"]
    assert write_main(argv) == 2
    err = capsys.readouterr().err
    want = f"{src / 'train_labels_4.pt'}: label must be an integer scalar, got {label.dtype}"
    assert want.replace("torch.", "") + f" of shape {shape}" in err, err


# -- verify without a sidecar -----------------------------------------------------------


def test_verify_without_sidecar_says_nothing_was_checked(tmp_path: Path, capsys) -> None:
    path, _, _ = write_small_beton(tmp_path, n=30)
    manifest_path(path).unlink()
    assert main(["verify", str(path)]) == 3
    out = capsys.readouterr().out
    assert out == (
        f"NOT CHECKED: {path}: no sidecar at {path}.json, so no checksums to check; "
        "--against SRC_DIR compares samples\n"
    )


def test_verify_without_sidecar_against_sources_checks_samples(tmp_path: Path, capsys) -> None:
    a, b, labels = make_arrays(30, (3, 4, 4), seed=1)
    src = write_per_sample(tmp_path / "pt", "train", a, b, labels)
    path = tmp_path / "train.beton"
    write_pairs(open_source(src, "train"), path, page_size=4096, progress=False)
    manifest_path(path).unlink()
    assert main(["verify", str(path), "--against", str(src), "--samples", "all"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"checksums: NOT CHECKED: no sidecar at {path}.json, so no checksums to check"
    assert out[1].startswith("samples: OK (30 of 30") and out[2] == f"OK: {path} (samples only)"


def test_verify_help_documents_exit_3(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "3 nothing could be checked (no sidecar and no --against)" in text


def test_inspect_without_sidecar_names_where_it_looked(tmp_path: Path, capsys) -> None:
    path, _, _ = write_small_beton(tmp_path, n=30)
    manifest_path(path).unlink()
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"manifest:     none (no sidecar at {path}.json): checksums unavailable" in text


# -- previews of non-finite floats ------------------------------------------------------


def _float_beton(tmp_path: Path, a: np.ndarray, b: np.ndarray) -> Path:
    path = tmp_path / "f.beton"
    labels = np.arange(len(a), dtype=np.int64)
    write_pairs(ArraySource(a, b, labels), path, page_size=4096, workers=1, progress=False)
    return path


def _cells(png: Path, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """The A and B images of the first grid row, one value per stored pixel (HxWx3)."""
    with Image.open(png) as image:
        grid = np.asarray(image.convert("RGB"))
    scale = max(1, 96 // h)
    cells = grid[::scale, ::scale]
    return cells[:h, :w], cells[:h, w + 4 : 2 * w + 4]


def _minmax_u8(img: np.ndarray) -> np.ndarray:
    """The definition at the finite pixels: min-max scaled to 0..255 (truncated), grey to RGB."""
    finite = img[np.isfinite(img)]
    lo, hi = float(finite.min()), float(finite.max())
    scaled = (np.where(np.isfinite(img), img, lo).astype(np.float64) - lo) / (hi - lo) * 255
    return np.repeat(scaled.astype(np.uint8)[..., None], 3, axis=-1)


def test_preview_marks_nan_and_inf_and_scales_by_the_finite(tmp_path: Path) -> None:
    h, w = 4, 6
    rng = np.random.default_rng(7)
    a = rng.uniform(-3.0, 5.0, (1, h, w)).astype(np.float32)
    b = rng.uniform(-3.0, 5.0, (1, h, w)).astype(np.float32)
    a[0, 2, 3] = np.nan
    b[0, 0, 1], b[0, 3, 5] = np.inf, -np.inf
    path = _float_beton(tmp_path, a, b)
    drawn = preview_png(PairReader(path), 1, tmp_path / "p.png")
    assert drawn.pairs == 1 and drawn.nonfinite == 3
    got_a, got_b = _cells(drawn.path, h, w)
    for got, img in ((got_a, a[0]), (got_b, b[0])):
        bad = ~np.isfinite(img)
        assert (got[bad] == MAGENTA).all()
        want = _minmax_u8(img)
        assert np.abs(got[~bad].astype(int) - want[~bad]).max() <= 1
        assert got[~bad].min() == 0 and got[~bad].max() >= 254  # not black: the full range


def test_preview_of_all_non_finite_images_is_all_magenta(tmp_path: Path, capsys) -> None:
    h, w = 4, 6
    a = np.full((2, h, w), np.nan, dtype=np.float32)
    b = np.full((2, h, w), np.inf, dtype=np.float32)
    b[:, ::2] = -np.inf
    path = _float_beton(tmp_path, a, b)
    png = tmp_path / "p.png"
    assert main(["inspect", str(path), "--preview", "2", "--out", str(png)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == (
        f"preview:      2 pairs (A | B) in {png}; {4 * h * w} pixels holding NaN or inf "
        "drawn magenta"
    )
    got_a, got_b = _cells(png, h, w)
    assert (got_a == MAGENTA).all() and (got_b == MAGENTA).all()


def test_preview_of_finite_uint8_is_unchanged(tmp_path: Path) -> None:
    a, b, _ = make_arrays(1, (4, 6), seed=3)
    path = tmp_path / "u.beton"
    write_pairs(ArraySource(a, b, np.zeros(1, np.int64)), path, page_size=4096, progress=False)
    drawn = preview_png(PairReader(path), 1, tmp_path / "p.png")
    got_a, got_b = _cells(drawn.path, 4, 6)
    assert drawn.nonfinite == 0
    np.testing.assert_array_equal(got_a[..., 0], a[0])  # already 0..255: drawn as stored
    np.testing.assert_array_equal(got_b[..., 0], b[0])


# -- misuse of inspect and verify: one line, exit 2, nothing printed before ------------------


def test_inspect_out_that_is_a_directory(tmp_path: Path, capsys) -> None:
    path, _, _ = write_small_beton(tmp_path, n=20)
    folder = tmp_path / "pngs"
    folder.mkdir()
    assert main(["inspect", str(path), "--preview", "2", "--out", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert err == f"error: --out must name a file, got '{folder}', which is a directory\n"
    assert out == ""
    with pytest.raises(ValueError, match="preview_png: out must name a file"):
        preview_png(PairReader(path), 2, folder)


def test_preview_name_without_a_suffix_is_still_a_png(tmp_path: Path) -> None:
    path, _, _ = write_small_beton(tmp_path, n=20)
    drawn = preview_png(PairReader(path), 2, tmp_path / "preview")
    assert drawn.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("samples", ["abc", "1.5", "0"])
def test_verify_samples_not_a_number(tmp_path: Path, capsys, samples: str) -> None:
    path, _, _ = write_small_beton(tmp_path, n=20)
    assert main(["verify", str(path), "--samples", samples]) == 2
    out, err = capsys.readouterr()
    assert err == f"error: --samples must be a positive number or 'all', got '{samples}'\n"
    assert out == ""


def test_verify_seed_below_zero_is_misuse(tmp_path: Path, capsys) -> None:
    """It was numpy's 'expected non-negative integer', naming neither flag nor value."""
    path, a, b = write_small_beton(tmp_path, n=20)
    src = write_per_sample(tmp_path / "pt", "d", a, b, np.arange(20))
    argv = ["verify", str(path), "--against", str(src), "--samples", "2", "--seed=-1"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err == "error: --seed must be a non-negative integer, got -1\n"
    assert out == ""  # refused before any check ran


# -- numpy values read as numbers -------------------------------------------------------


def test_messages_show_numpy_scalars_as_plain_numbers(tmp_path: Path) -> None:
    """``0.89``, never ``np.float32(0.89)``: in an argument check and in a value the writer
    refuses."""
    from ffcv_pairs import PairAugment

    with pytest.raises(TypeError) as info:
        PairAugment(crop=(np.float32(0.89), np.int64(4)))
    assert str(info.value) == "augment crop[0] must be an integer, got 0.89 (float32)"
    path, _, _ = write_small_beton(tmp_path, n=20)
    with pytest.raises(TypeError) as info:
        make_loader(path, batch_size=np.float64(2.5))
    assert str(info.value) == "batch_size must be an integer, got 2.5 (float64)"
    a = np.zeros((4, 3, 4, 4), np.float32)
    a[1, 0, 2, 3] = 0.89
    with pytest.raises(SourceError) as info:
        write_pairs(ArraySource(a, a, np.arange(4)), tmp_path / "x.beton", store_dtype="uint8")
    assert "value 0.89 at index (1, 0, 2, 3) would change when stored as uint8" in str(info.value)
    assert "np." not in str(info.value)


# -- inspect on a quantized file --------------------------------------------------------


def test_inspect_shows_the_quantized_range_and_the_float_output(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(2)
    a = rng.uniform(-1.0, 1.0, (20, 3, 4, 4)).astype(np.float32)
    path = tmp_path / "q.beton"
    source = ArraySource(a, -a, np.arange(20))
    write_pairs(source, path, quantize="uint8", quantize_range=(-1, 1), progress=False)
    assert main(["inspect", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in ("A", "B"):
        line = next(x for x in lines if x.startswith(f"  {name} "))
        want = "uint8 codes [3, 4, 4] (48 bytes), quantized range [-1, 1] -> float32 out"
        assert f"NDArrayField   {want} (max abs error 0.0039" in line, line
