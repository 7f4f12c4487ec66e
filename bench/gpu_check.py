"""``make gpu-check``: the GPU path checked and measured on one CUDA machine, in under 8 minutes.

Commands::

    make gpu-check                                    # install, then the line below
    python -m bench.gpu_check                         # writes bench/results/gpu-<date>.md
    python -m bench.gpu_check --pairs 8192 --train-steps 100 --out /tmp/gpu
    python -m bench.gpu_check --dry-run --gpus 2      # the plan only; needs no GPU

Steps, each a section of the report (a failed step is reported; the others still run):
``data`` (a seeded ``.beton`` of uint8[3, 64, 64] pairs, in a temporary folder);
``cuda-tests`` (``pytest -m cuda``); ``throughput`` (pairs/s delivered into GPU memory as
normalised bfloat16 with a paired hflip + padded crop, batch 256 and 1024); ``train``
(``SiamesePairClassifier`` + ``PairDataModule``, one GPU, global batch 1024, bf16-mixed, a
fixed number of steps, ``LoaderMonitor``'s data-wait share); ``nccl`` (2 or more GPUs only:
2 NCCL processes, ``device=None`` must give ``cuda:LOCAL_RANK``, shards must be disjoint).

Without CUDA it prints one line and exits 0; the exit status is 1 when a step fails.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["NO_GPU", "Context", "Step", "StepResult", "main", "make_plan", "render", "run_plan"]

NO_GPU = "gpu-check: needs a CUDA GPU (torch.cuda.is_available() is False); nothing to do"
REPO = Path(__file__).resolve().parents[1]
MEAN, STD = (123.7, 116.3, 103.5), (58.4, 57.1, 57.4)
SHAPE = (3, 64, 64)
GLOBAL_BATCH = 1024


@dataclass
class Context:
    """What the steps share: the options, and the file the ``data`` step writes."""

    args: argparse.Namespace
    work: Path
    beton: Path | None = None


class Step(NamedTuple):
    """``run`` returns the step's report lines, and raises when the step fails."""

    name: str
    what: str
    run: Callable[[Context], list[str]]


class StepResult(NamedTuple):
    name: str
    ok: bool
    seconds: float
    lines: list[str]
    error: str  # empty when ok


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description="GPU check")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="report folder")
    p.add_argument("--pairs", type=_positive, default=16384, help="pairs in the generated file")
    p.add_argument("--batch-sizes", type=_positive, nargs="+", default=[256, 1024])
    p.add_argument("--train-steps", type=_positive, default=300, help="optimiser steps")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--gpus", type=_positive, default=None, help="GPUs to plan for (dry run)")
    return p.parse_args(argv)


def _augment(normalise: bool = True) -> Any:
    from ffcv_pairs import PairAugment

    aug = PairAugment(hflip=0.5, crop=(56, 56), crop_padding=4)
    if not normalise:
        return aug
    return replace(aug, normalize_mean=MEAN, normalize_std=STD, out_dtype="bfloat16")


def _beton(ctx: Context) -> Path:
    if ctx.beton is None:
        raise RuntimeError("no data: the data step failed")
    return ctx.beton


def step_data(ctx: Context) -> list[str]:
    from ffcv_pairs import ArraySource, write_pairs

    rng, n, ctx.beton = np.random.default_rng(0), ctx.args.pairs, ctx.work / "pairs.beton"
    a, b = (rng.integers(0, 256, (n, *SHAPE), dtype=np.uint8) for _ in range(2))
    src, workers = ArraySource(a, b, np.arange(n) % 2), min(8, len(os.sched_getaffinity(0)))
    rep = write_pairs(src, ctx.beton, workers=workers, progress=False)
    return [f"{n:,} pairs of uint8{list(SHAPE)}, {rep.seconds:.1f} s to write"]


