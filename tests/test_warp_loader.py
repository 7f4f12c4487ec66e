"""The matrix geometry through ``make_loader``: A equal to B in gives byte-identical A and B
out under every op, on every stored kind (uint8, float16, float32; CHW, HWC, 2-d; 1 or 3
channels; raw and JPEG); the same draws for every thread count and loader run; a dense mask
lands where the image says its pixel went; disparities and flows scale as the image does,
and are refused by name where they would bend; bad options are named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ffcv_pairs import ArraySource, DenseField, PairAugment, make_loader, write_pairs

H = W = 24
N = 16

#: One pipeline per op, each drawing the op on most samples.
OPS = {
    "transpose": dict(transpose=0.5),
    "d4": dict(d4=True),
    "rotate": dict(rotate=45),
    "affine": dict(
        affine_degrees=20, affine_translate=(0.1, 0.2), affine_scale=(0.8, 1.2), affine_shear=10
    ),
    "scale jitter": dict(scale_jitter=(0.6, 1.4), scale_jitter_aspect=(0.8, 1.25), crop=(20, 20)),
    "perspective": dict(perspective=0.6, perspective_p=0.9),
    "elastic": dict(elastic=(20.0, 2.0)),
    "resize": dict(resize=(30, 18)),
    "resize_longest": dict(resize_longest=40, pad_mode="edge"),
    "pad_if_needed": dict(pad_if_needed=(30, 28), pad_mode="reflect"),
    "with the old ops": dict(
        rotate=30, resized_crop=(16, 16), hflip=0.5, rot90=True, translate=(2, 2), fill=9
    ),
}
EVERYTHING = dict(
    rotate=20,
    affine_scale=(0.9, 1.1),
    perspective=0.3,
    scale_jitter=(0.8, 1.2),
    d4=True,
    elastic=(10.0, 3.0),
    crop=(16, 16),
    crop_padding=2,
    hflip=0.5,
    brightness=0.2,
    gamma=(0.8, 1.2),
)


def _write(path: Path, a: np.ndarray, **kwargs) -> Path:
    write_pairs(
        ArraySource(a, a.copy(), np.arange(len(a))), path, workers=1, progress=False, **kwargs
    )
    return path


def _images(shape: tuple, dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (N, *shape))
    return x.astype(dtype) if dtype == "uint8" else (x / 255).astype(dtype)


@pytest.fixture(scope="module")
def chw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("warp") / "chw.beton", _images((3, H, W), "uint8"))


def _loaded(path: Path, aug: PairAugment, **options) -> list:
    loader = make_loader(path, batch_size=6, order="random", seed=4, augment=aug, **options)
    return [(b.A.numpy().copy(), b.B.numpy().copy()) for b in loader]


@pytest.mark.parametrize("os_cache", [True, False])
@pytest.mark.parametrize("shape", [(3, H, W), (H, W, 3), (H, W)])
def test_the_decoder_warps_as_the_warp_op_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, os_cache: bool, shape: tuple
) -> None:
    """uint8 stored raw: the decoder warps A and B where they are stored (``load/
    warp_decode``, no copy first, no warp op after); the batches are the warp op's on the
    decoder's copies (the placement forced off), from the page cache and from the process
    cache's slots, CHW, HWC and 2-d, B stored apart from A."""
    from ffcv_pairs.augment import placement
    from ffcv_pairs.load import specs

    a = _images(shape, "uint8")
    path = tmp_path / "x.beton"
    write_pairs(ArraySource(a, a[::-1].copy(), np.arange(N)), path, workers=1, progress=False)
    aug = PairAugment(**EVERYTHING, geometry_paired=False)
    seen, real = [], specs.place_ops
    monkeypatch.setattr(
        specs, "place_ops", lambda *args, **kw: seen.append(real(*args, **kw)) or seen[-1]
    )
    warped = _loaded(path, aug, os_cache=os_cache)
    assert seen and all(p.warped for p in seen)
    off = placement.OpPlacement(False, "uint8", False, False)
    monkeypatch.setattr(specs, "place_ops", lambda *args, **kwargs: off)
    for (a1, b1), (a0, b0) in zip(warped, _loaded(path, aug, os_cache=os_cache), strict=True):
        np.testing.assert_array_equal(a1, a0)
        np.testing.assert_array_equal(b1, b0)


