"""The torchvision rows of the translator (``PairAugment.from_torchvision``) on stand-ins
holding the attributes torchvision 0.29 stores (its real objects: tests/test_translate.py,
run by ``make translators-check``): what each row gives, the refusals naming the transform
and the value given, and values from ``[0, 1]`` put on uint8's levels so that a uint8 file
loads them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.translate import translated_options
from ffcv_pairs.augment.translate_torchvision import TORCHVISION


def stub(name: str, **attributes: Any) -> Any:
    """A stand-in of a library's transform: its class name and stored attributes."""
    obj = type(name, (), {})()
    vars(obj).update(attributes)
    return obj


def tv(pipeline: list[Any], value_max: float = 255.0) -> dict[str, Any]:
    return translated_options(pipeline, TORCHVISION, "torchvision", value_max)


def _with(name: str, defaults: dict[str, Any], attributes: dict[str, Any]) -> Any:
    return stub(name, **{**defaults, **attributes})


def jitter(**ranges: Any) -> Any:
    return _with(
        "ColorJitter", dict.fromkeys(("brightness", "contrast", "saturation", "hue")), ranges
    )


def rotation(**attributes: Any) -> Any:
    defaults = dict(
        degrees=[-9.0, 9.0], interpolation="bilinear", expand=False, center=None, fill=0
    )
    return _with("RandomRotation", defaults, attributes)


def affine(**attributes: Any) -> Any:
    defaults = dict(degrees=[-9.0, 9.0], translate=None, scale=None, shear=None,
                    interpolation="bilinear", fill=0, center=None)  # fmt: skip
    return _with("RandomAffine", defaults, attributes)


SCALED = stub("ToDtype", dtype="torch.float32", scale=True)
#: The RAFT-Stereo-like pipeline of docs/augmentation.md, as torchvision 0.29 stores it.
RAFT = [
    stub("RandomResizedCrop", size=(32, 72), scale=(0.5, 1.0), ratio=(2.0, 2.5),
         interpolation="bilinear", antialias=True),
    stub("ColorJitter", brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation=(0.6, 1.4),
         hue=(-0.5 / 3.14, 0.5 / 3.14)),
    SCALED,
    stub("RandomErasing", p=0.5, scale=(0.01, 0.05), ratio=(0.5, 2.0), value=[0.5],
         inplace=False),
]  # fmt: skip


def test_torchvision_rows_on_its_stored_attributes() -> None:
    """Attributes as torchvision 0.29 stores them (ColorJitter(0.4) keeps (0.6, 1.4))."""
    pipeline = [
        stub("ToImage"),
        stub("RandomCrop", size=(8, 8), padding=[2, 2, 2, 2], pad_if_needed=False, fill=7,
             padding_mode="constant"),
        stub("RandomHorizontalFlip", p=0.5),
        jitter(brightness=(0.6, 1.4), saturation=(0.0, 2.0), hue=(-0.1, 0.1)),
        stub("RandomApply", p=0.5, transforms=[stub("RandomGrayscale", p=1.0)]),
        stub("RandomSolarize", p=0.3, threshold=0.5),
        SCALED,
        stub("Normalize", mean=[0.5], std=[0.25], inplace=False),
    ]  # fmt: skip
    assert tv(pipeline) == {
        "crop": (8, 8), "crop_padding": 2, "fill": 7.0, "hflip": 0.5,
        "color_jitter": (0.4, 0.0, 1.0, 0.1), "grayscale": 0.5, "solarize": 0.3,
        "solarize_threshold": 0.5, "out_dtype": "float32", "normalize_mean": (127.5,),
        "normalize_std": (63.75,),
    }  # fmt: skip


@pytest.mark.parametrize(
    "given, stored",
    [(0.5, 128.0), ([0.5, 0.5, 0.5], 128.0), (0.2, 51.0), (0.498, 127.0), (1.0, 255.0)],
)
def test_scaled_values_land_on_uint8_levels_half_up(given: Any, stored: float) -> None:
    """A fill or erasing value in ``[0, 1]`` becomes ``floor(v * 255 + 0.5)``: 0.5 is 128."""
    values = given if isinstance(given, list) else [given]
    options = tv([SCALED, rotation(fill=given), stub("RandomErasing", p=0.5, scale=(0.02, 0.3),
                  ratio=(0.3, 3.3), value=values, inplace=False)])  # fmt: skip
    assert (options["fill"], options["erasing_value"]) == (stored, stored)
    # A file of floats in [0, 1] (value_max=1), or values not scaled: no rounding.
    assert tv([SCALED, rotation(fill=0.3)], value_max=1.0)["fill"] == 0.3
    assert tv([rotation(fill=7.5)])["fill"] == 7.5


