"""The policies' ops against torchvision's own (``_apply_image_or_video_transform`` of v2's
``TrivialAugmentWide`` and ``RandAugment``, with their magnitude tables), op by op, at
several bins and both signs. Runs where torchvision is installed: ``make translators-check``
(bench/.venv-torchvision); skipped in the main venv, where torchvision cannot install beside
torch 2.13.

Bounds: geometry equal but on at most 2% of the pixels (torchvision computes the sampling
grid in float32, ours in float64: a position on a pixel edge rounds either way; measured: 0);
uint8 tones within 1 (torchvision truncates after each step; ours rounds once), but Color
within 2 (torchvision truncates the grayscale to uint8 before blending, ours keeps it, and
the blend weight ``-magnitude`` reaches 0.99); float32 within 1e-5, but Equalize within
5/255 (torchvision takes floats to its 256 levels with ``to_dtype``, ``floor(t * 255.999)``,
ours as ``round(t * 255)``: the histograms, so the tables, differ; measured 4/255).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_policy_ops import apply

from ffcv_pairs.kernels.policy import POLICY_OPS

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2", reason="torchvision is not installed")

RNG = np.random.default_rng(79)
RGB8 = RNG.integers(0, 256, (3, 23, 30), dtype=np.uint8)
RGBF = RNG.random((3, 23, 30)).astype(np.float32)
GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


@pytest.mark.parametrize("policy", ["TrivialAugmentWide", "RandAugment"])
@pytest.mark.parametrize("image", [RGB8, RGBF], ids=["uint8", "float32"])
@pytest.mark.parametrize("op", POLICY_OPS)
def test_each_op_is_torchvisions(policy: str, image: np.ndarray, op: str) -> None:
    fill = 17 if image.dtype == np.uint8 else 0.25
    t = getattr(v2, policy)(fill=fill)
    _, h, w = image.shape
    table, signed = t._AUGMENTATION_SPACE[op]
    magnitudes = table(31, h, w)
    for level in (0, 5, 9, 18, 30) if magnitudes is not None else (None,):
        for sign in (1, -1) if signed else (1,):
            m = 0.0 if level is None else sign * float(magnitudes[level])
            ref = t._apply_image_or_video_transform(
                torch.from_numpy(image.copy()), op, m, interpolation=t.interpolation, fill=t._fill
            ).numpy()
            ours = apply(image, op, m, float(fill))
            if op in GEOMETRIC:
                differ = (ours != ref).any(axis=0).mean()
                assert differ <= 0.02, (op, m, differ)
            else:
                bound = 1.0 if image.dtype == np.uint8 else 1e-5
                if op == "Color" and bound == 1:
                    bound = 2.0
                if op == "Equalize" and bound < 1:
                    bound = 5 / 255
                err = np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max()
                assert err <= bound, (op, m, err)