def step_cuda_tests(ctx: Context) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rfEsxX", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    tail = proc.stdout.strip().splitlines()[-12:]
    lines = [f"`{' '.join(cmd[2:])}`: exit status {proc.returncode}", "", "```", *tail, "```"]
    if proc.returncode != 0:
        raise RuntimeError("\n".join(lines))
    return lines


def _rate(loader: Any, epochs: int) -> float:
    """Pairs/s over ``epochs`` timed epochs, after one warm-up epoch; nothing reads the batches."""
    for _ in loader:
        pass
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    for _ in range(epochs):
        for *_, label in loader:
            n += len(label)
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def step_throughput(ctx: Context) -> list[str]:
    from ffcv_pairs import make_loader

    rows = ["| batch | output | pairs/s | GB/s of uint8 in |", "|---:|---|---:|---:|"]
    nbytes = 2 * int(np.prod(SHAPE))
    for bs in ctx.args.batch_sizes:
        loader = make_loader(_beton(ctx), batch_size=bs, augment=_augment(), device="cuda")
        a, _, label = next(iter(loader))
        if a.dtype != torch.bfloat16 or not a.is_cuda or not label.is_cuda:
            raise RuntimeError(f"batch {bs}: got {a.dtype} on {a.device}, want bfloat16 on cuda")
        rate = _rate(loader, epochs=3)
        rows.append(f"| {bs} | bf16 on {a.device} | {rate:,.0f} | {rate * nbytes / 1e9:.2f} |")
        loader.close()
    bs = max(ctx.args.batch_sizes)
    host = make_loader(_beton(ctx), batch_size=bs, augment=_augment(False), device="cpu")
    return [*rows, "", f"For scale: {_rate(host, 3):,.0f} pairs/s (batch {bs}) left on the host."]


def step_train(ctx: Context) -> list[str]:
    import lightning as L

    from ffcv_pairs.lightning.callbacks import LoaderMonitor
    from ffcv_pairs.lightning.datamodule import PairDataModule
    from ffcv_pairs.lightning.model import SiamesePairClassifier

    class WholeRun(LoaderMonitor):
        """LoaderMonitor's figures over all epochs (it starts afresh every epoch)."""

        total = (0.0, 0.0, 0)

        def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            w, b, n = self.total
            self.total = (w + self.wait, b + self.busy, n + self.samples)
            super().on_train_epoch_start(trainer, pl_module)

    monitor, path = WholeRun(prog_bar=False), str(_beton(ctx))
    dm = PairDataModule(train_path=path, global_batch_size=GLOBAL_BATCH, augment=_augment())
    trainer = L.Trainer(
        accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=ctx.args.train_steps,
        callbacks=[monitor], limit_val_batches=0, default_root_dir=ctx.work, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    trainer.fit(SiamesePairClassifier(width=32), datamodule=dm)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    w, b, n = (x + y for x, y in zip(monitor.total, (monitor.wait, monitor.busy, monitor.samples)))
    last = monitor.summary()
    return [
        f"{trainer.global_step} steps of {GLOBAL_BATCH} pairs: {seconds:.1f} s with start-up",
        f"data wait {w / (w + b):.1%} of each step over the run, {last['wait_share']:.1%} in the "
        f"last epoch; {n / (w + b):,.0f} pairs/s while stepping",
        "(host-side times: the GPU runs asynchronously, so a step ends when its work is queued)",
    ]


def _nccl_rank(rank: int, world: int, beton: str, port: int) -> None:
    import torch.distributed as dist

    from ffcv_pairs import make_loader

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    loader = make_loader(beton, batch_size=256, distributed=True, device=None, augment=_augment())
    if loader.device != torch.device("cuda", rank):
        raise RuntimeError(f"rank {rank}: device=None gave {loader.device}, want cuda:{rank}")
    seen = sum(len(label) for _, _, label in loader)  # before set_device, on purpose
    torch.cuda.set_device(rank)
    ids = torch.as_tensor(loader.epoch_order(0), device=loader.device)
    every = [torch.empty_like(ids) for _ in range(world)]
    dist.all_gather(every, ids)
    total = torch.tensor([seen], device=loader.device)
    dist.all_reduce(total)
    unique = len(torch.unique(torch.cat(every)))
    if seen != len(ids) or unique != world * seen or int(total) != world * seen:
        raise RuntimeError(f"rank {rank}: read {seen}, {unique} distinct of {int(total)} in all")
    dist.destroy_process_group()


def step_nccl(ctx: Context) -> list[str]:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_nccl_rank, (2, str(_beton(ctx)), port), nprocs=2, start_method="spawn")
    return ["2 ranks, device=None on cuda:0 and cuda:1, NCCL all_gather/all_reduce, disjoint"]


