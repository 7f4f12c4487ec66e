"""``PairAugment.from_albumentations`` and the ``albumentations:`` YAML block against
Albumentations 2.0.8's own objects (skipped, saying why, where it is not installed): the rows,
the refusals naming the transform and the setting, the ``additional_targets`` it follows, the
YAML block's one-line errors, and ``Affine`` run by Albumentations and by our loader on one
image, content landing at the same place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.translate import translated_options

A = pytest.importorskip("albumentations", reason="albumentations is not installed here")


def test_albumentations_rows_on_its_objects() -> None:
    pipeline = A.Compose(
        [
            A.HorizontalFlip(p=0.5),
            A.CenterCrop(8, 8),
            A.ColorJitter(brightness=0.2, contrast=0.1, saturation=0.3, hue=0.05, p=1.0),
            A.RandomGamma(gamma_limit=(80, 120), p=0.4),
            A.ToGray(p=0.1),
            A.Posterize(num_bits=3, p=0.2),
            A.Solarize(threshold_range=(0.5, 0.5), p=0.3),
            A.InvertImg(p=0.1),
            A.ChannelShuffle(p=0.2),
            A.Normalize(),
        ],
        additional_targets={"image2": "image"},
    )
    aug = PairAugment.from_albumentations(pipeline)
    want = PairAugment(
        hflip=0.5, crop=(8, 8), center=True, color_jitter=(0.2, 0.1, 0.3, 0.05),
        gamma=(0.8, 1.2), gamma_p=0.4, grayscale=0.1, posterize=0.2, posterize_bits=3,
        solarize=0.3, solarize_threshold=127.5, invert=0.1, channel_shuffle=0.2,
        normalize_mean=(123.675, 116.28, 103.53), normalize_std=(58.395, 57.12, 57.375),
    )  # fmt: skip
    assert aug == want
    more = [A.RandomBrightnessContrast(brightness_limit=0, contrast_limit=0.3, p=1),
            A.GaussNoise(std_range=(0.1, 0.1), p=1),
            A.HueSaturationValue(hue_shift_limit=18, sat_shift_limit=0, val_shift_limit=0, p=1),
            A.AutoContrast(method="pil", p=0.3), A.Equalize(mode="pil", p=0.2),
            A.RandomRotate90(p=1)]  # fmt: skip
    aug = PairAugment.from_albumentations(more)
    assert (aug.brightness, aug.hue, aug.autocontrast, aug.equalize) == (0.3, 0.1, 0.3, 0.2)
    assert (aug.noise_std, aug.noise_paired, aug.rot90) == (25.5, True, True)


def test_albumentations_rows_of_the_geometry_blur_jpeg_and_erasing() -> None:
    from ffcv_pairs.augment.translate_albumentations import ALBUMENTATIONS

    pipeline = [
        A.LongestMaxSize(max_size=64),
        A.PadIfNeeded(64, 64, border_mode=1),
        A.Transpose(p=0.5),
        A.D4(p=1),
        A.Rotate(limit=30, p=0.3, border_mode=1),
        A.Affine(scale=(0.9, 1.1), keep_ratio=True, translate_percent=(-0.1, 0.1),
                 rotate=(-5, 8), p=0.6, border_mode=1),
        A.RandomScale(scale_limit=0.2, p=1),
        A.GaussianBlur(blur_limit=(5, 5), sigma_limit=0, p=0.4),
        A.ImageCompression(quality_range=(50, 90), p=0.2),
        A.Erasing(p=0.3, fill="random"),
    ]  # fmt: skip
    options = translated_options(pipeline, ALBUMENTATIONS, "albumentations")
    assert options == {
        "resize_longest": 64, "pad_if_needed": (64, 64), "pad_mode": "edge", "transpose": 0.5,
        "d4": True, "rotate": (-30.0, 30.0), "rotate_p": 0.3, "affine_degrees": (-8.0, 5.0),
        "affine_scale": (0.9, 1.1), "affine_shear": (0.0, 0.0, 0.0, 0.0), "affine_p": 0.6,
        "affine_translate": (0.1, 0.1), "scale_jitter": (0.8, 1.2), "blur": 0.4,
        "blur_sigma": (1.1, 1.1), "blur_kernel": 5, "blur_paired": True, "jpeg": 0.2,
        "jpeg_quality": (50, 90), "jpeg_paired": True, "erasing": 0.3,
        "erasing_scale": (0.02, 0.33), "erasing_ratio": (0.3, 3.3), "erasing_value": "random",
        "erasing_target": "both",
    }  # fmt: skip


REFUSALS = [
    (A.OneOf([A.HorizontalFlip()]), r"albumentations OneOf is not supported; supported: "),
    (A.ColorJitter(p=0.5), r"ColorJitter: p=0.5: ours has no probability"),
    (A.AutoContrast(p=1), r"AutoContrast: method='cdf', cutoff=0.0: .*method='pil'"),
    (A.Equalize(p=1), r"Equalize: mode='cv': ours is PIL's"),
    (A.RandomBrightnessContrast(p=1), r"RandomBrightnessContrast: brightness_limit adds"),
    (A.HueSaturationValue(p=1), r"HueSaturationValue: sat_shift_limit and val_shift_limit"),
    (A.GaussNoise(p=1), r"GaussNoise: std_range=\(0.2, 0.44\): ours takes one value"),
    (A.RandomRotate90(p=0.5), r"RandomRotate90: p=0.5: ours turns by a random quarter"),
    (A.Compose([A.HorizontalFlip()], p=0.5), r"Compose\(p=0.5\)"),
    ([A.RandomCrop(4, 4), A.RandomResizedCrop(size=(4, 4))], r"RandomCrop and "
     r"RandomResizedCrop both set crop"),
    (A.Affine(scale=(0.8, 1.2), balanced_scale=True, keep_ratio=True),
     r"^albumentations Affine: balanced_scale=True: ours draws the scale uniformly"),
    (A.Affine(scale=(0.8, 1.2)), r"^albumentations Affine: scale=.* with keep_ratio=False "
     r"draws x and y apart; ours scales both axes alike \(keep_ratio=True\)$"),
    (A.Affine(rotate=(-10, 10), shear=(-5, 5)), r"^albumentations Affine: rotate=\(-10.0, "
     r"10.0\), shear=.*: Albumentations rotates, then shears"),
    (A.Affine(shear=10), r"Affine: rotate=\(0.0, 0.0\), shear=\{'x': \(10.0, 10.0\), 'y': "
     r"\(10.0, 10.0\)\}: Albumentations rotates, then shears x and y at once"),
    (A.RandomCrop(8, 8, pad_if_needed=True, pad_position="random"),
     r"^albumentations RandomCrop: pad_if_needed=True, pad_position='random': ours pads "
     r"around the centre \(pad_position='center'\)$"),
    (A.CenterCrop(8, 8, pad_if_needed=True, pad_position="top_left"),
     r"CenterCrop: pad_if_needed=True, pad_position='top_left'"),
]  # fmt: skip


@pytest.mark.parametrize("pipeline, message", REFUSALS)
def test_albumentations_refusals_name_the_transform(pipeline: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PairAugment.from_albumentations(pipeline)


def test_settings_that_do_translate() -> None:
    aug = PairAugment.from_albumentations(
        [A.RandomCrop(8, 8, pad_if_needed=True, pad_position="center"),
         A.Affine(shear={"x": (-5, 5), "y": (0, 0)}, p=1)]
    )  # fmt: skip
    assert (aug.crop, aug.pad_if_needed, aug.affine_shear) == ((8, 8), (8, 8), (-5, 5, 0, 0))
    aug = PairAugment.from_albumentations(A.Affine(scale=(1.2, 1.2), rotate=(10, 20), p=1))
    assert (aug.affine_scale, aug.affine_degrees) == ((1.2, 1.2), (-20.0, -10.0))


@pytest.mark.parametrize(
    "targets",
    [{}, {"image2": "image"}, {"image2": "image", "mask2": "mask", "more": "masks"}],
)
def test_b_is_the_one_image_target_and_masks_are_followed(targets: dict) -> None:
    pipeline = A.Compose([A.HorizontalFlip(p=0.5)], additional_targets=targets)
    assert PairAugment.from_albumentations(pipeline).hflip == 0.5


@pytest.mark.parametrize(
    "targets, message",
    [
        ({"image2": "image", "image3": "image"}, r"^albumentations Compose: additional_targets="
         r"\{'image2': 'image', 'image3': 'image'\}: 2 of type 'image' \(image2, image3\); ours "
         r"has A and B"),
        ({"image2": "image", "boxes": "bboxes"}, r"^albumentations Compose: additional_targets="
         r".*: 'boxes': 'bboxes'; ours takes one 'image' \(B\), and 'mask' or 'masks'"),
        ({"points": "keypoints"}, r"'points': 'keypoints'; ours takes"),
    ],
)  # fmt: skip
def test_other_targets_are_refused_by_name(targets: dict, message: str) -> None:
    inner = A.Compose([A.HorizontalFlip(p=0.5)], additional_targets=targets)
    for pipeline in (inner, [A.VerticalFlip(p=0.5), inner]):
        with pytest.raises(ValueError, match=message):
            PairAugment.from_albumentations(pipeline)


# -- Albumentations and our loader on one image ------------------------------------------
SIZE = 65


def _centre_of_mass(image: np.ndarray) -> np.ndarray:
    """``(x, y)`` of the bright content of an ``(H, W, 3)`` image."""
    weight = image.astype(np.float64).sum(-1)
    ys, xs = np.mgrid[: weight.shape[0], : weight.shape[1]]
    return np.array([(xs * weight).sum(), (ys * weight).sum()]) / weight.sum()


def _ours(tmp_path: Path, image: np.ndarray, aug: PairAugment) -> np.ndarray:
    path = tmp_path / "one.beton"
    a = image[None]
    write_pairs(ArraySource(a, a.copy(), np.arange(1)), path, workers=1, progress=False)
    batch = next(iter(make_loader(path, batch_size=1, order="sequential", augment=aug)))
    return batch.A.numpy()[0]


@pytest.mark.parametrize(
    "arguments",
    [
        dict(rotate=(30, 30)),
        dict(rotate=(-50, -50)),
        dict(rotate=(30, 30), scale=(1.3, 1.3), keep_ratio=True),
        dict(shear={"x": (20, 20), "y": (0, 0)}),
        dict(shear={"x": (0, 0), "y": (-25, -25)}),
        dict(scale=(0.7, 0.7), keep_ratio=True),
    ],
    ids=["rotate 30", "rotate -50", "rotate and scale", "shear x", "shear y", "scale"],
)
def test_affine_lands_content_where_albumentations_does(tmp_path: Path, arguments: dict) -> None:
    """A one-pixel image off the centre (x=24, y=14): Albumentations' Affine and ours
    (translated) put it at the same place, within a tenth of a pixel plus rounding."""
    image = np.zeros((SIZE, SIZE, 3), np.uint8)
    image[14, 24] = 255
    transform = A.Affine(p=1, border_mode=0, **arguments)
    theirs = _centre_of_mass(transform(image=image)["image"])
    ours = _centre_of_mass(_ours(tmp_path, image, PairAugment.from_albumentations(transform)))
    assert np.abs(ours - theirs).max() < 0.6, (ours, theirs)


@pytest.mark.parametrize("axis", [0, 1])
def test_affine_translates_along_the_axis_albumentations_does(tmp_path: Path, axis: int) -> None:
    """``translate_percent`` on one axis: the content moves along that axis only, there and
    here (the shift is drawn, so only its axis is compared; Albumentations' own draw, which
    it rounds to whole pixels, is 0 one time in about 32: eight of its draws are taken)."""
    image = np.zeros((SIZE, SIZE, 3), np.uint8)
    image[30:35, 30:35] = 255
    shift = {"x": (0.0, 0.0), "y": (0.0, 0.0)}
    shift["xy"[axis]] = (-0.25, 0.25)
    transform = A.Affine(translate_percent=shift, p=1, border_mode=0)
    start = _centre_of_mass(image)
    theirs = [_centre_of_mass(transform(image=image)["image"]) for _ in range(8)]
    ours = _centre_of_mass(_ours(tmp_path, image, PairAugment.from_albumentations(transform)))
    for moved in (*theirs, ours):
        assert abs(moved[1 - axis] - start[1 - axis]) < 0.1
    assert max(abs(m[axis] - start[axis]) for m in theirs) > 0.5
    assert abs(ours[axis] - start[axis]) > 0.5


# -- the YAML block ----------------------------------------------------------------------
def test_yaml_block_builds_with_the_librarys_defaults(tmp_path: Path) -> None:
    path = tmp_path / "aug.yaml"
    path.write_text(
        "augment:\n"
        "  albumentations:\n"
        "    - HorizontalFlip: {}\n"  # Albumentations' default p: 0.5
        "    - RandomCrop: {height: 8, width: 8}\n"
        "    - InvertImg: {p: 0.25}\n"
        "  invert_paired: false\n"
        "  vflip: 0.3\n"
    )
    aug = PairAugment.from_yaml(path)
    assert aug == PairAugment(hflip=0.5, vflip=0.3, crop=(8, 8), invert=0.25, invert_paired=False)
    beside = PairAugment(albumentations=[{"InvertImg": {"p": 0.25}}], invert=0.75)
    assert beside.invert == 0.75  # an option beside the block wins over it


@pytest.mark.parametrize(
    "block, error, message",
    [
        ([{"Flip3D": {}}], ValueError, r"^albumentations has no transform 'Flip3D'; supported: "),
        ([{"HorizontalFlip": {"p": 2}}], ValueError,
         r"^albumentations HorizontalFlip: p=2: Input should be less than or equal to 1$"),
        ([{"RandomCrop": {"height": "tall", "width": 8}}], ValueError,
         r"^albumentations RandomCrop: height='tall': Input should be a valid integer"),
        ([{"HorizontalFlip": {"prob": 1.0}}], ValueError,
         r"^albumentations HorizontalFlip: unknown argument\(s\) 'prob'; it takes p$"),
        ([{"OneOf": {"transforms": [{"HorizontalFlip": {}}]}}], ValueError,
         r"^albumentations OneOf is not supported; supported: .*HorizontalFlip"),
        ([{"SomeOf": {"transforms": [], "n": 1}}], ValueError, r"SomeOf is not supported"),
        ([{"HorizontalFlip": [0.5]}], TypeError, r"^augment albumentations: each entry is "
         r"\{ClassName: \{argument: value\}\}, a class name and a mapping of its arguments, "
         r"got \{'HorizontalFlip': \[0.5\]\}$"),
        ([{"HorizontalFlip": {}, "VerticalFlip": {}}], TypeError, r"each entry is \{ClassName"),
        ({"HorizontalFlip": {}}, TypeError, r"^augment albumentations: a list of \{ClassName"),
    ],
)  # fmt: skip
def test_yaml_block_errors_are_one_line(block: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        PairAugment(albumentations=block)
    assert "\n" not in str(caught.value)


def test_yaml_block_refuses_a_class_without_a_row_unbuilt(monkeypatch) -> None:
    """OneOf is refused by name before Albumentations is asked to build it."""

    class OneOf:
        def __init__(self, **kwargs: Any) -> None:
            raise AttributeError("built")

    monkeypatch.setattr(A, "OneOf", OneOf)
    with pytest.raises(ValueError, match=r"^albumentations OneOf is not supported; supported"):
        PairAugment(albumentations=[{"OneOf": {"transforms": [{"HorizontalFlip": {}}]}}])


def test_yaml_block_through_the_lightning_cli() -> None:
    from jsonargparse import ArgumentParser

    from ffcv_pairs.lightning.datamodule import PairDataModule

    parser = ArgumentParser()
    parser.add_class_arguments(PairDataModule, "data", sub_configs=True)

    def augment(block: str) -> PairAugment:
        cfg = parser.parse_string(
            f"data:\n  train_path: x.beton\n  batch_size: 2\n  augment:\n{block}"
        )
        return parser.instantiate(cfg).data.augment

    assert augment("    albumentations:\n      - VerticalFlip: {p: 0.25}\n    swap: 0.5\n") == (
        PairAugment(vflip=0.25, swap=0.5)
    )
    with pytest.raises(ValueError, match=r"albumentations HorizontalFlip: p=2: Input should"):
        augment("    albumentations:\n      - HorizontalFlip: {p: 2}\n")
    with pytest.raises(ValueError, match=r"albumentations OneOf is not supported"):
        augment("    albumentations:\n      - OneOf: {transforms: [HorizontalFlip: {}]}\n")


@pytest.mark.parametrize(
    "transform",
    [
        A.Resize(50, 70),
        A.LongestMaxSize(70),
        A.Compose([A.Resize(50, 70), A.HorizontalFlip(p=1), A.CenterCrop(40, 60)]),
    ],
    ids=["Resize", "LongestMaxSize", "Resize, flip and crop"],
)
def test_an_enlarging_resize_takes_the_edge_pixels_as_opencv_does(
    tmp_path: Path, transform: Any
) -> None:
    """Enlarging, the outermost half pixel reads beyond the image: OpenCV's resize (and
    torchvision's) takes the edge pixel there, and so does ours, not a blend with the fill
    (which darkened the border by up to 61 levels); every pixel within 1, border included."""
    image = np.linspace(40, 220, 33 * 47 * 3).reshape(33, 47, 3).astype(np.uint8)
    theirs = transform(image=image)["image"]
    ours = _ours(tmp_path, image, PairAugment.from_albumentations(transform))
    assert ours.shape == theirs.shape
    assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1
