"""The translators (``PairAugment.from_torchvision``, ``from_albumentations``, the YAML
block): the pipelines of docs/augmentation.md ("Bringing a pipeline") as printed, each row
against the library's own objects where the library is installed (Albumentations 2.0.8 in
the main venv when installed without its dependencies; torchvision 0.29 in the venv of
``make translators-check``), the torchvision rows everywhere on stand-ins holding the
attributes torchvision 0.29 stores, and the refusals, each naming the transform.

A pipeline needing an option another change is adding (``rotate``, ``scale_jitter``,
``blur``, ...) is skipped, saying which, until PairAugment has it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ffcv_pairs import PairAugment
from ffcv_pairs.augment.translate import translated_options
from ffcv_pairs.augment.translate_torchvision import TORCHVISION

DOC = Path(__file__).resolve().parent.parent / "docs" / "augmentation.md"
MISSING = re.compile(r"needs (?:PairAugment )?option\(s\) (\[.*?\])")


def pipelines() -> dict[str, str]:
    """The documented pipelines, by the name on their first line."""
    blocks = re.findall(r"^```python\n(# pipeline: (.*?)\n.*?)^```", DOC.read_text(), re.S | re.M)
    return {name: body for body, name in blocks}


EXPECTED: dict[str, dict[str, Any]] = {
    "open-cd-like (Albumentations)": dict(
        rotate=(-180.0, 180.0), rotate_p=0.5, hflip=0.5, vflip=0.5, crop=(256, 256),
        color_jitter=(0.2, 0.2, 0.2, 0.05), color_jitter_paired=False, swap=0.5,
    ),
    "BIT-like (Albumentations)": dict(
        scale_jitter=(1.0, 1.2), crop=(256, 256), pad_if_needed=(256, 256), hflip=0.5,
        vflip=0.5, rot90=True, color_jitter=(0.3, 0.3, 0.3, 0.0), blur=0.5,
        blur_sigma=(0.1, 2.0), color_jitter_paired=False,
    ),
    "RAFT-Stereo-like (torchvision v2)": dict(
        resized_crop=(320, 720), crop_scale=(0.5, 1.0), crop_ratio=(2.0, 2.5),
        color_jitter=(0.4, 0.4, 0.4, round(0.5 / 3.14, 12)), erasing=0.5,
        erasing_scale=(0.01, 0.05), erasing_value=127.5, erasing_target="B",
        normalize_mean=(0.0,), normalize_std=(255.0,), out_dtype="float32",
    ),
    "TrivialAugmentWide + RandomResizedCrop + flip (torchvision v2)": dict(
        resized_crop=(224, 224), crop_scale=(0.08, 1.0), hflip=0.5,
        policy="trivial_augment_wide", policy_bins=31, out_dtype="float32",
        normalize_mean=(123.675, 116.28, 103.53), normalize_std=(58.395, 57.12, 57.375),
    ),
}  # fmt: skip


def test_the_four_documented_pipelines_are_there() -> None:
    assert sorted(pipelines()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_documented_pipeline_translates(name: str) -> None:
    library = "albumentations" if "Albumentations" in name else "torchvision"
    pytest.importorskip(library, reason=f"{library} is not installed here")
    namespace: dict[str, Any] = {}
    try:
        exec(compile(pipelines()[name], f"docs:{name}", "exec"), namespace)
    except ValueError as e:
        if not (found := MISSING.search(str(e))):
            raise
        pytest.skip(f"PairAugment lacks {found.group(1)} (being added)")
    augment = namespace["augment"]
    for key, value in EXPECTED[name].items():
        assert getattr(augment, key) == value, key


def stub(name: str, **attributes: Any) -> Any:
    """A stand-in of a library's transform: its class name and stored attributes."""
    obj = type(name, (), {})()
    vars(obj).update(attributes)
    return obj


def tv(pipeline: list[Any]) -> dict[str, Any]:
    return translated_options(pipeline, TORCHVISION, "torchvision")


