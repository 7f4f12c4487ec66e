"""The user-scale harness (``python -m bench --user-scale N``), small: every section of the
report is there and everything it wrote is gone; never checks a timing.

Kept out of ``make test`` (it spawns ~60 processes): run it with
``BENCH_USER_SCALE=1 .venv/bin/python -m pytest tests/test_user_scale.py -q``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).parents[1]

pytestmark = pytest.mark.skipif(
    os.environ.get("BENCH_USER_SCALE") != "1", reason="set BENCH_USER_SCALE=1 to run"
)


def test_patched_files_are_what_torch_save_writes(tmp_path: Path) -> None:
    """Every patched file loads, holds its seeded pair, passes zip CRCs, and is byte for
    byte what ``torch.save`` writes for the same tensor (but the random serialization id)."""
    from bench.scale.user_data import CHUNK, SourceLayout, make_chunk, make_source

    n = CHUNK + 2000  # two chunks, index widths 1..5
    layout = SourceLayout(n, (1, 4, 4), 7, 3, 1000, tmp_path / "pt", tmp_path / "packs")
    make_source(layout, workers=2)
    rng = np.random.default_rng(0)
    for i in {0, 9, 10, 99, 100, 9999, 10000, n - 1, *rng.integers(0, n, 20).tolist()}:
        a, b, labels = make_chunk(layout, i // CHUNK)
        want = {"A_images": a[i % CHUNK], "B_images": b[i % CHUNK], "labels": labels[i % CHUNK]}
        for kind, value in want.items():
            path = layout.src / f"train_{kind}_{i}.pt"
            got = torch.load(path, weights_only=True)
            assert got.dtype == (torch.uint8 if kind != "labels" else torch.int64)
            np.testing.assert_array_equal(got.numpy(), value)
            with zipfile.ZipFile(path) as z:
                assert z.testzip() is None
                assert {f.split("/")[0] for f in z.namelist()} == {path.stem}
            ref = tmp_path / "ref" / path.name
            ref.parent.mkdir(exist_ok=True)
            torch.save(torch.from_numpy(np.array(value)), ref)
            mine, theirs = path.read_bytes(), ref.read_bytes()
            assert len(mine) == len(theirs)
            differ = [k for k in range(len(mine)) if mine[k] != theirs[k]]
            # Only the serialization id (a per-process sequence) differs: its digits and
            # CRCs (the central directory's CRC sits 30 bytes before the record's
            # "<stem>/.data/serialization_id" name).
            ids = [m for m in range(len(theirs)) if theirs.startswith(b"serialization_id", m)]
            far = [k for k in differ if not any(m - 100 < k < m + 200 for m in ids)]
            assert not far, (path, far)
    assert len(list(layout.packs.iterdir())) == -(-n // 1000)
    pack = torch.load(layout.packs / "train_batch_11.pt", weights_only=True)
    a, b, labels = make_chunk(layout, 1)
    np.testing.assert_array_equal(pack[5][1].numpy(), b[1005])
    assert int(pack[5][2]) == labels[1005]


def test_refuses_when_disk_is_short(tmp_path: Path) -> None:
    from bench.scale.user_data import SourceLayout, check_space

    layout = SourceLayout(10, (1, 4, 4), 7, 3, 1000, tmp_path / "w" / "pt", tmp_path / "w" / "p")
    with pytest.raises(ValueError, match="not enough room"):
        check_space(layout, beton_bytes=1 << 60)
    assert not (tmp_path / "w").exists()


def test_memory_floor_stops_the_row_and_kills_every_process(tmp_path: Path) -> None:
    """A floor above all of the machine's memory: the watchdog fires at once, the row is
    reported as stopped by memory and no process of it is left."""
    import psutil

    from bench.scale.user_data import SourceLayout, make_source
    from bench.scale.user_node import run_row
    from bench.scale.user_ranks import RowSpec

    layout = SourceLayout(4096, (1, 4, 4), 7, 3, 1000, tmp_path / "pt", tmp_path / "packs")
    make_source(layout, workers=1)
    spec = RowSpec(
        kind="lists",
        title="lists",
        world_size=2,
        batch_size=8,
        workers=2,
        n=layout.n,
        pack_size=1000,
        beton="",
        src=str(layout.src),
        packs=str(layout.packs),
        crop=(4, 4),
        crop_padding=0,
        seed=0,
        time_box=600.0,
        cap=900.0,
    )

    def ours() -> set[int]:  # children of this test, but multiprocessing's resource tracker
        kids = psutil.Process().children(recursive=True)
        return {p.pid for p in kids if "resource_tracker" not in " ".join(p.cmdline())}

    before = ours()
    total = psutil.virtual_memory().total / (1 << 30)
    row = run_row(spec, floor_gib=total + 1, start_cap=300.0)
    assert row["stopped"] == "memory"
    assert row["tripped_gib"] is not None and row["left_alive"] == 0
    assert not any(r.get("done") for r in row["ranks"])
    assert ours() <= before


@pytest.mark.slow
def test_user_scale_writes_every_section_and_cleans_up(tmp_path: Path) -> None:
    """The whole harness, small: 4096 pairs, 1 s per row, 2 and 1 workers per rank
    (``--user-scale 4096 --user-seconds 1`` but for the workers, to keep it short)."""
    from bench.scale.user_report import SECTIONS
    from bench.scale.user_scale import UserScaleConfig, run_user_scale

    out, work = tmp_path / "results", tmp_path / "work"
    cfg = UserScaleConfig(
        n=4096, time_box=1.0, workers=(2, 1), pack_workers=1, work=work, out=out, date="smoke"
    )
    md_path = run_user_scale(cfg, "smoke")

    md = md_path.read_text()
    for heading in SECTIONS:
        assert f"\n{heading}" in md, heading
    assert (out / "user-scale-smoke-chart.png").stat().st_size > 0
    res = json.loads((out / "user-scale-smoke.json").read_text())
    assert [t["verdict"] in ("PASS", "FAIL") for t in res["targets"]] == [True] * 4
    assert [(r["kind"], r["workers"]) for r in res["rows"]] == [
        ("ours", 0),
        ("lists", 2),
        ("lists", 1),
        ("packs", 1),
    ]
    for row in res["rows"]:
        assert row["left_alive"] == 0
        assert all("error" not in r and r["samples"] > 0 for r in row["ranks"]), row["ranks"]
        assert row["memory"]["peak_mb"]["procs"] == 4 * (1 + row["workers"])
    assert res["convert"]["returncode"] == 0 and res["convert"]["listing"]["entries"] == 3 * 4096
    assert res["cleanup"]["left"] == []
    assert not work.exists()


def test_refusal_is_one_line(tmp_path: Path) -> None:
    work = tmp_path / "busy"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    cmd = [sys.executable, "-m", "bench", "--user-scale", "4096", "--work", str(work)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not empty" in proc.stderr
    assert (work / "keep.txt").exists()
