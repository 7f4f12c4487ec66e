"""``bench.gpu_check`` without a GPU: the no-GPU exit, the plan, the report, failures, arguments."""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import gpu_check as G

REPO = Path(__file__).parents[1]
GPU_STEPS = ["data", "cuda-tests", "throughput", "train"]


def _plan_names(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert G.main(["--dry-run", *argv], cuda_available=lambda: False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith(f"{i}. ") for i, line in enumerate(lines, 1)), lines
    return [line.split(" ", 1)[1].split(":")[0] for line in lines]


def test_without_cuda_one_line_and_exit_0(tmp_path: Path, capsys) -> None:
    assert G.main(["--out", str(tmp_path / "r")], cuda_available=lambda: False) == 0
    assert capsys.readouterr().out == G.NO_GPU + "\n"
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: it would run")
def test_the_module_itself_without_cuda(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == G.NO_GPU + "\n" and list(tmp_path.iterdir()) == []


def test_dry_run_plans_nccl_only_with_two_gpus(capsys) -> None:
    assert _plan_names(capsys) == GPU_STEPS
    assert _plan_names(capsys, "--gpus", "1") == GPU_STEPS
    assert _plan_names(capsys, "--gpus", "2") == [*GPU_STEPS, "nccl"]


def test_the_plan_carries_the_options() -> None:
    args = G.parse_args(["--train-steps", "7", "--batch-sizes", "128", "512", "--pairs", "99"])
    steps = {s.name: s for s in G.make_plan(4, args)}
    assert "7 steps of 1024" in steps["train"].what
    assert "[128, 512]" in steps["throughput"].what and "99 pairs" in steps["data"].what
    assert steps["cuda-tests"].what == "pytest -m cuda"


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
    "argv", [["--train-steps", "0"], ["--batch-sizes", "-4"], ["--pairs", "x"]]
)
def test_bad_options_exit_2_naming_the_value(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as err:
        G.parse_args(argv)
    assert err.value.code == 2
    assert f"must be a positive integer, got {argv[1]!r}" in capsys.readouterr().err


def test_the_data_step_writes_a_beton(tmp_path: Path) -> None:
    ctx = G.Context(G.parse_args(["--pairs", "24"]), tmp_path)
    lines = G.step_data(ctx)
    assert ctx.beton is not None and ctx.beton.exists() and "24 pairs" in lines[0]
    from ffcv_pairs import make_loader

    a, _, label = next(iter(make_loader(ctx.beton, batch_size=8, device="cpu")))
    assert a.shape == (8, *G.SHAPE) and a.dtype == torch.uint8 and set(label.tolist()) <= {0, 1}


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
    assert "gpu-check: install\n\t$(PY) -m bench.gpu_check\n" in make
