"""numba's disk cache never serves a kernel built against an older version of a
function in another file (see ffcv_pairs/kernels/_cache.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ffcv_pairs
from ffcv_pairs.kernels import _cache

PACKAGE = Path(ffcv_pairs.__file__).parent

# geometry_params (geometry.py) inlines the hash from hashing.py.
PROBE = """
import json, numpy as np
from ffcv_pairs.kernels.geometry import GeometryConfig, geometry_params
g = GeometryConfig(0.5, 0.0, False, 8, 8, 0, 1.0, 1.0, 1.0, 1.0, 0, 0, 0, False, False, True, False)
clock = np.array([7, 1], dtype=np.int64)
flips = [int(geometry_params(g, clock, i, 0, 8, 8).hflip) for i in range(64)]
print(json.dumps({"flips": flips, "hits": sum(geometry_params.stats.cache_hits.values())}))
"""


def _probe(root: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root), "NUMBA_CACHE_DIR": ""}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_change_in_another_kernel_file_recompiles_its_callers(tmp_path: Path) -> None:
    copy = tmp_path / "ffcv_pairs"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    first = _probe(tmp_path)
    again = _probe(tmp_path)
    assert first["hits"] == 0 and again["hits"] == 1, (first, again)  # the cache is used
    assert again["flips"] == first["flips"]
    hashing = copy / "kernels" / "hashing.py"
    text = hashing.read_text()
    assert "0xBF58476D1CE4E5B9" in text
    hashing.write_text(text.replace("0xBF58476D1CE4E5B9", "0xBF58476D1CE4E5B7"))
    changed = _probe(tmp_path)
    assert changed["hits"] == 0, "a stale kernel was loaded from the cache"
    assert changed["flips"] != first["flips"]


def test_the_digest_covers_every_kernel_source(tmp_path: Path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    before = _cache.kernel_sources_digest(tmp_path)
    (tmp_path / "b.py").write_text("# b.py, edited\n")
    assert _cache.kernel_sources_digest(tmp_path) != before
    (tmp_path / "c.py").write_text("")
    assert len({before, _cache.kernel_sources_digest(tmp_path)}) == 2
