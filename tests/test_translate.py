"""The translators (``PairAugment.from_torchvision``, ``from_albumentations``, the YAML
block): the pipelines of docs/augmentation.md ("Bringing a pipeline") as printed, in Python
and in YAML, each translated and loaded from a small uint8 file, and the torchvision rows and
YAML block against torchvision's own objects (torchvision 0.29 in the venv of ``make
translators-check``; skipped, saying why, where it is not installed: the stand-ins of
tests/test_translate_rows.py run everywhere). Albumentations:
tests/test_translate_albumentations.py.

A pipeline needing an option another change is adding is skipped, saying which, until
PairAugment has it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.translate import translated_options
from ffcv_pairs.augment.translate_torchvision import TORCHVISION

DOC = Path(__file__).resolve().parent.parent / "docs" / "augmentation.md"
MISSING = re.compile(r"needs (?:PairAugment )?option\(s\) (\[.*?\])")


def pipelines(language: str = "python") -> dict[str, str]:
    """The documented pipelines in ``language`` (python, yaml), by the name on their first
    line."""
    found = re.findall(
        rf"^```{language}\n(# pipeline: (.*?)\n.*?)^```", DOC.read_text(), re.S | re.M
    )
    return {name: body for body, name in found}


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
        erasing_scale=(0.01, 0.05), erasing_value=128.0, erasing_target="B",
        normalize_mean=(0.0,), normalize_std=(255.0,), out_dtype="float32",
    ),
    "TrivialAugmentWide + RandomResizedCrop + flip (torchvision v2)": dict(
        resized_crop=(224, 224), crop_scale=(0.08, 1.0), hflip=0.5,
        policy="trivial_augment_wide", policy_bins=31, out_dtype="float32",
        normalize_mean=(123.675, 116.28, 103.53), normalize_std=(58.395, 57.12, 57.375),
    ),
}  # fmt: skip
TORCHVISION_PIPELINES = sorted(name for name in EXPECTED if "torchvision" in name)


def test_the_documented_pipelines_are_there() -> None:
    assert sorted(pipelines()) == sorted(EXPECTED)
    assert sorted(pipelines("yaml")) == TORCHVISION_PIPELINES


def documented(name: str) -> PairAugment:
    """The ``augment`` of the documented Python pipeline ``name`` (skipped without its
    library, or while an option it needs is being added)."""
    library = "albumentations" if "Albumentations" in name else "torchvision"
    pytest.importorskip(library, reason=f"{library} is not installed here")
    namespace: dict[str, Any] = {}
    try:
        exec(compile(pipelines()[name], f"docs:{name}", "exec"), namespace)
    except ValueError as e:
        if not (found := MISSING.search(str(e))):
            raise
        pytest.skip(f"PairAugment lacks {found.group(1)} (being added)")
    return namespace["augment"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_documented_pipeline_translates(name: str) -> None:
    augment = documented(name)
    for key, value in EXPECTED[name].items():
        assert getattr(augment, key) == value, key


@pytest.fixture(scope="module")
def uint8_pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two seeded uint8 pairs of 3 x 260 x 260 (room for the documented 256 crops)."""
    a = np.random.default_rng(3).integers(0, 256, (2, 3, 260, 260), dtype=np.uint8)
    path = tmp_path_factory.mktemp("translate") / "pairs.beton"
    write_pairs(ArraySource(a, 255 - a, np.arange(2)), path, workers=1, progress=False)
    return path


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_documented_pipeline_loads_from_a_uint8_file(name: str, uint8_pairs: Path) -> None:
    """A translated example that make_loader refuses (an erasing value of 127.5 on uint8)
    fails here."""
    augment = documented(name)
    batch = next(iter(make_loader(uint8_pairs, batch_size=2, order="sequential", augment=augment)))
    assert batch.A.shape == batch.B.shape and batch.A.shape[:2] == (2, 3)


