"""Dense labels follow the geometry (ffcv_pairs.augment.dense): tested from definitions
against the image path. An image holding its own pixel coordinates goes through the
images' geometry; a mask holding each pixel's index must land exactly where the image
says its pixel went, and a flow or disparity must change as the image's coordinates do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ffcv_pairs import ArraySource, DenseField, PairAugment, make_loader, write_pairs

H = W = 24
N = 24


def _coordinates(dtype: str) -> np.ndarray:
    """``(N, 3, H, W)``: row index, column index, and 255 (in the image)."""
    y, x = np.mgrid[0:H, 0:W]
    one = np.stack([y, x, np.full((H, W), 255)]).astype(dtype)
    return np.repeat(one[None], N, axis=0)


def _index() -> np.ndarray:
    return np.repeat((np.arange(H * W).reshape(H, W))[None], N, axis=0).astype(np.int32)


def _batches(path: Path, augment: PairAugment, **options) -> list:
    loader = make_loader(path, batch_size=8, order="random", seed=5, augment=augment, **options)
    return list(loader)


GEOMETRIES = {
    "padded crop, flips, turns": dict(
        crop=(20, 20), crop_padding=4, hflip=0.5, vflip=0.5, rot90=True, fill=0
    ),
    "shift, reflect": dict(translate=(5, 7), pad_mode="reflect", hflip=0.5),
    "centre crop, edge": dict(crop=(10, 16), center=True, translate=(3, 3), pad_mode="edge"),
    "resized crop, flips, turns": dict(
        resized_crop=(16, 16), crop_scale=(0.2, 1.0), hflip=0.5, vflip=0.5, rot90=True
    ),
    "resized crop up, shift": dict(resized_crop=(40, 30), crop_scale=(0.1, 0.5), translate=(4, 4)),
}


@pytest.fixture(scope="module")
def coordinate_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A uint8 file whose images hold their own coordinates, with index masks in every
    layout: (H, W) int32, (2, H, W) int16 and (H, W, 2) float32."""
    path = tmp_path_factory.mktemp("dense") / "coords.beton"
    a, index = _coordinates("uint8"), _index()
    both = np.stack([index, index + 1], axis=1)
    source = ArraySource(
        a,
        a,
        index,
        first=both.astype(np.int16),
        last=np.moveaxis(both, 1, -1).astype(np.float32),
    )
    write_pairs(source, path, workers=1, progress=False)
    return path


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_a_mask_of_pixel_indices_lands_where_the_image_says(
    coordinate_file: Path, name: str
) -> None:
    augment = PairAugment(
        **GEOMETRIES[name],
        dense={"label": DenseField("mask", fill=-1), "first": "mask", "last": {"fill": 7}},
    )
    moved = 0
    for batch in _batches(coordinate_file, augment):
        a = batch.A.numpy().astype(np.int64)
        inside = a[:, 2] == 255
        expected = np.where(inside, a[:, 0] * W + a[:, 1], -1)
        np.testing.assert_array_equal(batch.label.numpy(), expected)
        first = batch.first.numpy().astype(np.int64)
        np.testing.assert_array_equal(first[:, 0], np.where(inside, expected, 0))
        np.testing.assert_array_equal(first[:, 1], np.where(inside, expected + 1, 0))
        last = batch.last.numpy().astype(np.int64)
        np.testing.assert_array_equal(last[..., 0], np.where(inside, expected, 7))
        np.testing.assert_array_equal(last[..., 1], np.where(inside, expected + 1, 7))
        assert np.array_equal(batch.A, batch.B)
        moved += expected.shape[1:] != (H, W) or bool((expected != _index()[:8]).any())
    assert moved > 0  # the geometry did move the samples


@pytest.fixture(scope="module")
def flow_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """float32 images of their own (row, column), a flow, a disparity, and index masks."""
    path = tmp_path_factory.mktemp("dense") / "flow.beton"
    rng = np.random.default_rng(8)
    a = _coordinates("float32")[:, :2]
    flow = rng.normal(0, 3, (N, 2, H, W)).astype(np.float32)
    disparity = rng.uniform(1, 9, (N, H, W)).astype(np.float32)
    disparity[:, :3] = 0.0  # invalid pixels: the fill, kept as they are
    source = ArraySource(a, a, flow, disparity=disparity, index=_index())
    write_pairs(source, path, workers=1, progress=False)
    return path


