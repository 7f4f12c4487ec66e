"""``bench.gpu.check`` without a GPU: the no-GPU exit, the plan, the report, failures, arguments."""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.gpu import check as G
from bench.gpu.baseline import MemmapPairs

REPO = Path(__file__).parents[1]
GPU_STEPS = ["simulation", "data", "cuda-tests", "throughput", "train", "ranks"]


def _plan_names(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert G.main(["--dry-run", *argv], cuda_available=lambda: False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith(f"{i}. ") for i, line in enumerate(lines, 1)), lines
    return [line.split(" ", 1)[1].split(":")[0] for line in lines]


def _sim_only(calls: list[str]):
    def plan(gpus: int, args: argparse.Namespace) -> list[G.Step]:
        return G.make_plan(gpus, args)[:1] if gpus == 0 else []

    def simulation(ctx: G.Context) -> list[str]:
        calls.append("simulation")
        return ["simulated"]

    return lambda gpus, args: [s._replace(run=simulation) for s in plan(gpus, args)]


def test_without_cuda_only_the_simulation_runs_and_no_report(tmp_path: Path, capsys) -> None:
    calls: list[str] = []
    report_dir = tmp_path / "r"
    assert G.main([], cuda_available=lambda: False, plan=_sim_only(calls)) == 0
    assert calls == ["simulation"]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gpu-check: simulation: ok") and out[-1] == G.NO_GPU
    assert not report_dir.exists()


def test_without_cuda_a_report_where_asked(tmp_path: Path) -> None:
    calls: list[str] = []
    rc = G.main(["--out", str(tmp_path)], cuda_available=lambda: False, plan=_sim_only(calls))
    text = next(tmp_path.iterdir()).read_text()
    assert rc == 0 and "| simulation | ok |" in text and G.NO_GPU in text


def test_dry_run_plans_every_step_with_a_gpu(capsys) -> None:
    assert _plan_names(capsys, "--gpus", "1") == GPU_STEPS
    assert _plan_names(capsys, "--gpus", "2") == GPU_STEPS


def test_the_plan_carries_the_options() -> None:
    argv = ["--train-seconds", "7", "--batch-sizes", "128", "512", "--pairs", "99"]
    steps = {s.name: s for s in G.make_plan(4, G.parse_args(argv))}
    assert "7 s of 1024" in steps["train"].what
    assert "[128, 512]" in steps["throughput"].what and "99 at 64x64" in steps["data"].what
    assert steps["cuda-tests"].what == "pytest -m cuda"
    assert [s.name for s in G.make_plan(0, G.parse_args([]))] == ["simulation"]


def _fake_plan(calls: list[str]):
    def data(ctx: G.Context) -> list[str]:
        calls.append("data")
        ctx.beton = ctx.work / "made.beton"
        return ["| made | 1 |"]

    def broken(ctx: G.Context) -> list[str]:
        calls.append("broken")
        raise ValueError("boom")

    def uses_data(ctx: G.Context) -> list[str]:
        calls.append("uses")
        assert ctx.beton is not None and ctx.beton.name == "made.beton"
        return ["uses the file"]

    def plan(gpus: int, args: argparse.Namespace) -> list[G.Step]:
        steps = [G.Step("data", "", data), G.Step("broken", "", broken)]
        return [*steps, G.Step(f"uses-{gpus}", "", uses_data)]

    return plan


def test_report_has_every_step_and_a_failure_fails(tmp_path: Path, capsys) -> None:
    calls: list[str] = []
    rc = G.main(
        ["--out", str(tmp_path)],
        cuda_available=lambda: True,
        gpu_count=lambda: 2,
        plan=_fake_plan(calls),
        machine=lambda: ["2 GPU(s): Fake"],
    )
    assert rc == 1 and calls == ["data", "broken", "uses"]  # the step after a failure ran
    report = tmp_path / f"gpu-{datetime.date.today().isoformat()}.md"
    text = report.read_text()
    assert text.startswith("# GPU check, ") and "2 GPU(s): Fake" in text
    for row in ("| data | ok |", "| broken | FAILED |", "| uses-2 | ok |"):
        assert row in text
    assert "## broken\n\n**FAILED**: ValueError: boom" in text
    assert "## data\n\n| made | 1 |" in text and "## uses-2\n\nuses the file" in text
    assert f"wrote {report}" in capsys.readouterr().out


def test_all_steps_ok_exit_0(tmp_path: Path) -> None:
    plan = lambda gpus, args: [G.Step("a", "", lambda ctx: ["fine"])]  # noqa: E731
    assert G.main(["--out", str(tmp_path)], cuda_available=lambda: True, plan=plan) == 0
    assert "| a | ok |" in next(tmp_path.iterdir()).read_text()


def test_render_marks_failures_and_adds_up_seconds() -> None:
    results = [G.StepResult("x", True, 1.5, ["line"], ""), G.StepResult("y", False, 2.0, [], "E")]
    text = G.render(results, "2026-01-02", ["machine"])
    assert "| x | ok | 1.5 |" in text and "| y | FAILED | 2.0 |" in text
    assert "4 s in all" in text and text.endswith("**FAILED**: E\n")


@pytest.mark.parametrize(
    "argv", [["--train-seconds", "0"], ["--batch-sizes", "-4"], ["--pairs", "x"]]
)
def test_bad_options_exit_2_naming_the_value(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as err:
        G.parse_args(argv)
    assert err.value.code == 2
    assert f"must be a positive integer, got {argv[1]!r}" in capsys.readouterr().err


def test_the_data_step_writes_a_beton(tmp_path: Path) -> None:
    ctx = G.Context(G.parse_args(["--pairs", "24", "--pairs-224", "10"]), tmp_path)
    lines = G.step_data(ctx)
    assert (
        "24 pairs of uint8[3, 64, 64]" in lines[0] and "10 pairs of uint8[3, 224, 224]" in lines[1]
    )
    from ffcv_pairs import make_loader

    for side, n in ((64, 24), (224, 10)):
        a, _, label = next(iter(make_loader(ctx.files[side], batch_size=8, device="cpu")))
        assert a.shape == (8, 3, side, side) and a.dtype == torch.uint8
        assert set(label.tolist()) <= {0, 1}
        pairs = MemmapPairs(tmp_path, side)
        assert len(pairs) == n and torch.equal(
            pairs[3][0], torch.from_numpy(np.load(tmp_path / f"{side}-A.npy")[3])
        )


def test_pytest_m_cuda_selects_the_gpu_tests() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "cuda",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert any(i.startswith("tests/test_cuda.py::") for i in ids), proc.stdout[-2000:]
    assert any(i.startswith("tests/test_lightning.py::") for i in ids)
    assert not any(i.startswith("tests/test_devices.py::") for i in ids)


def test_make_gpu_check_target() -> None:
    make = (REPO / "Makefile").read_text()
    assert "gpu-check: install\n\t$(PY) -m bench.gpu.check\n" in make