def test_torchvision_rows_on_its_stored_attributes() -> None:
    """Attributes as torchvision 0.29 stores them (ColorJitter(0.4) keeps (0.6, 1.4))."""
    pipeline = [
        stub("ToImage"),
        stub(
            "RandomCrop",
            size=(8, 8),
            padding=[2, 2, 2, 2],
            pad_if_needed=False,
            fill=7,
            padding_mode="constant",
        ),
        stub("RandomHorizontalFlip", p=0.5),
        stub(
            "ColorJitter",
            brightness=(0.6, 1.4),
            contrast=None,
            saturation=(0.0, 2.0),
            hue=(-0.1, 0.1),
        ),
        stub("RandomApply", p=0.5, transforms=[stub("RandomGrayscale", p=1.0)]),
        stub("RandomSolarize", p=0.3, threshold=0.5),
        stub("ToDtype", dtype="torch.float32", scale=True),
        stub("Normalize", mean=[0.5], std=[0.25], inplace=False),
    ]
    assert tv(pipeline) == {
        "crop": (8, 8), "crop_padding": 2, "fill": 7.0, "hflip": 0.5,
        "color_jitter": (0.4, 0.0, 1.0, 0.1), "grayscale": 0.5, "solarize": 0.3,
        "solarize_threshold": 0.5, "out_dtype": "float32", "normalize_mean": (127.5,),
        "normalize_std": (63.75,),
    }  # fmt: skip


@pytest.mark.parametrize(
    "pipeline, message",
    [
        ([stub("RandomOrder")], r"RandomOrder is not supported; supported: .*CenterCrop"),
        ([stub("ColorJitter", brightness=(0.5, 1.2), contrast=None, saturation=None, hue=None)],
         r"ColorJitter: brightness=\(0.5, 1.2\): ours draws from \(0.8, 1.2\)"),
        ([stub("Grayscale", num_output_channels=1)], r"Grayscale: num_output_channels=1"),
        ([stub("RandomRotation", degrees=[-9, 9], interpolation="nearest", expand=False,
               center=None, fill=0)], r"RandomRotation: interpolation='nearest': ours is bilinear"),
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
        ([stub("RandomApply", p=0.5, transforms=[stub("ColorJitter", brightness=(0.6, 1.4),
               contrast=None, saturation=None, hue=None)])],
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


# -- against the libraries' own objects ------------------------------------------------------
def test_albumentations_rows_on_its_objects() -> None:
    A = pytest.importorskip("albumentations", reason="albumentations is not installed here")
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


def test_albumentations_refusals_name_the_transform() -> None:
    A = pytest.importorskip("albumentations", reason="albumentations is not installed here")
    cases = [
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
    ]  # fmt: skip
    for pipeline, message in cases:
        with pytest.raises(ValueError, match=message):
            PairAugment.from_albumentations(pipeline)


def test_yaml_block_builds_with_the_librarys_defaults(tmp_path: Path) -> None:
    pytest.importorskip("albumentations", reason="albumentations is not installed here")
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
    with pytest.raises(ValueError, match="albumentations has no transform 'Flip3D'"):
        PairAugment.from_dict({"albumentations": [{"Flip3D": {}}]})
    with pytest.raises(TypeError, match=r"each entry is \{ClassName"):
        PairAugment(albumentations=[{"HorizontalFlip": {}, "VerticalFlip": {}}])


def test_yaml_block_through_the_lightning_cli(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("albumentations", reason="albumentations is not installed here")
    from jsonargparse import ArgumentParser

    from ffcv_pairs.lightning.datamodule import PairDataModule

    parser = ArgumentParser()
    parser.add_class_arguments(PairDataModule, "data", sub_configs=True)
    cfg = parser.parse_string(
        "data:\n  train_path: x.beton\n  batch_size: 2\n  augment:\n    albumentations:\n"
        "      - VerticalFlip: {p: 0.25}\n    swap: 0.5\n"
    )
    augment = parser.instantiate(cfg).data.augment
    assert augment == PairAugment(vflip=0.25, swap=0.5)


def test_torchvision_rows_on_its_objects() -> None:
    """With torchvision installed (``make translators-check``): its constructors' arguments,
    stored as it stores them, give the options the stand-ins above give."""
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("torchvision.transforms.v2", reason="torchvision is not installed")
    pipeline = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomCrop(8, padding=2, fill=7),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.4, saturation=1.0, hue=0.1),
            v2.RandomApply([v2.RandomGrayscale(p=1.0)], p=0.5),
            v2.RandomSolarize(threshold=0.5, p=0.3),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.5], std=[0.25]),
        ]
    )
    assert tv([pipeline]) == tv(
        [
            stub("RandomCrop", size=(8, 8), padding=[2, 2, 2, 2], pad_if_needed=False, fill=7,
                 padding_mode="constant"),
            stub("RandomHorizontalFlip", p=0.5),
            stub("ColorJitter", brightness=(0.6, 1.4), contrast=None, saturation=(0.0, 2.0),
                 hue=(-0.1, 0.1)),
            stub("RandomApply", p=0.5, transforms=[stub("RandomGrayscale", p=1.0)]),
            stub("RandomSolarize", p=0.3, threshold=0.5),
            stub("ToDtype", dtype="torch.float32", scale=True),
            stub("Normalize", mean=[0.5], std=[0.25], inplace=False),
        ]
    )  # fmt: skip
    for bad, message in [
        (v2.RandomRotation(10), "interpolation='nearest'"),
        (v2.Grayscale(), "num_output_channels=1"),
        (v2.RandomOrder([v2.RandomInvert()]), "RandomOrder is not supported"),
    ]:
        with pytest.raises(ValueError, match=message):
            tv([bad])