def _jacobian(a: np.ndarray) -> np.ndarray:
    """d(output position) / d(stored position) per sample, from an image of stored
    coordinates (row, column) after the images' geometry: the inverse of their slopes
    across the output's central pixels (away from clamped edges)."""
    oh, ow = a.shape[2:]
    cy, cx = oh // 2, ow // 2
    d_row = a[:, :, cy + 1, cx] - a[:, :, cy, cx]  # d(stored y, x) per output row
    d_col = a[:, :, cy, cx + 1] - a[:, :, cy, cx]  # per output column
    back = np.stack([d_col[:, ::-1], d_row[:, ::-1]], axis=2)  # [[dx/dx', dx/dy'], [dy/...]]
    return np.linalg.inv(back)  # rows (x', y'), columns (x, y)


def _with_ids(path: Path, augment: PairAugment):
    """Each batch, and the sample ids of its rows."""
    loader = make_loader(path, batch_size=8, order="random", seed=5, augment=augment)
    for batch in loader:
        yield batch, loader.last_batch_ids.copy()


@pytest.mark.parametrize(
    "name", ["padded crop, flips, turns", "resized crop, flips, turns", "shift, reflect"]
)
def test_flow_and_disparity_change_as_the_image_coordinates_do(flow_file: Path, name: str) -> None:
    """A flow at an output pixel is the stored flow at the pixel it came from, times the
    geometry's Jacobian (read off the coordinate image); a disparity is its horizontal
    part; invalid pixels (the fill, 0) stay 0; quarter turns are refused for disparity."""
    rng = np.random.default_rng(8)
    flow = rng.normal(0, 3, (N, 2, H, W)).astype(np.float32)
    disparity = rng.uniform(1, 9, (N, H, W)).astype(np.float32)
    disparity[:, :3] = 0.0
    geometry = dict(GEOMETRIES[name])
    rot90 = geometry.pop("rot90", False)
    dense = {"label": "flow", "index": {"fill": -1}}
    turned = PairAugment(**geometry, rot90=rot90, dense={**dense, "disparity": "mask"})
    flat = PairAugment(**geometry, dense={**dense, "disparity": {"kind": "disparity"}})
    for augment in (turned, flat):
        for batch, ids in _with_ids(flow_file, augment):
            index = batch.index.numpy()
            inside = index >= 0
            jac = _jacobian(batch.A.numpy())
            rows, ys, xs = ids[:, None, None], index // W, index % W
            want = np.einsum("nij,nhwj->nihw", jac, flow[rows, :, ys, xs])
            got = batch.label.numpy()
            for c in range(2):
                np.testing.assert_allclose(got[:, c][inside], want[:, c][inside], atol=1e-4)
            if augment is flat:
                stored = disparity[rows, ys, xs]
                want_d = jac[:, 0, 0, None, None] * stored
                np.testing.assert_allclose(batch.disparity.numpy()[inside], want_d[inside])
                assert (batch.disparity.numpy()[inside & (stored == 0)] == 0).all()


@pytest.mark.parametrize(
    ("dense", "options", "message"),
    [
        (
            {"disparity": "disparity"},
            {"rot90": True},
            r"'disparity' \(float32\[24, 24\]\): a quarter",
        ),
        ({"index": "flow"}, {}, r"'index' \(int32\[24, 24\]\) of kind 'flow' must be floating"),
        ({"label": "disparity"}, {}, r"'label' \(float32\[2, 24, 24\]\) of kind 'disparity' must"),
        ({"mask": "mask"}, {}, r"names field\(s\) \['mask'\] that the file does not have"),
        (
            {"index": {"fill": 0.5}},
            {},
            r"'index' \(int32\[24, 24\]\): fill=0.5 is not a value of int32",
        ),
    ],
)
def test_a_dense_field_that_cannot_follow_is_refused_by_name(
    flow_file: Path, dense: dict, options: dict, message: str
) -> None:
    everything = {"label": "flow", "disparity": "mask", "index": "mask", **dense}
    augment = PairAugment(hflip=0.5, dense=everything, **options)
    with pytest.raises(ValueError, match=message):
        make_loader(flow_file, batch_size=8, augment=augment)


def test_a_field_the_size_of_the_images_must_be_declared(flow_file: Path) -> None:
    with pytest.raises(ValueError, match=r"field 'index' .* declare it, e\.g\. augment dense="):
        make_loader(
            flow_file,
            batch_size=8,
            augment=PairAugment(hflip=0.5, dense={"label": "flow", "disparity": "mask"}),
        )


