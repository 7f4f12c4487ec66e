"""The user-scale harness (``python -m bench --user-scale N`` / ``--user-scale-sizes``), small:
every section of the report is there and everything it wrote is gone; never checks a timing.

The pure parts (the memory fit and its extrapolation, the size the speed ratio is measured at,
the report from a made-up result, the settings) run in ``make test``. The rest spawns ~60
processes and is kept out of it: run it with
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

gated = pytest.mark.skipif(
    os.environ.get("BENCH_USER_SCALE") != "1", reason="set BENCH_USER_SCALE=1 to run"
)


@gated
def test_patched_files_are_what_torch_save_writes(tmp_path: Path) -> None:
    """Every patched file loads, holds its seeded pair, passes zip CRCs, and is byte for
    byte what ``torch.save`` writes for the same tensor (but the random serialization id)."""
    from bench.scale.user_data import CHUNK, SourceSpec, make_chunk, make_source

    n = CHUNK + 2000  # two chunks, index widths 1..5
    source = SourceSpec(n, (1, 4, 4), 7, 3, 1000, tmp_path / "pt", tmp_path / "packs")
    make_source(source, workers=2)
    rng = np.random.default_rng(0)
    for i in {0, 9, 10, 99, 100, 9999, 10000, n - 1, *rng.integers(0, n, 20).tolist()}:
        a, b, labels = make_chunk(source, i // CHUNK)
        want = {"A_images": a[i % CHUNK], "B_images": b[i % CHUNK], "labels": labels[i % CHUNK]}
        for kind, value in want.items():
            path = source.src / f"train_{kind}_{i}.pt"
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
    assert len(list(source.packs.iterdir())) == -(-n // 1000)
    pack = torch.load(source.packs / "train_batch_11.pt", weights_only=True)
    a, b, labels = make_chunk(source, 1)
    np.testing.assert_array_equal(pack[5][1].numpy(), b[1005])
    assert int(pack[5][2]) == labels[1005]


@gated
def test_refuses_when_disk_is_short(tmp_path: Path) -> None:
    from bench.scale.user_data import SourceSpec, check_space

    source = SourceSpec(10, (1, 4, 4), 7, 3, 1000, tmp_path / "w" / "pt", tmp_path / "w" / "p")
    with pytest.raises(ValueError, match="not enough room"):
        check_space(source, beton_bytes=1 << 60)
    assert not (tmp_path / "w").exists()


@gated
def test_memory_floor_stops_the_row_and_kills_every_process(tmp_path: Path) -> None:
    """A floor above all of the machine's memory: the watchdog fires at once, the row is
    reported as stopped by memory and no process of it is left."""
    import psutil

    from bench.scale.user_data import SourceSpec, make_source
    from bench.scale.user_node import run_row
    from bench.scale.user_ranks import RowSpec

    source = SourceSpec(4096, (1, 4, 4), 7, 3, 1000, tmp_path / "pt", tmp_path / "packs")
    make_source(source, workers=1)
    spec = RowSpec(
        kind="lists",
        title="lists",
        world_size=2,
        batch_size=8,
        workers=2,
        n=source.n,
        pack_size=1000,
        beton="",
        src=str(source.src),
        packs=str(source.packs),
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
    row = run_row(spec, floor_gib=total + 1)
    assert row["stopped"] == "memory"
    assert row["tripped_gib"] is not None and row["left_alive"] == 0
    assert not any(r.get("done") for r in row["ranks"])
    assert ours() <= before


@gated
@pytest.mark.slow
def test_user_scale_at_two_sizes_writes_every_section_and_cleans_up(tmp_path: Path) -> None:
    """The whole harness, small: one source of 8192 pairs read at 4096 and 8192, 1 s per row,
    2 and 1 workers per rank, 2 runs of 1 rank alone (``--user-scale-sizes 4096,8192
    --user-seconds 1`` but for the workers, to keep it short)."""
    from bench.scale.user_report import SECTIONS
    from bench.scale.user_scale import UserScaleConfig, run_user_scale

    out, work = tmp_path / "results", tmp_path / "work"
    cfg = UserScaleConfig(
        sizes=(8192, 4096),
        time_box=1.0,
        workers=(2, 1),
        pack_workers=1,
        alone_runs=2,
        alone_seconds=0.5,
        work=work,
        out=out,
        date="smoke",
    )
    assert cfg.sizes == (4096, 8192) and cfg.n == 8192
    md_path = run_user_scale(cfg, "smoke")

    md = md_path.read_text()
    for heading in SECTIONS:
        assert f"\n{heading}" in md, heading
    for chart in ("chart", "memory"):
        assert (out / f"user-scale-smoke-{chart}.png").stat().st_size > 0
    assert "](user-scale-smoke-memory.png)" in md
    res = json.loads((out / "user-scale-smoke.json").read_text())
    assert "error" not in res
    assert [t["verdict"] in ("PASS", "FAIL") for t in res["targets"]] == [True] * 5, res["targets"]
    assert [e["n"] for e in res["sizes"]] == [4096, 8192]
    for entry in res["sizes"]:
        n, conv = entry["n"], entry["convert"]
        assert conv["returncode"] == 0 and conv["pairs"] == n, conv  # --limit n: the first n
        assert ("--limit" in conv["command"]) == (n < cfg.n)
        assert [
            (r["kind"], r["workers"], r["ranks"][0].get("samples", 0) > 0) for r in entry["rows"]
        ] == [("ours", 0, True), ("lists", 2, True), ("lists", 1, True), ("packs", 1, True)]
        for row in entry["rows"]:
            assert row["left_alive"] == 0 and row["wall_s"] <= row["budget_s"] + 30
            assert all("error" not in r and r["samples"] > 0 for r in row["ranks"]), row["ranks"]
            assert row["memory"]["peak_mb"]["procs"] == 4 * (1 + row["workers"])
    assert res["sizes"][-1]["convert"]["listing"]["entries"] == 3 * 8192
    assert "listing" not in res["sizes"][0]["convert"]
    alone = res["sizes"][-1]["alone"]
    assert len(alone) == 2 and "alone" not in res["sizes"][0]
    assert [len(e["warm_s"]) for e in res["sizes"]] == [1, 2]  # again before the runs alone
    for run in alone:
        assert len(run["ranks"]) == 1 and run["ranks"][0]["startup_s"] > 0, run["ranks"]
        assert run["left_alive"] == 0
    assert res["startup"]["alone_s"] is not None and res["startup"]["cpu_s"] is not None
    assert {(c["kind"], c["field"]) for c in res["curves"]} >= {
        ("ours", "pss_own"),
        ("lists", "pss"),
    }
    assert all(len(c["points"]) == 2 and c["fit"] for c in res["curves"])
    assert res["cleanup"]["left"] == []
    assert not work.exists()


@gated
def test_a_row_ends_by_its_deadline_whatever_its_ranks_do(tmp_path: Path) -> None:
    """A row whose ranks cannot finish in time (a cap of 1 s, a time box of 10 min) is over
    ``cap + ROW_MARGIN_S`` after launch, plus killing it, with no process left."""
    import psutil

    from bench.scale.user_data import SourceSpec, make_source
    from bench.scale.user_node import ROW_MARGIN_S, run_row
    from bench.scale.user_ranks import RowSpec

    source = SourceSpec(4096, (1, 4, 4), 7, 3, 1000, tmp_path / "pt", tmp_path / "packs")
    make_source(source, workers=1)
    spec = RowSpec(
        kind="lists",
        title="lists",
        world_size=2,
        batch_size=8,
        workers=2,
        n=source.n,
        pack_size=1000,
        beton="",
        src=str(source.src),
        packs=str(source.packs),
        crop=(4, 4),
        crop_padding=0,
        seed=0,
        time_box=600.0,
        cap=1.0,
    )
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    row = run_row(spec, floor_gib=0.0)
    assert row["budget_s"] == 1.0 + ROW_MARGIN_S
    assert row["wall_s"] <= row["budget_s"] + 20, row["wall_s"]
    assert row["left_alive"] == 0
    kids = psutil.Process().children(recursive=True)
    left = {p.pid for p in kids if "resource_tracker" not in " ".join(p.cmdline())}
    assert left <= before


@gated
def test_refusal_is_one_line(tmp_path: Path) -> None:
    work = tmp_path / "busy"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    cmd = [sys.executable, "-m", "bench", "--user-scale", "4096", "--work", str(work)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not empty" in proc.stderr
    assert (work / "keep.txt").exists()


# --- the pure parts, without a process or a file of data (run by make test) ---------------


def _row(kind: str, workers: int, rate: float | None, pss: float, **extra: object) -> dict:
    """A row as :func:`bench.scale.user_node.run_row` returns it, made up."""
    title = {"ours": "ffcv-pairs", "lists": f"user 4 x {workers}", "packs": "packs"}[kind]
    rank = {
        "startup_s": 2.5,
        "build_s": 0.5,
        "first_batch_s": 2.0,
        "build_cpu_s": 0.2,
        "first_batch_cpu_s": 0.7,
        "rate": rate and rate / 4,
        "samples": 1024,
        "gap_n": 1,
        "gap_first": 0.1,
        "gap_median": 0.1,
        "gap_max": 0.1,
    }
    memory = {
        "peak_mb": {"pss": pss * 2, "pss_own": pss, "uss": pss, "rss": pss, "procs": 4},
        "mean_mb": {"pss": pss * 1.5, "pss_own": pss * 0.9, "uss": pss, "rss": pss},
        "last_pss_mb": pss,
    }
    stopped = extra.pop("stopped", None)
    return {
        "kind": kind,
        "title": title,
        "workers": workers,
        "rate": rate,
        "life_rate": extra.pop("life_rate", rate),
        "life_s": 60.0,
        "delivered": 1024,
        "ranks": [{**rank, "rank": r} for r in range(4)] if rate else [{"rank": 0}],
        "memory": memory
        if kind == "ours"
        else {**memory, "peak_mb": {**memory["peak_mb"], "pss": pss}},
        "stopped": stopped,
        "min_available_gib": 2.0 if stopped else 20.0,
        "tripped_gib": 1.9 if stopped else None,
        "left_alive": 0,
        "budget_s": 370.0,
        "wall_s": 70.0,
        "load_before": 3.0,
        "load_after": 3.0,
        **extra,
    }


def _fake_result(user12: dict[int, tuple[float | None, float, str | None]]) -> dict:
    """A made-up run at 100k, 300k, 1M and 3M pairs. ``user12``: per size, the user's
    4 x 12 row's steady rate, peak PSS (MiB) and how it stopped."""
    sizes = []
    for n, (rate, pss, stopped) in user12.items():
        conv = {
            "wall_s": n / 3500,
            "rate": 3500.0,
            "inside_s": n / 3600,
            "outside_s": 5.0,
            "maxrss_mb": 400.0,
            "tree": {"rss": 600.0, "pss": 380.0},
            "beton_bytes": n * 560,
            "returncode": 0,
            "pairs": n,
            "command": f"writers/write_beton.py pt betons/{n} --split train",
        }
        rows = [
            _row("ours", 0, 700_000.0, 1000.0 + n / 10_000),
            _row("lists", 12, rate, pss, stopped=stopped, life_rate=rate or 50.0),
            _row("lists", 4, 2_000.0, 500 + 0.004 * n),
            _row("packs", 12, 3_500.0, 7_000.0 + 0.0003 * n),
        ]
        sizes.append({"n": n, "convert": conv, "rows": rows, "warm_s": [5.0]})
    largest = sizes[-1]
    largest["warm_s"].append(4.0)
    largest["convert"].update(listing={"seconds": 8.0, "entries": 3 * largest["n"]}, import_s=5.0)
    largest["alone"] = [
        _row(
            "ours",
            0,
            300_000.0,
            300.0,
            ranks=[
                {
                    "rank": 0,
                    "startup_s": s,
                    "build_s": 0.3,
                    "first_batch_s": s - 0.3,
                    "build_cpu_s": 0.2,
                    "first_batch_cpu_s": 0.6,
                }
            ],
        )
        for s in (0.9, 0.8, 1.2)
    ]
    n = largest["n"]
    return {
        "date": "2026-12-03-fake",
        "command": "python -m bench --user-scale-sizes 100000,300000,1000000,3000000",
        "config": {
            "n": n,
            "sizes": list(user12),
            "shape": [1, 16, 16],
            "seed": 0,
            "pack_size": 1000,
            "world_size": 4,
            "global_batch": 1024,
            "crop_padding": 2,
            "workers": [12, 4],
            "pack_workers": 12,
            "time_box": 60.0,
            "start_cap": 300.0,
            "floor_gib": 2.0,
            "gen_workers": 2,
            "writer_workers": 2,
        },
        "machine": {
            "cores": 2,
            "ram_gib": 23.5,
            "cpu": "AMD EPYC",
            "kernel": "6",
            "python": "3",
            "torch": "2",
            "cuda": False,
            "numpy": "2",
            "numba": "0.6",
            "ffcv": "1",
            "ffcv-pairs": "0.1",
        },
        "space": {"free_gib": 60.0, "free_inodes": 16e6},
        "load_start": 2.0,
        "source": {
            "seconds": 980.0,
            "files_per_s": 9000.0,
            "verified_files": 217,
            "src_bytes": 37e9,
            "file_bytes": {"A_images": 4096, "B_images": 4096, "labels": 4096},
            "dir_bytes": 4e8,
            "pack_bytes": 4e9,
            "packs": n // 1000,
            "load_per_s": 1243.0,
        },
        "sizes": sizes,
        "cleanup": {"seconds": 800.0, "left": []},
        "elapsed_s": 4800.0,
    }


