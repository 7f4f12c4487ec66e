"""The whole CPU path gives the same bytes with the LLVM intrinsics and with their plain
twins: the writer's image statistics (the 64- and 48-byte sums) and every loaded batch of
three augmentations that, together, call all twelve (a padded crop with flips and
photometric ops: the byte moves and the sums; resized crops with float16 and bfloat16
outputs: the resize steps, the prefetch and the float bits).

The kind is chosen once per process (``FFCV_PAIRS_PLAIN_KERNELS``), so this process computes
a digest per case with its own kind and a subprocess does the same with the other kind,
on the same seeded data. The reference tests (test_augment, test_augops) check the values
within their tolerances; this one checks the two kinds byte for byte.

The loaders run on one thread: the serial kernels call the same intrinsics as the parallel
ones (test_stand_ins checks that the two give the same bytes), and on an empty cache the
parallel kernels' compile (more than the serial kernel's) would check nothing more. The
digested epoch starts once the kernels serve: on an empty cache the first batches come
from numpy stand-ins while the kernels compile, and those would check nothing of the twins.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs
from ffcv_pairs.format.stats import stats_path
from ffcv_pairs.kernels import twins
from ffcv_pairs.kernels.stand_in import settled
from ffcv_pairs.warmup import _settle

CASES = {
    "chw crop, padding, flips, brightness, contrast": (
        (3, 20, 24),
        PairAugment(
            crop=(16, 24),  # the image's width: the rows' runs and gaps take fill_gap
            crop_padding=3,
            hflip=0.5,
            vflip=0.5,
            brightness=0.3,
            contrast=0.3,
            contrast_paired=False,
        ),
    ),
    "hwc resized crop, turns, float16": (
        (20, 24, 3),
        PairAugment(
            resized_crop=(12, 12),
            crop_scale=(0.3, 1.0),
            hflip=0.5,
            rot90=True,
            normalize_mean=(100.0, 110.0, 120.0),
            normalize_std=(50.0, 55.0, 60.0),
            out_dtype="float16",
        ),
    ),
    "chw resized crop, bfloat16": (
        (3, 24, 24),
        PairAugment(
            resized_crop=(13, 12),  # a downscale by up to 2: the taps fit blend8's windows
            crop_scale=(0.5, 1.0),
            vflip=0.5,
            contrast=0.2,
            normalize_mean=(100.0,) * 3,
            normalize_std=(50.0,) * 3,
            out_dtype="bfloat16",
        ),
    ),
}


def digests(out: Path) -> dict[str, str]:
    """Per case: SHA-256 of the image statistics the writer stored and of every batch."""
    found = {}
    for i, (name, (shape, aug)) in enumerate(CASES.items()):
        a = np.random.default_rng(i).integers(0, 256, (40, *shape), dtype=np.uint8)
        path = out / f"{i}.beton"
        source = ArraySource(a, a[::-1].copy(), np.arange(40))
        write_pairs(source, path, page_size=1 << 16, progress=False)
        assert stats_path(path).exists(), "no image statistics: the sums would go untested"
        h = hashlib.sha256(stats_path(path).read_bytes())
        loader = make_loader(
            path,
            batch_size=16,
            order="sequential",
            seed=3,
            augment=aug,
            drop_last=False,
            num_threads=1,
            device="cpu",
        )
        _settle(loader)  # batches, as `ffcv-pairs warmup` reads them, until the kernels serve
        assert settled(), f"{name}: the kernels still do not serve"
        loader.set_epoch(1)
        for batch in loader:
            for t in batch:
                h.update(t.contiguous().view(-1).view(torch.uint8).numpy())
        found[name] = h.hexdigest()
    return found


OTHER_KIND = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from test_kernel_identity import digests
from ffcv_pairs.kernels import twins
print(json.dumps({"plain": twins.PLAIN, "digests": digests(Path(sys.argv[2]))}))
"""


@pytest.mark.slow
def test_intrinsics_and_twins_give_the_same_bytes_end_to_end(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "this", tmp_path / "other"
    mine.mkdir()
    theirs.mkdir()
    env = {**os.environ, "FFCV_PAIRS_PLAIN_KERNELS": "0" if twins.PLAIN else "1"}
    other_kind = subprocess.Popen(  # compiles while this process does (the cost is compiling)
        [sys.executable, "-c", OTHER_KIND, str(Path(__file__).parent), str(theirs)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        here = digests(mine)
        stdout, stderr = other_kind.communicate(timeout=900)
    finally:
        other_kind.kill()
    assert other_kind.returncode == 0, stderr[-3000:]
    other = json.loads(stdout.strip().splitlines()[-1])
    assert other["plain"] is not twins.PLAIN
    differ = [name for name in here if here[name] != other["digests"][name]]
    assert not differ, f"the plain twins change the bytes of: {differ}"