def _through_the_cli(block: dict[str, Any]) -> PairAugment:
    """The ``augment`` of a ``data:`` block as LightningCLI reads it (jsonargparse)."""
    from jsonargparse import ArgumentParser

    from ffcv_pairs.lightning.datamodule import PairDataModule

    parser = ArgumentParser()
    parser.add_class_arguments(PairDataModule, "data", sub_configs=True)
    data = {"train_path": "x.beton", "batch_size": 2, **block}
    return parser.instantiate(parser.parse_string(yaml.safe_dump({"data": data}))).data.augment


@pytest.mark.parametrize("name", TORCHVISION_PIPELINES)
def test_documented_yaml_gives_what_the_python_gives(name: str) -> None:
    """The YAML form of a documented pipeline (ToDtype's dtype as a name) through the parser
    LightningCLI uses equals the Python form."""
    python = documented(name)
    assert _through_the_cli(yaml.safe_load(pipelines("yaml")[name])["data"]) == python


def tv(pipeline: list[Any]) -> dict[str, Any]:
    return translated_options(pipeline, TORCHVISION, "torchvision")


def stub(name: str, **attributes: Any) -> Any:
    """A stand-in of a torchvision transform: its class name and stored attributes."""
    obj = type(name, (), {})()
    vars(obj).update(attributes)
    return obj


def test_torchvision_rows_on_its_objects() -> None:
    """With torchvision installed (``make translators-check``): its constructors' arguments,
    stored as it stores them, give the options the stand-ins give."""
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
    scaled = [v2.ToDtype(torch.float32, scale=True), v2.RandomRotation(10, interpolation=2,
              fill=0.5), v2.RandomErasing(value=0.5)]  # fmt: skip
    assert (tv(scaled)["fill"], tv(scaled)["erasing_value"]) == (128.0, 128.0)
    for bad, message in [
        (v2.RandomRotation(10), "interpolation='nearest'"),
        (v2.RandomAffine(10, interpolation=0), r"interpolation=0 \(PIL's nearest\)"),
        (v2.RandomRotation((10, -10), interpolation=2), r"RandomRotation: degrees=\(10.0, -10"),
        (v2.GaussianBlur((3, 5)), "ours takes one kernel size for height and width"),
        (v2.ColorJitter(brightness=(0.8, 1.0)), "ours needs a range symmetric around 1"),
        (v2.Grayscale(), "num_output_channels=1"),
        (v2.RandomOrder([v2.RandomInvert()]), "RandomOrder is not supported"),
    ]:
        with pytest.raises(ValueError, match=message):
            tv([bad])


def test_torchvision_yaml_block_builds_nested_transforms_and_dtypes() -> None:
    pytest.importorskip("torchvision", reason="torchvision is not installed here")
    blur = {"GaussianBlur": {"kernel_size": 5, "sigma": [0.1, 2.0]}}
    block = {"torchvision": [{"RandomApply": {"transforms": [blur], "p": 0.3}},
                             {"ToDtype": {"dtype": "float32", "scale": True}}]}  # fmt: skip
    augment = _through_the_cli({"augment": block})
    assert (augment.blur, augment.blur_kernel, augment.out_dtype) == (0.3, 5, "float32")
    assert augment.normalize_std == (255.0,)
    for spec, message in [
        ([{"ToDtype": {"dtype": "floot32"}}], r"^torchvision ToDtype: dtype='floot32' is not a "
         r"torch dtype"),
        ([{"RandomApply": {"transforms": [{"RandomOrder": {}}]}}], r"^torchvision RandomOrder "
         r"is not supported"),
        ([{"GaussianBlur": {"kernel_size": 4}}], r"^torchvision GaussianBlur\(kernel_size=4\): "
         r"Kernel size value should be an odd"),
        ([{"RandomRotation": {"degrees": 10, "interp": 2}}], r"^torchvision RandomRotation: "
         r"unknown argument\(s\) 'interp'; it takes degrees, interpolation"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=message) as caught:
            PairAugment(torchvision=spec)
        assert "\n" not in str(caught.value)