def make_plan(gpus: int, args: argparse.Namespace) -> list[Step]:
    steps = [
        Step("data", f"write {args.pairs:,} pairs of uint8{list(SHAPE)}", step_data),
        Step("cuda-tests", "pytest -m cuda", step_cuda_tests),
        Step("throughput", f"bf16 pairs/s on the GPU, batch {args.batch_sizes}", step_throughput),
        Step("train", f"{args.train_steps} steps of {GLOBAL_BATCH}, bf16-mixed", step_train),
    ]
    if gpus >= 2:
        steps.append(Step("nccl", "2-process NCCL smoke test", step_nccl))
    return steps


def run_plan(steps: list[Step], ctx: Context) -> list[StepResult]:
    results = []
    for step in steps:
        t0 = time.perf_counter()
        try:
            lines, ok, error = step.run(ctx), True, ""
        except Exception as e:  # a failed step is reported; the others still run
            lines, ok, error = [], False, f"{type(e).__name__}: {e}"
        results.append(StepResult(step.name, ok, time.perf_counter() - t0, lines, error))
        print(f"gpu-check: {step.name}: {'ok' if ok else 'FAILED'} ({results[-1].seconds:.0f} s)")
    return results


def _machine() -> list[str]:
    gpus = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    cores = len(os.sched_getaffinity(0))
    return [f"{torch.cuda.device_count()} GPU(s): {', '.join(gpus)}; {cores} CPU cores; "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}"]  # fmt: skip


def render(results: list[StepResult], date: str, machine: list[str]) -> str:
    out = [f"# GPU check, {date}", "", *machine, ""]
    out += ["| step | result | seconds |", "|---|---|---:|"]
    out += [f"| {r.name} | {'ok' if r.ok else 'FAILED'} | {r.seconds:.1f} |" for r in results]
    out += ["", f"{sum(r.seconds for r in results):.0f} s in all (budget: 480 s)."]
    for r in results:
        failed = [f"**FAILED**: {r.error}"] if r.error else []
        out += ["", f"## {r.name}", "", *r.lines, *failed]
    return "\n".join(out).rstrip() + "\n"


def main(
    argv: list[str] | None = None,
    *,
    cuda_available: Callable[[], bool] = torch.cuda.is_available,
    gpu_count: Callable[[], int] = torch.cuda.device_count,
    plan: Callable[[int, argparse.Namespace], list[Step]] = make_plan,
    machine: Callable[[], list[str]] = _machine,
) -> int:
    args = parse_args(argv)
    if args.dry_run:
        gpus = args.gpus or (gpu_count() if cuda_available() else 1)
        for i, step in enumerate(plan(gpus, args), 1):
            print(f"{i}. {step.name}: {step.what}")
        return 0
    if not cuda_available():
        print(NO_GPU)
        return 0
    date = datetime.date.today().isoformat()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        results = run_plan(plan(gpu_count(), args), Context(args, Path(work)))
    args.out.mkdir(parents=True, exist_ok=True)
    report = args.out / f"gpu-{date}.md"
    report.write_text(render(results, date, machine()))
    print(f"gpu-check: wrote {report}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