SIZES = (100_000, 300_000, 1_000_000, 3_000_000)


def test_memory_fit_recovers_a_line_and_extrapolates_to_the_users_node() -> None:
    from bench.scale.user_fit import USER_NODE_GB, fit_line, memory_curves, n_at, short_count

    assert fit_line([(1.0, 3.0)]) is None and fit_line([(1.0, 3.0), (1.0, 4.0)]) is None
    a, b = fit_line([(1e5, 1000 + 0.01 * 1e5), (3e5, 1000 + 0.01 * 3e5), (1e6, 1000 + 1e4)])
    assert a == pytest.approx(1000) and b == pytest.approx(0.01)
    assert n_at((1000.0, 0.01), 2000.0) == pytest.approx(100_000)
    assert n_at((1000.0, 0.0), 2000.0) is None and n_at(None, 1.0) is None
    assert [short_count(x) for x in (950, 340_000, 12_345_678, 4.5e9, None)] == [
        "950",
        "340k",
        "12.3M",
        "4.5 billion",
        "—",
    ]

    # The user's 4 x 12 row: 2 MiB per 1000 pairs, then stopped by the floor at 1M and 3M
    # (lower bounds, one of them above the line).
    res = _fake_result(
        {
            100_000: (900.0, 700.0, None),
            300_000: (800.0, 1100.0, None),
            1_000_000: (None, 3000.0, "memory"),
            3_000_000: (None, 2000.0, "memory"),
        }
    )
    curves = {(c["kind"], c["workers"], c["field"]): c for c in memory_curves(res)}
    assert len(curves) == 5  # ffcv-pairs twice (with and without its mapped .beton)
    user = curves["lists", 12, "pss"]
    assert user["basis"] == "measured" and user["fit"] == pytest.approx([500.0, 0.002])
    assert [p["stopped"] for p in user["points"]] == [False, False, True, True]
    assert user["above_fit"] == [1_000_000]  # 3000 > 500 + 2000; 2000 < 500 + 6000
    user_mib = USER_NODE_GB * 1e9 / 2**20
    assert user["n_user"] == pytest.approx((user_mib - 500) / 0.002)
    assert user["n_node"] == pytest.approx((23.5 * 1024 - 500) / 0.002)
    ours = curves["ours", 0, "pss_own"]
    assert ours["fit"] == pytest.approx([1000.0, 1e-4]) and ours["basis"] == "measured"

    # Stopped at every size but one: the line goes through the lower bounds too.
    res = _fake_result({100_000: (900.0, 700.0, None), 300_000: (None, 1100.0, "memory")})
    user = next(c for c in memory_curves(res) if c["kind"] == "lists" and c["workers"] == 12)
    assert user["basis"] == "lower bounds" and user["fit"] == pytest.approx([500.0, 0.002])
    # One size: no line.
    res = _fake_result({100_000: (900.0, 700.0, None)})
    assert all(c["fit"] is None and c["basis"] is None for c in memory_curves(res))


