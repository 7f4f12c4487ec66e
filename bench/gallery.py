"""The picture in ``docs/augmentation.md``: one real photo pair, a row per op and policy.

Run ``python -m bench.gallery`` (writes ``docs/images/pair-ops.jpg``). A and B are the left
and right views of scikit-image's stereo pair (``motorcycle_left.png`` and
``motorcycle_right.png``, from the Middlebury 2014 stereo set), the same central square of
each, scaled down. Each row runs the loader on a file of that one pair stored
:data:`DRAWS` times (sample ids 0, 1, ...: each id is its own draw), with one op switched on
at a setting strong enough to see, and shows A and B of each draw side by side
(``tests/test_gallery.py`` keeps a row for every op).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ROWS", "gallery", "photo_pair"]

SIDE = 112
DRAWS = 3
OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "pair-ops.jpg"

#: (row title, PairAugment options); ``{}`` is the stored pair.
ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("stored A | B", {}),
    ("hflip + vflip", {"hflip": 0.5, "vflip": 0.5}),
    ("rot90", {"rot90": True}),
    ("transpose", {"transpose": 0.5}),
    ("d4", {"d4": True}),
    ("crop 80, padding 16", {"crop": (80, 80), "crop_padding": 16}),
    ("resized crop 112", {"resized_crop": (SIDE, SIDE), "crop_scale": (0.2, 1.0)}),
    ("translate 16", {"translate": (16, 16)}),
    ("rotate 30", {"rotate": 30}),
    ("rotate 30, reflect", {"rotate": 30, "pad_mode": "reflect"}),
    ("affine", {"affine_degrees": 10, "affine_scale": (0.8, 1.2), "affine_shear": 15}),
    ("scale jitter", {"scale_jitter": (0.6, 1.4), "crop": (SIDE, SIDE)}),
    ("perspective 0.5", {"perspective": 0.5, "perspective_p": 1.0}),
    ("elastic 100, 5", {"elastic": (100.0, 5.0)}),
    ("b_offset (4, 0)", {"b_offset": (4.0, 0.0)}),
    ("swap A and B", {"swap": 0.5}),
    ("brightness, per image", {"brightness": 0.4, "brightness_paired": False}),
    ("contrast, per image", {"contrast": 0.5, "contrast_paired": False}),
    ("noise 12, per image", {"noise_std": 12.0}),
    ("color_jitter", {"color_jitter": (0.4, 0.4, 0.4, 0.1)}),
    ("saturation 1", {"saturation": 1.0}),
    ("hue 0.3", {"hue": 0.3}),
    ("gamma 0.5-2", {"gamma": (0.5, 2.0)}),
    ("grayscale", {"grayscale": 0.5}),
    ("autocontrast", {"autocontrast": 1.0}),
    ("equalize", {"equalize": 1.0}),
    ("sharpness 4", {"sharpness": 1.0, "sharpness_factor": 4.0}),
    ("posterize 3 bits", {"posterize": 1.0, "posterize_bits": 3}),
    ("solarize", {"solarize": 1.0}),
    ("invert", {"invert": 0.5}),
    ("channel shuffle", {"channel_shuffle": 1.0}),
    ("gaussian blur", {"blur": 1.0, "blur_sigma": (0.5, 3.0)}),
    ("jpeg quality 5-30", {"jpeg": 1.0, "jpeg_quality": (5, 30)}),
    ("erasing, both alike", {"erasing": 1.0}),
    ("erasing, each apart", {"erasing": 1.0, "erasing_target": "each"}),
    ("erasing, B only", {"erasing": 1.0, "erasing_target": "B"}),
    ("TrivialAugmentWide", {"policy": "trivial_augment_wide"}),
    ("RandAugment", {"policy": "rand_augment"}),
)


def photo_pair(side: int = SIDE) -> tuple[np.ndarray, np.ndarray]:
    """A and B, ``(3, side, side)`` uint8: the central square of scikit-image's left and right
    stereo views, resized to ``side``."""
    import importlib.util

    from PIL import Image

    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the gallery needs scikit-image's photos: pip install scikit-image")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    views = []
    for name in ("motorcycle_left.png", "motorcycle_right.png"):
        photo = Image.open(folder / name).convert("RGB")
        w, h = photo.size
        box = ((w - h) // 2, 0, (w - h) // 2 + h, h)
        small = photo.crop(box).resize((side, side), Image.Resampling.BILINEAR)
        views.append(np.asarray(small).transpose(2, 0, 1).copy())
    return views[0], views[1]


def _draws(path: Path, options: dict[str, Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    from ffcv_pairs import PairAugment, make_loader

    aug = PairAugment(**options, channels="first") if options else None
    loader = make_loader(path, batch_size=DRAWS, augment=aug, order="sequential", seed=3)
    batch = next(iter(loader))
    a, b = (np.asarray(x) for x in batch[:2])
    return [(a[i], b[i]) for i in range(DRAWS)]


def gallery(out: Path = OUT) -> None:
    """Render the picture to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ffcv_pairs import ArraySource, write_pairs

    a, b = photo_pair()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pair.beton"
        source = ArraySource(np.stack([a] * DRAWS), np.stack([b] * DRAWS), np.zeros(DRAWS))
        write_pairs(source, path, workers=1, progress=False)
        shown = [(title, _draws(path, opts)) for title, opts in ROWS]
    size = (2 * DRAWS * 0.95 + 1.6, len(shown) * 0.98 + 0.25)
    fig, axes = plt.subplots(len(shown), 2 * DRAWS, figsize=size, squeeze=False)
    for r, (title, draws) in enumerate(shown):
        for d, pair in enumerate(draws):
            for t, img in enumerate(pair):
                ax = axes[r][2 * d + t]
                ax.imshow(np.clip(img, 0, 255).astype(np.uint8).transpose(1, 2, 0))
                ax.set_xticks([])
                ax.set_yticks([])
                if r == 0:
                    ax.set_title(f"draw {d}: {'AB'[t]}", fontsize=7)
        axes[r][0].set_ylabel(title, fontsize=7, rotation=0, ha="right", va="center")
    width, height = fig.get_size_inches()
    fig.subplots_adjust(
        left=1.5 / width, right=0.99, top=1 - 0.25 / height, bottom=0.005, wspace=0.04, hspace=0.06
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, pil_kwargs={"quality": 85})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gallery", description=__doc__)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    gallery(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
