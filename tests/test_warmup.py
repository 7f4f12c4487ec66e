"""`ffcv-pairs warmup` compiles ahead what a configuration's loader needs (issue 44)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import write_small_beton

LOAD = """
import sys
from ffcv_pairs import PairAugment, make_loader
aug = PairAugment(hflip=0.5, vflip=0.5)
loader = make_loader(sys.argv[1], batch_size=16, augment=aug, num_threads=1)
print(next(iter(loader))[0].shape)
plain = make_loader(sys.argv[1], batch_size=16, num_threads=1)  # the stand-in's, if not cached
print(next(iter(plain))[0].shape)
"""


def _run(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FFCV_PAIRS_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_a_loader_after_warmup_compiles_nothing(tmp_path: Path) -> None:
    """warmup's small file has another image size and sample count than the user's: kernels
    are typed, not sized, so the user's first batch finds them cached."""
    config = tmp_path / "train.yaml"  # a training config: the augment block under data:
    config.write_text(yaml.safe_dump({"data": {"augment": {"hflip": 0.5, "vflip": 0.5}}}))
    cache = tmp_path / "kernels"
    warm = _run(["-m", "ffcv_pairs", "warmup", "--augment", str(config), "--threads", "1"], cache)
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert "warmup: 1 pipeline" not in warm.stdout and "augment" in warm.stdout, warm.stdout
    assert "compiling the decode_pairs_serial kernel" in warm.stderr, warm.stderr
    path, _, _ = write_small_beton(tmp_path, n=100, shape=(3, 20, 12))
    first = _run(["-c", LOAD, str(path)], cache)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "torch.Size([16, 3, 20, 12])" in first.stdout
    assert "compiling" not in first.stderr, first.stderr


def test_warmup_refuses_a_bad_config_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "aug.yaml"
    config.write_text("augment:\n  hflip: 0.5\n  spin: 3\n")
    out = _run(["-m", "ffcv_pairs", "warmup", "--augment", str(config)], tmp_path / "k")
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "spin" in out.stderr, out.stderr


FUSED = """
import sys
from ffcv_pairs import PairAugment, make_loader
loader = make_loader(sys.argv[1], batch_size=16, num_threads=2,
                     augment=PairAugment(hflip=0.5, brightness=0.2))
print(next(iter(loader))[0].shape)
"""


def test_warmup_waits_for_the_kernels_compiling_behind_a_stand_in(tmp_path: Path) -> None:
    """A numpy stand-in serves warmup's first batch of a flip and brightness while the fused
    serial kernel compiles in the background, and that kernel serves while the parallel one
    does: warmup reads on until both are cached, so the user's two-thread loader compiles
    nothing."""
    config = tmp_path / "aug.yaml"
    config.write_text(yaml.safe_dump({"hflip": 0.5, "brightness": 0.2}))
    cache = tmp_path / "kernels"
    args = ["-m", "ffcv_pairs", "warmup", "--augment", str(config), "--threads", "1", "2"]
    warm = _run(args, cache)
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert "fused_pairs_serial kernel in the background" in warm.stderr, warm.stderr
    path, _, _ = write_small_beton(tmp_path, n=100, shape=(3, 20, 12))
    first = _run(["-c", FUSED, str(path)], cache)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "compiling" not in first.stderr, first.stderr