@pytest.mark.parametrize("name", list(OPS))
def test_each_op_moves_a_and_b_alike(chw: Path, name: str) -> None:
    plain = _loaded(chw, PairAugment(pad_if_needed=(1, 1)))  # the matrix path, moving nothing
    moved = _loaded(chw, PairAugment(**OPS[name]))
    for a, b in moved:
        np.testing.assert_array_equal(a, b)
    same = [np.array_equal(a, p) for (a, _), (p, _) in zip(moved, plain)]
    assert not all(same)  # it moved something


def test_output_sizes(chw: Path) -> None:
    """The crop's size; else the resized size; else the stored size, padded."""
    for options, size in (
        (dict(resize=(30, 18), crop=(10, 12)), (10, 12)),
        (dict(resize=(30, 18), rotate=5), (30, 18)),
        (dict(resize_longest=40), (40, 40)),
        (dict(pad_if_needed=(30, 20)), (30, 24)),
        (dict(scale_jitter=(0.5, 2.0)), (H, W)),
    ):
        a, _ = _loaded(chw, PairAugment(**options))[0]
        assert a.shape[2:] == size, options


KINDS = {
    "uint8 HWC": ((H, W, 3), "uint8", {}),
    "uint8 2-d": ((H, W), "uint8", {}),
    "uint8 one channel": ((1, H, W), "uint8", {}),
    "float16 CHW": ((3, H, W), "float16", {}),
    "float32 HWC": ((H, W, 4), "float32", {}),
    "jpeg": ((H, W, 3), "uint8", {"codec": "jpeg"}),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_stored_kind(tmp_path: Path, kind: str) -> None:
    shape, dtype, kwargs = KINDS[kind]
    path = _write(tmp_path / "k.beton", _images(shape, dtype, 1), **kwargs)
    everything = dict(EVERYTHING)
    if len(shape) != 3 or 3 not in (shape[0], shape[-1]):
        everything.pop("gamma")
    if dtype != "uint8":
        everything["value_range"] = (0.0, 1.0)
    batches = _loaded(path, PairAugment(**everything))
    for a, b in batches:
        assert a.dtype == np.dtype(dtype) and a.tobytes() == b.tobytes()
    a = batches[0][0]
    assert a.shape[1:] == (shape[0], 16, 16) if shape[0] in (1, 3) else (16, 16, *shape[2:])


def test_the_same_for_every_thread_count_and_run_and_new_each_epoch(chw: Path) -> None:
    aug = PairAugment(**EVERYTHING)

    def epoch(e: int, threads: int) -> bytes:
        loader = make_loader(
            chw, batch_size=5, order="random", seed=2, augment=aug, num_threads=threads
        )
        loader.set_epoch(e)
        return b"".join(b.A.numpy().tobytes() + b.B.numpy().tobytes() for b in loader)

    first = epoch(0, 1)
    assert epoch(0, 2) == first
    assert epoch(0, 1) == first
    assert epoch(1, 2) != first


def test_unpaired_geometry_moves_a_and_b_apart(chw: Path) -> None:
    batches = _loaded(chw, PairAugment(rotate=40, geometry_paired=False))
    assert not all(np.array_equal(a, b) for a, b in batches)


def test_b_offset_moves_b_alone_by_up_to_its_pixels(chw: Path) -> None:
    batches = _loaded(chw, PairAugment(b_offset=(3.0, 0.0), pad_mode="edge"))
    plain = _loaded(chw, PairAugment(pad_if_needed=(1, 1), pad_mode="edge"))
    for (a, b), (p, _) in zip(batches, plain):
        np.testing.assert_array_equal(a, p)
        assert not np.array_equal(a, b)


# -- dense fields --------------------------------------------------------------------------
def _coordinates() -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    return np.repeat(np.stack([y, x, np.full((H, W), 255)]).astype(np.uint8)[None], N, axis=0)


@pytest.fixture(scope="module")
def coordinate_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("warp_dense") / "coords.beton"
    a = _coordinates()
    index = np.repeat(np.arange(H * W).reshape(H, W)[None], N, axis=0).astype(np.int32)
    write_pairs(ArraySource(a, a, index), path, workers=1, progress=False)
    return path


@pytest.fixture(scope="module")
def stereo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A disparity of 3 and a flow of (1, 2) everywhere."""
    path = tmp_path_factory.mktemp("warp_stereo") / "stereo.beton"
    a = _coordinates()
    disparity = np.full((N, H, W), 3.0, np.float32)
    flow = np.stack([np.full((N, H, W), 1.0), np.full((N, H, W), 2.0)], -1).astype(np.float32)
    source = ArraySource(a, a, np.arange(N), disparity=disparity, flow=flow)
    write_pairs(source, path, workers=1, progress=False)
    return path


MOVES = {name: OPS[name] for name in ("transpose", "d4", "rotate", "affine", "perspective")}
MOVES |= {
    "scale jitter": dict(scale_jitter=(0.6, 1.6), crop=(20, 20), pad_mode="edge"),
    "elastic": dict(elastic=(20.0, 3.0)),
    "resize up 2": dict(resize=(48, 48), pad_mode="edge"),
    "resize down 2": dict(resize=(12, 12)),
    "pad and old ops": dict(pad_if_needed=(30, 30), crop=(20, 20), hflip=0.5, rot90=True),
    "b offset": dict(b_offset=(2.0, 2.0), rotate=10),
}


@pytest.mark.parametrize("name", list(MOVES))
def test_a_mask_of_pixel_indices_lands_where_the_image_says(
    coordinate_file: Path, name: str
) -> None:
    """Where all four taps of A's pixel are inside the image (its third channel is 255), A
    holds the coordinates it was read from, bilinearly (exact for a ramp), rounded half up:
    exactly the pixel nearest sampling reads."""
    aug = PairAugment(**MOVES[name], dense={"label": DenseField("mask", fill=-1)})
    loader = make_loader(coordinate_file, batch_size=8, order="random", seed=5, augment=aug)
    inside_total = 0
    for batch in loader:
        a = batch.A.numpy().astype(np.int64)
        inside = a[:, 2] == 255
        inside_total += inside.sum()
        expected = a[:, 0] * W + a[:, 1]
        np.testing.assert_array_equal(batch.label.numpy()[inside], expected[inside])
    assert inside_total > N * 100


def test_disparity_and_flow_scale_with_the_resize_and_sign_with_the_flip(
    stereo_file: Path,
) -> None:
    dense = {"disparity": "disparity", "flow": "flow"}
    aug = PairAugment(resize=(12, 48), hflip=1.0, dense=dense)
    batch = next(iter(make_loader(stereo_file, batch_size=4, augment=aug)))
    assert np.allclose(batch.disparity.numpy(), -6.0)
    assert np.allclose(batch.flow.numpy()[..., 0], -2.0)
    assert np.allclose(batch.flow.numpy()[..., 1], 1.0)


@pytest.mark.parametrize("option", ["rotate", "perspective", "transpose", "elastic", "b_offset"])
def test_a_disparity_under_a_bend_is_refused_by_name(stereo_file: Path, option: str) -> None:
    value = {"rotate": 5, "perspective": 0.2, "transpose": 0.5, "elastic": (1.0, 1.0)}
    value["b_offset"] = (0.0, 1.0)
    dense = {"disparity": "disparity", "flow": "mask"}
    aug = PairAugment(**{option: value[option]}, dense=dense)
    with pytest.raises(ValueError, match=rf"^augment {option}=.*'disparity'.*drop {option}$"):
        make_loader(stereo_file, batch_size=4, augment=aug)


# -- bad options -----------------------------------------------------------------------------
BAD = [
    (dict(rotate=-5), ValueError, r"augment rotate must be >= 0.0, got -5.0"),
    (dict(rotate=(10, -10)), ValueError, r"augment rotate=\(10.0, -10.0\) must be \(low, high\)"),
    (dict(rotate="x"), TypeError, r"augment rotate must be a sequence of 2 values, got 'x'"),
    (dict(rotate_p=2), ValueError, r"augment rotate_p must be between 0.0 and 1.0, got 2.0"),
    (dict(transpose=1.5), ValueError, r"augment transpose must be between 0.0 and 1.0, got 1.5"),
    (dict(d4=1), TypeError, r"augment d4 must be True or False, got 1"),
    (dict(affine_translate=(0.5, 2)), ValueError, r"augment affine_translate\[1\] must be"),
    (dict(affine_scale=(2, 1)), ValueError, r"augment affine_scale=\(2.0, 1.0\) must be"),
    (dict(affine_shear=(1, 2, 3)), ValueError, r"augment affine_shear=\(1, 2, 3\) must be one"),
    (dict(scale_jitter=(0, 1)), ValueError, r"augment scale_jitter\[0\] must be > 0.0"),
    (dict(scale_jitter_aspect=(2, 1)), ValueError, r"augment scale_jitter_aspect=\(2.0, 1.0\)"),
    (dict(perspective=-0.1), ValueError, r"augment perspective must be between 0.0 and 1.0"),
    (dict(elastic=(1.0, 100.0)), ValueError, r"augment elastic=\(1.0, 100.0\): sigma must be"),
    (dict(resize=(0, 4)), ValueError, r"augment resize\[0\] must be between 1 and 65536, got 0"),
    (dict(resize=(8, 8), resize_longest=8), ValueError, r"augment resize=\(8, 8\) and resize_l"),
    (dict(pad_if_needed=(4.5, 4)), TypeError, r"augment pad_if_needed\[0\] must be an integer"),
    (dict(b_offset=(-1, 0)), ValueError, r"augment b_offset\[0\] must be between 0.0 and"),
    (dict(transpose=0.5, crop=(4, 6)), ValueError, r"augment transpose=0.5 needs a square"),
]


@pytest.mark.parametrize("options, error, message", BAD)
def test_bad_options_are_named_on_one_line(options: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as info:
        PairAugment(**options)
    assert "\n" not in str(info.value)


def test_a_non_square_output_refuses_d4_at_the_loader(chw: Path) -> None:
    with pytest.raises(ValueError, match=r"augment d4=True needs a square output, got \(30, 18\)"):
        make_loader(chw, batch_size=4, augment=PairAugment(d4=True, resize=(30, 18)))


def test_pipelines_without_the_options_keep_their_fast_paths() -> None:
    from ffcv_pairs.augment.placement import place_ops
    from ffcv_pairs.format.schema import ArraySpec, PairSchema

    schema = PairSchema(ArraySpec((3, 8, 8), "uint8"), ArraySpec((3, 8, 8), "uint8"))
    old = PairAugment(resized_crop=(4, 4), hflip=0.5, brightness=0.1)
    assert not old.warps and place_ops(old, schema, on_cpu=True).fused
    assert not place_ops(PairAugment(resized_crop=(4, 4), rotate=3), schema, on_cpu=True).fused


def test_the_evaluation_twin_keeps_the_sizes_and_draws_nothing() -> None:
    from ffcv_pairs.augment.evaluation import eval_pipeline, random_ops

    aug = PairAugment(resize=(30, 18), pad_if_needed=(32, 20), rotate=10, crop=(16, 16), d4=True)
    assert random_ops(aug) == ["crop=(16, 16)", "rotate=(-10.0, 10.0)", "d4=True"]
    twin = eval_pipeline(aug)
    assert twin is not None and random_ops(twin) == []
    assert (twin.resize, twin.pad_if_needed, twin.crop, twin.center) == (
        (30, 18),
        (32, 20),
        (16, 16),
        True,
    )


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_if_needed_is_numpys_centred_pad(chw: Path, mode: str) -> None:
    """Albumentations' PadIfNeeded: ``(min - size) // 2`` on top and left, the rest after;
    numpy's pad of the same mode (whole pixels: byte for byte)."""
    aug = PairAugment(pad_if_needed=(31, 27), pad_mode=mode, fill=7)
    loader = make_loader(chw, batch_size=N, order="sequential", augment=aug)
    a = next(iter(loader)).A.numpy()
    stored = _images((3, H, W), "uint8")
    pads = ((0, 0), (0, 0), ((31 - H) // 2, 31 - H - (31 - H) // 2), (1, 2))
    kwargs = {"constant_values": 7} if mode == "constant" else {}
    np.testing.assert_array_equal(a, np.pad(stored, pads, mode=mode, **kwargs))


def test_resize_longest_is_albumentations_size() -> None:
    from ffcv_pairs.augment.warp_options import warp_canvas

    for size, longest, expected in (((24, 32), 40, (30, 40)), ((50, 20), 25, (25, 10))):
        assert warp_canvas(PairAugment(resize_longest=longest), *size) == expected