def test_rows_of_the_options_being_added() -> None:
    """The rows for the options other changes add (``rotate``, ``affine_*``, ``blur``, ...)
    give the documented options; PairAugment-level tests of them skip until the options
    exist (see test_documented_pipeline_translates)."""
    assert tv(
        [
            stub("Resize", size=[32, 48], interpolation="bilinear", max_size=None, antialias=True),
            stub("RandomRotation", degrees=[-9.0, 9.0], interpolation="bilinear", expand=False,
                 center=None, fill=3),
            stub("RandomAffine", degrees=[0.0, 0.0], translate=(0.1, 0.2), scale=(0.9, 1.1),
                 shear=None, interpolation="bilinear", fill=3, center=None),
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


def test_albumentations_rows_of_the_options_being_added() -> None:
    A = pytest.importorskip("albumentations", reason="albumentations is not installed here")
    from ffcv_pairs.augment.translate_albumentations import ALBUMENTATIONS

    pipeline = [
        A.LongestMaxSize(max_size=64),
        A.PadIfNeeded(64, 64, border_mode=1),
        A.Transpose(p=0.5),
        A.D4(p=1),
        A.Rotate(limit=30, p=0.3, border_mode=1),
        A.Affine(scale=(0.9, 1.1), translate_percent=(-0.1, 0.1), rotate=(-5, 5), p=0.6,
                 border_mode=1),
        A.RandomScale(scale_limit=0.2, p=1),
        A.GaussianBlur(blur_limit=(5, 5), sigma_limit=0, p=0.4),
        A.ImageCompression(quality_range=(50, 90), p=0.2),
        A.Erasing(p=0.3, fill="random"),
    ]  # fmt: skip
    options = translated_options(pipeline, ALBUMENTATIONS, "albumentations")
    assert options == {
        "resize_longest": 64, "pad_if_needed": (64, 64), "pad_mode": "edge", "transpose": 0.5,
        "d4": True, "rotate": (-30.0, 30.0), "rotate_p": 0.3, "affine_degrees": (-5.0, 5.0),
        "affine_scale": (0.9, 1.1), "affine_shear": (0.0, 0.0, 0.0, 0.0), "affine_p": 0.6,
        "affine_translate": (0.1, 0.1), "scale_jitter": (0.8, 1.2), "blur": 0.4,
        "blur_sigma": (1.1, 1.1), "blur_kernel": 5, "blur_paired": True, "jpeg": 0.2,
        "jpeg_quality": (50, 90), "jpeg_paired": True, "erasing": 0.3,
        "erasing_scale": (0.02, 0.33), "erasing_ratio": (0.3, 3.3), "erasing_value": "random",
        "erasing_target": "both",
    }  # fmt: skip