@pytest.mark.parametrize(
    ("dense", "error", "message"),
    [
        (["label"], TypeError, r"augment dense must map field names"),
        (
            {"label": "masks"},
            ValueError,
            r"dense kind must be one of \['mask', 'disparity', 'flow'\]",
        ),
        ({"label": {"kind": "mask", "value": 3}}, ValueError, r"dense\['label'\]: unknown option"),
        ({"label": 3}, TypeError, r"augment dense\['label'\] must be a kind"),
        ({"label": {"fill": float("nan")}}, ValueError, r"dense fill must be a finite number"),
    ],
)
def test_bad_dense_options_are_refused(dense: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        PairAugment(hflip=0.5, dense=dense)


def test_dense_fields_come_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "aug.yaml"
    path.write_text(
        "augment:\n  hflip: 0.5\n  dense:\n    label: {kind: mask, fill: 255}\n    depth: flow\n"
    )
    augment = PairAugment.from_yaml(path)
    assert augment.dense == {"label": DenseField("mask", 255), "depth": DenseField("flow")}
    assert PairAugment(hflip=0.5).dense is None


def test_without_geometry_a_dense_field_is_handed_back_as_stored(flow_file: Path) -> None:
    augment = PairAugment(value_range=(0, 64), brightness=0.3, dense={"label": "flow"})
    flow = np.random.default_rng(8).normal(0, 3, (N, 2, H, W)).astype(np.float32)
    for batch, ids in _with_ids(flow_file, augment):
        np.testing.assert_array_equal(batch.label.numpy(), flow[ids])


def test_dense_fields_from_the_cli_yaml_reach_validation_too(
    coordinate_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LightningCLI reads ``dense`` in the augment block; the evaluation twin (a centre
    crop) keeps it, so validation masks line up with their images too."""
    import sys

    from ffcv_pairs.train import cli_main

    monkeypatch.setattr(sys, "argv", ["train.py"])
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data:\n  train_path: {coordinate_file}\n  batch_size: 8\n"
        "  augment:\n    crop: [16, 16]\n    hflip: 0.5\n"
        "    dense:\n      label: {kind: mask, fill: -1}\n      first: mask\n      last: mask\n"
        f"trainer:\n  logger: false\n  default_root_dir: {tmp_path}\n"
    )
    cli = cli_main(["--config", str(config)], run=False)
    want = {"label": DenseField("mask", -1), "first": DenseField(), "last": DenseField()}
    assert cli.datamodule.augment.dense == want
    assert cli.datamodule.eval_augment.dense == want
    loader = make_loader(coordinate_file, batch_size=8, augment=cli.datamodule.eval_augment)
    batch = next(iter(loader))
    a = batch.A.numpy().astype(np.int64)
    np.testing.assert_array_equal(batch.label.numpy(), a[:, 0] * W + a[:, 1])


def test_warmup_compiles_for_a_pipeline_with_dense_fields() -> None:
    """warmup's stand-in file carries the dense fields the configuration names, so the
    configuration loads (and the nearest kernel gets compiled) there."""
    from ffcv_pairs.warmup import warmup

    augment = PairAugment(hflip=0.5, dense={"label": DenseField("mask", fill=-1), "f": "flow"})
    report = warmup(augment, shape=(16, 16, 3), threads=(1,))
    assert report.pipelines == ("augment", "plain")


def test_a_mask_moves_alike_whatever_the_images_codec(tmp_path: Path) -> None:
    """The placement is drawn on the stored size, so a mask beside JPEG images (decoded at a
    reduced size under a resized crop) moves as beside raw ones."""
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (16, 3, 64, 64), dtype=np.uint8)
    mask = np.repeat(np.arange(64 * 64, dtype=np.int32).reshape(1, 64, 64), 16, axis=0)
    augment = PairAugment(resized_crop=(16, 16), hflip=0.5, rot90=True, dense={"label": "mask"})
    masks = []
    for codec in ("raw", "jpeg"):
        path = tmp_path / f"{codec}.beton"
        write_pairs(ArraySource(a, a, mask), path, workers=1, codec=codec, progress=False)
        masks.append([batch.label.numpy() for batch in _batches(path, augment)])
    for raw, jpeg in zip(*masks):
        np.testing.assert_array_equal(raw, jpeg)
