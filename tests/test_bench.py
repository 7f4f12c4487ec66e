"""Smoke test of the benchmark: ``python -m bench --quick`` writes a complete report.

Checks that every contestant row and every table is there; never checks a timing.
The LitData / Streaming rows may say they could not run (no venvs in CI).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
TABLE_HEADINGS = (
    "## Targets",
    "## Throughput",
    "## a. Start-up",
    "## b. Writer",
    "## c. Total memory",
    "## d. Cold cache and read amplification",
    "## e. Augmentation ops",
    "## Machine",
)


@pytest.mark.slow
def test_quick_bench_writes_every_row_and_table(tmp_path: Path) -> None:
    from bench.contestants import CONTESTANTS

    out, work = tmp_path / "results", tmp_path / "work"
    cmd = [sys.executable, "-m", "bench", "--quick", "--out", str(out), "--work", str(work)]
    proc = subprocess.run(
        [*cmd, "--date", "smoke"], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    md = (out / "smoke.md").read_text()
    assert (out / "latest.md").read_text() == md
    for heading in TABLE_HEADINGS:
        assert heading in md, heading
    for contestant in CONTESTANTS.values():
        assert f"| {contestant.title}" in md, contestant.title
    assert "per-sample .pt" in md.split("## c. Total memory")[1]
    for verdict_line in (ln for ln in md.splitlines() if ln.startswith("| ffcv-pairs vs")):
        assert any(v in verdict_line for v in ("PASS", "MISS", "NOT MEASURED")), verdict_line

    res = json.loads((out / "smoke.json").read_text())
    assert set(res["throughput"]) == set(CONTESTANTS)
    for key in ("startup", "writer", "memory", "cold", "amplification", "targets", "machine"):
        assert res[key], key
    from bench.augops import AUG_ROWS

    for side in ("64", "224"):
        rows = res["augops"]["sizes"][side]["rows"]
        assert set(rows) == {r.key for r in AUG_ROWS}, side
        assert all(r["status"] == "ok" and r["best"] for r in rows.values()), side
        anchors = res["augops"]["sizes"][side]["anchors"]  # one anchor round per row round
        assert {len(a["rounds"]) for a in anchors.values()} == {len(rows["plain"]["runs"])}, side
    assert "realistic pipeline at 224x224 vs plain decode" in md
    assert {"pt_ranks_w4", "ours_4ranks"} <= set(res["memory"])
    from bench.writer_bench import JOBS

    assert len(res["writer"]["rows"]) == 2
    for n, row in res["writer"]["rows"].items():
        for job, title in JOBS.items():
            assert "rate" in row[job], (n, job, row[job])
            assert f"| {int(n):,} | {title} |" in md, (n, title)
    writer_targets = [t for t in res["targets"] if t["target"].startswith("writer")]
    assert len(writer_targets) == 3
    assert all(t["verdict"] in ("PASS", "MISS") for t in writer_targets), writer_targets
    for png in ("smoke-throughput.png", "smoke-memory.png"):
        assert (out / png).stat().st_size > 0, png


def test_user_scale_reads_what_the_writer_prints(tmp_path: Path, pairs_dir) -> None:
    """--user-scale runs only by hand (hours): its parsing of the writer's summary line and
    the imports it times are checked here, on the writer's real output."""
    from bench.user_convert import SUMMARY, WRITER_IMPORTS

    src = pairs_dir("per-sample", n=6)
    out = subprocess.run(
        [sys.executable, "writers/write_beton.py", str(src), str(tmp_path / "out"),
         "--split", "train", "--no-progress"],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    m = SUMMARY.search(out.stdout + out.stderr)
    assert m is not None and int(m.group(2)) == 6, out.stdout + out.stderr
    subprocess.run([sys.executable, "-c", WRITER_IMPORTS], check=True, timeout=300)


def test_user_row_stopped_before_its_second_batch_is_judged_by_its_life_rate() -> None:
    """The speed target of the user-scale report: a steady rate when the user's row has one,
    else all it delivered over its life; neither: not measured."""
    from bench.user_targets import _speed_target

    def res(user: dict) -> dict:
        ours = {"kind": "ours", "workers": 0, "rate": 500_000.0, "ranks": []}
        lists = {"kind": "lists", "workers": 12, "delivered": 256}
        return {"config": {"workers": [12, 4]}, "rows": [ours, {**lists, **user}]}

    def speed(user: dict) -> dict:
        return _speed_target(res(user))

    life = speed({"rate": None, "life_rate": 8.0, "life_s": 32.0})
    assert life["value"] == 62_500 and life["verdict"] == "PASS"
    assert "256 samples in 32.0 s" in life["note"]
    steady = speed({"rate": 10_000.0, "life_rate": 8.0, "life_s": 32.0})
    assert steady["value"] == 50 and steady["verdict"] == "FAIL"
    assert "life" not in steady["note"]
    assert speed({"rate": None, "life_rate": None})["verdict"] == "NOT MEASURED"
    nothing = speed(
        {"rate": None, "life_rate": None, "delivered": 0, "life_s": 96.6, "stopped": "memory"}
    )
    assert nothing["verdict"] == "NOT MEASURED"
    assert (
        "delivered no sample in the 97 s from launch until it was stopped (memory)"
        in nothing["note"]
    )