def test_speed_ratio_is_taken_at_the_largest_size_with_a_steady_user_rate() -> None:
    from bench.scale.user_targets import speed_at, user_targets

    res = _fake_result(
        {
            100_000: (900.0, 700.0, None),
            300_000: (700.0, 1100.0, None),
            1_000_000: (None, 3000.0, "memory"),
            3_000_000: (None, 2000.0, "memory"),
        }
    )
    at = speed_at(res)
    assert at == {"n": 300_000, "ratio": 1000.0, "ours": 700_000.0, "theirs": 700.0}
    speed = user_targets(res)[-1]
    assert speed["verdict"] == "PASS" and speed["value"] == 1000.0
    assert "at 300,000 pairs" in speed["note"]
    assert "at 1,000,000: stopped by the memory floor" in speed["note"]
    # A rate over the life of a row (some rank under 2 batches) is not a steady rate.
    none = _fake_result({100_000: (None, 700.0, None), 300_000: (None, 1100.0, "memory")})
    assert speed_at(none) is None
    speed = user_targets(none)[-1]
    assert speed["verdict"] == "NOT MEASURED" and "over its life" in speed["note"]
    # Slower than 100x at the size it is measured at: FAIL, at that size.
    slow = _fake_result({100_000: (70_000.0, 700.0, None), 300_000: (None, 1100.0, None)})
    assert speed_at(slow) == {"n": 100_000, "ratio": 10.0, "ours": 700_000.0, "theirs": 70_000.0}
    assert user_targets(slow)[-1]["verdict"] == "FAIL"