def test_the_raft_stereo_pipeline_loads_from_a_uint8_file(tmp_path: Path) -> None:
    """RandomErasing(value=0.5) after ToDtype(scale=True) on a uint8 file: value 128, which
    make_loader takes (127.5 is not a uint8 value, and was refused there)."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (4, 3, 24, 40), dtype=np.uint8)
    path = tmp_path / "pairs.beton"
    write_pairs(ArraySource(a, 255 - a, np.arange(4)), path, workers=1, progress=False)
    aug = PairAugment.from_torchvision(RAFT, color_jitter_paired=False, erasing_target="B")
    assert aug.erasing_value == 128.0
    batch = next(iter(make_loader(path, batch_size=4, order="sequential", augment=aug)))
    assert batch.A.shape == batch.B.shape == (4, 3, 32, 72)
    assert batch.A.dtype == batch.B.dtype


@pytest.mark.parametrize("given", [2, "bilinear"])
def test_interpolation_as_torchvision_takes_it(given: Any) -> None:
    """The PIL constant 2 is bilinear in torchvision (``_interpolation_modes_from_int``)."""
    assert tv([rotation(interpolation=given)])["rotate"] == (-9.0, 9.0)
    assert tv([affine(interpolation=given)])["affine_degrees"] == (-9.0, 9.0)


@pytest.mark.parametrize(
    "pipeline, message",
    [
        ([stub("RandomOrder")], r"RandomOrder is not supported; supported: .*CenterCrop"),
        ([jitter(brightness=(0.5, 1.2))], r"^torchvision ColorJitter: brightness=\(0.5, 1.2\): "
         r"ours needs a range symmetric around 1, \(1 - v, 1 \+ v\), the low end clamped at 0; "
         r"\(0.5, 1.2\) is not$"),
        ([jitter(brightness=(0.8, 1.0))], r"brightness=\(0.8, 1.0\): ours needs a range "
         r"symmetric around 1"),
        ([jitter(hue=(-0.1, 0.2))], r"hue=\(-0.1, 0.2\): ours needs a range symmetric around "
         r"0, \(-v, v\); "),
        ([stub("GaussianBlur", kernel_size=(3, 5), sigma=[0.1, 2.0])],
         r"^torchvision GaussianBlur: kernel_size=\(3, 5\): ours takes one kernel size for "
         r"height and width$"),
        ([stub("ElasticTransform", alpha=[50.0, 40.0], sigma=[5.0, 5.0],
               interpolation="bilinear", fill=0)],
         r"ElasticTransform: alpha=\[50.0, 40.0\]: ours takes one value for x and y"),
        ([rotation(degrees=[10.0, -10.0])], r"^torchvision RandomRotation: degrees=\(10.0, "
         r"-10.0\): a range \(low, high\) with low <= high$"),
        ([affine(degrees=[10.0, -10.0])], r"^torchvision RandomAffine: degrees=\(10.0, -10.0\)"),
        ([stub("Grayscale", num_output_channels=1)], r"Grayscale: num_output_channels=1"),
        ([rotation(interpolation="nearest")],
         r"RandomRotation: interpolation='nearest': ours is bilinear"),
        ([rotation(interpolation=0)], r"RandomRotation: interpolation=0 \(PIL's nearest\): "
         r"ours is bilinear"),
        ([affine(interpolation=7)], r"RandomAffine: interpolation=7: not a PIL constant "
         r"torchvision takes \(0: nearest, 1: lanczos, 2: bilinear"),
        ([stub("CenterCrop", size=(4, 4)), stub("RandomCrop", size=(4, 4), padding=None,
               pad_if_needed=False, fill=0, padding_mode="constant")],
         r"CenterCrop and RandomCrop both set crop"),
        ([stub("RandomResizedCrop", size=(4, 4), scale=(0.5, 1), ratio=(1, 1),
               interpolation="bilinear", antialias=True), stub("CenterCrop", size=(4, 4))],
         r"RandomResizedCrop and CenterCrop both set resized_crop"),
        ([stub("RandomEqualize", p=0.5), stub("CenterCrop", size=(4, 4))],
         r"RandomEqualize before CenterCrop cannot be kept .* reads the whole image"),
        ([stub("Normalize", mean=[0.5], std=[0.5], inplace=False), stub("RandomInvert", p=0.5)],
         r"Normalize before RandomInvert .* \(normalisation runs after"),
        ([stub("RandomInvert", p=0.5), stub("RandomPosterize", p=0.5, bits=3)],
         r"RandomInvert before RandomPosterize .* in the order"),
        ([stub("RandomApply", p=0.5, transforms=[jitter(brightness=(0.6, 1.4))])],
         r"RandomApply: p=0.5 around ColorJitter"),
        ([stub("TrivialAugmentWide", interpolation="bilinear", fill=None, num_magnitude_bins=31)],
         r"TrivialAugmentWide: interpolation='bilinear': ours is nearest"),
        ([stub("Resize", size=[256], interpolation="bilinear", max_size=None, antialias=True)],
         r"Resize: size=\[256\]: ours resizes to \(height, width\)"),
    ],
)  # fmt: skip
def test_torchvision_refusals_name_the_transform(pipeline: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tv(pipeline)


def test_flips_and_pixel_ops_may_come_anywhere() -> None:
    """Flips commute with everything, per-pixel ops with the geometry: no refusal."""
    options = tv(
        [
            stub("RandomGrayscale", p=0.5),
            stub("RandomHorizontalFlip", p=0.5),
            stub("CenterCrop", size=(4, 4)),
            stub("RandomAutocontrast", p=0.5),
            stub("RandomVerticalFlip", p=0.5),
        ]
    )
    assert options == {"grayscale": 0.5, "hflip": 0.5, "crop": (4, 4), "center": True,
                       "autocontrast": 0.5, "vflip": 0.5}  # fmt: skip


def test_overrides_win_and_the_result_is_checked() -> None:
    aug = PairAugment.from_torchvision(
        [stub("RandomHorizontalFlip", p=0.5), stub("RandomInvert", p=0.2)],
        invert=0.7,
        invert_paired=False,
    )
    assert (aug.hflip, aug.invert, aug.invert_paired) == (0.5, 0.7, False)
    with pytest.raises(ValueError, match=r"augment hflip must be between 0\.0 and 1\.0, got 2\.0"):
        PairAugment.from_torchvision([stub("RandomHorizontalFlip", p=2.0)])


def test_neither_library_is_imported_to_translate() -> None:
    code = (
        "import sys\n"
        "from ffcv_pairs import PairAugment\n"
        "t = type('RandomHorizontalFlip', (), {'p': 0.5})()\n"
        "PairAugment.from_torchvision([t])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torchvision', 'albumentations', 'cv2')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_rows_of_the_geometry_blur_noise_and_erasing() -> None:
    assert tv(
        [
            stub("Resize", size=[32, 48], interpolation="bilinear", max_size=None, antialias=True),
            rotation(fill=3),
            affine(degrees=[0.0, 0.0], translate=(0.1, 0.2), scale=(0.9, 1.1), fill=3),
            stub("RandomPerspective", p=0.4, distortion_scale=0.3, interpolation="bilinear",
                 fill=3),
            stub("ElasticTransform", alpha=[50.0, 50.0], sigma=[5.0, 5.0],
                 interpolation="bilinear", fill=3),
            stub("GaussianNoise", mean=0.0, sigma=0.1, clip=True),
            stub("GaussianBlur", kernel_size=(5, 5), sigma=[0.1, 2.0]),
            stub("JPEG", quality=[40, 90]),
            stub("RandomErasing", p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0.0],
                 inplace=False),
        ]
    ) == {
        "resize": (32, 48), "rotate": (-9.0, 9.0), "rotate_p": 1.0, "fill": 3.0,
        "affine_degrees": (0.0, 0.0), "affine_translate": (0.1, 0.2),
        "affine_scale": (0.9, 1.1), "affine_p": 1.0, "perspective": 0.3, "perspective_p": 0.4,
        "elastic": (50.0, 5.0), "elastic_p": 1.0, "noise_std": 25.5, "noise_paired": False,
        "blur": 1.0, "blur_sigma": (0.1, 2.0), "blur_kernel": 5, "jpeg": 1.0,
        "jpeg_quality": (40, 90), "erasing": 0.5, "erasing_scale": (0.02, 0.33),
        "erasing_ratio": (0.3, 3.3), "erasing_value": 0.0, "erasing_target": "both",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("value_max", "error", "message"),
    [
        (0, ValueError, r"value_max must be > 0, got 0\.0"),
        (-1.0, ValueError, r"value_max must be > 0, got -1\.0"),
        ("255", TypeError, r"value_max must be a number, got '255' \(str\)"),
    ],
)
def test_value_max_is_a_positive_number(value_max: Any, error: type, message: str) -> None:
    """Named where it is given, not later as a normalize_std it became (or unused)."""
    with pytest.raises(error, match=rf"^augment from_torchvision: {message}$"):
        tv([stub("RandomHorizontalFlip", p=0.5)], value_max)