def test_startup_three_ways_and_its_targets() -> None:
    from bench.scale.user_targets import startup_three_ways, user_targets

    res = _fake_result({100_000: (900.0, 700.0, None), 3_000_000: (None, 2000.0, "memory")})
    s = startup_three_ways(res)
    assert s["n"] == 3_000_000 and s["ranks"] == 4
    assert s["wall_s"] == 2.5 and s["cpu_s"] == pytest.approx(0.9)
    assert s["alone_walls"] == [0.9, 0.8, 1.2] and s["alone_s"] == 0.9
    convert, cpu, alone, _, _ = user_targets(res)
    assert cpu["verdict"] == "PASS" and "wall time with 4 ranks: 2.50 s" in cpu["note"]
    assert alone["verdict"] == "PASS" and "0.90, 0.80, 1.20" in alone["note"]
    assert convert["verdict"] == "PASS" and convert["value"] == pytest.approx(3e6 / 3500 / 60)
    del res["sizes"][-1]["alone"]
    assert user_targets(res)[2]["verdict"] == "NOT MEASURED"


@pytest.mark.parametrize("sizes", [SIZES, SIZES[:1]], ids=["four sizes", "one size"])
def test_report_renders_every_section_from_a_made_up_result(tmp_path: Path, sizes) -> None:
    from bench.scale.user_report import SECTIONS, write_user_report

    user = {
        100_000: (900.0, 700.0, None),
        300_000: (700.0, 1100.0, None),
        1_000_000: (None, 3000.0, "memory"),
        3_000_000: (None, 2000.0, "memory"),
    }
    res = _fake_result({n: user[n] for n in sizes})
    md = write_user_report(res, tmp_path).read_text()
    for heading in SECTIONS:
        assert f"\n{heading}" in md, heading
    for chart in ("chart", "memory"):
        assert (tmp_path / f"user-scale-2026-12-03-fake-{chart}.png").stat().st_size > 0
    assert "](user-scale-2026-12-03-fake-memory.png)" in md
    saved = json.loads((tmp_path / "user-scale-2026-12-03-fake.json").read_text())
    assert saved["speed_at"] == res["speed_at"] and len(saved["curves"]) == 5
    table = md.split(SECTIONS[4])[1].split("\n## ")[0]
    assert table.count("| user 4 x 12 |") == len(sizes)
    if len(sizes) == 4:
        assert "**1,000x** the samples/s" in md and "at **300,000 pairs**" in md
        assert "stopped by the memory floor at 2.9 GiB PSS" in md
        assert "| 1,000,000 | 700,000 | — | — (user: stopped by the memory floor" in md
        assert "700*; 1M: 3,000*" not in md and "100k: 700; 300k: 1,100; 1M: 3,000*" in md
        assert "the user's 200 GB node is full at N ≈" in md
        assert (
            "seconds it took: 100,000: 5.0, 300,000: 5.0, 1,000,000: 5.0, 3,000,000: 5.0 / 4.0;"
            in md
        )
    else:
        assert "no fit (fewer than two sizes)" in md and "no fit (one size)" in md


def test_settings_take_one_size_or_several(tmp_path: Path) -> None:
    from bench.scale.user_scale import UserScaleConfig

    one = UserScaleConfig(n=200_000, work=tmp_path)
    assert one.sizes == (200_000,) and one.n == 200_000
    several = UserScaleConfig(sizes=(3_000_000, 100_000, 300_000, 100_000), work=tmp_path)
    assert several.sizes == (100_000, 300_000, 3_000_000) and several.n == 3_000_000
    assert several.beton(100_000) != several.beton(300_000)
    with pytest.raises(ValueError, match="largest of sizes"):
        UserScaleConfig(n=5000, sizes=(4096, 8192))
    with pytest.raises(ValueError, match="at least 4096 pairs, got 3000"):
        UserScaleConfig(sizes=(3000, 6000))


def test_cli_refuses_both_forms_of_user_scale_in_one_line(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "bench",
        "--user-scale",
        "8192",
        "--user-scale-sizes",
        "4096,8192",
        "--work",
        str(tmp_path / "w"),
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "not both" in proc.stderr
    assert not (tmp_path / "w").exists()
