"""``make gpu-check``: the GPU path checked and measured on one CUDA machine, in about 6 minutes.

Commands::

    make gpu-check                                    # install, then the line below
    python -m bench.gpu.check                         # writes bench/results/gpu-<date>.md
    python -m bench.gpu.check --pairs 8192 --train-seconds 60 --out /tmp/gpu
    python -m bench.gpu.check --dry-run --gpus 2      # the plan only; needs no GPU
    bash gpu-bundle/run.sh OUT                        # offline, from `make gpu-bundle`

Steps, each a section of the report (a failed step is reported; the others still run):
``simulation`` (``tests/test_delivery.py``: the device stage's ordering on a simulated,
lagging GPU; runs without a GPU too); ``data`` (seeded ``.beton`` files of uint8 pairs at
64x64 and 224x224, and the same arrays as ``.npy`` for the baseline); ``cuda-tests``
(``pytest -m cuda``: device values equal to the CPU path's, ``device="cpu"`` leaves CUDA
uninitialised, a lagging GPU, another stream); ``throughput`` (pairs/s delivered into GPU
memory as normalised bfloat16 with a paired hflip + padded crop, beside a plain ``torch``
``DataLoader`` with ``pin_memory`` over a numpy memmap of the same arrays); ``train``
(``SiamesePairClassifier`` + ``PairDataModule``, one GPU, global batch 1024, bf16-mixed,
time-boxed, ``LoaderMonitor``'s data-wait share, and the same steps on one batch already on
the GPU for the ceiling); ``ranks`` (2 processes: NCCL on 2 GPUs, or gloo sharing one GPU;
``device=None`` gives ``cuda:LOCAL_RANK`` modulo the GPUs; shards are disjoint).

Without CUDA only ``simulation`` runs, and a line says the CUDA steps were skipped; the
exit status is 1 when a step fails.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from bench.gpu.baseline import MEAN, STD, dataloader_batches, pairs_per_s

__all__ = ["NO_GPU", "Context", "Step", "StepResult", "main", "make_plan", "render", "run_plan"]

NO_GPU = "gpu-check: no CUDA GPU (torch.cuda.is_available() is False): the CUDA steps were skipped"
REPO = Path(__file__).resolve().parents[2]
SIZES = (64, 224)
GLOBAL_BATCH = 1024


@dataclass
class Context:
    """What the steps share: the options, and the files the ``data`` step writes."""

    args: argparse.Namespace
    work: Path
    beton: Path | None = None  # the 64x64 file
    files: dict[int, Path] = field(default_factory=dict)  # side -> .beton


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
    p = argparse.ArgumentParser(prog="python -m bench.gpu.check", description="GPU check")
    p.add_argument(
        "--out", type=Path, default=None,
        help="report folder (default: bench/results; without a GPU, no report unless given)",
    )  # fmt: skip
    p.add_argument("--pairs", type=_positive, default=16384, help="pairs in the 64x64 file")
    p.add_argument("--pairs-224", type=_positive, default=4096, help="pairs in the 224x224 file")
    p.add_argument("--batch-sizes", type=_positive, nargs="+", default=[256, 1024])
    p.add_argument("--seconds", type=_positive, default=6, help="timed seconds per throughput row")
    p.add_argument("--train-seconds", type=_positive, default=120, help="time box of the fit")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--gpus", type=_positive, default=None, help="GPUs to plan for (dry run)")
    return p.parse_args(argv)


def _augment(normalise: bool = True, side: int = 64) -> Any:
    from ffcv_pairs import PairAugment

    crop = side * 7 // 8
    aug = PairAugment(hflip=0.5, crop=(crop, crop), crop_padding=side // 16)
    if not normalise:
        return aug
    return replace(aug, normalize_mean=MEAN, normalize_std=STD, out_dtype="bfloat16")


def _beton(ctx: Context, side: int = 64) -> Path:
    if side not in ctx.files:
        raise RuntimeError("no data: the data step failed")
    return ctx.files[side]


def _pytest(files: list[str], *extra: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *files,
        *extra,
        "-q",
        "-rfEsxX",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400)
    tail = proc.stdout.strip().splitlines()[-12:]
    lines = [f"`{' '.join(cmd[2:])}`: exit status {proc.returncode}", "", "```", *tail, "```"]
    if proc.returncode != 0:
        raise RuntimeError("\n".join(lines))
    return lines


def step_simulation(ctx: Context) -> list[str]:
    return _pytest(["tests/test_delivery.py"])


def step_data(ctx: Context) -> list[str]:
    from ffcv_pairs import ArraySource, write_pairs

    rng, lines = np.random.default_rng(0), []
    workers = min(8, len(os.sched_getaffinity(0)))
    for side, n in zip(SIZES, (ctx.args.pairs, ctx.args.pairs_224)):
        a, b = (rng.integers(0, 256, (n, 3, side, side), dtype=np.uint8) for _ in range(2))
        labels = np.arange(n) % 2
        path = ctx.work / f"pairs-{side}.beton"
        rep = write_pairs(ArraySource(a, b, labels), path, workers=workers, progress=False)
        for name, array in (("A", a), ("B", b), ("label", labels)):
            np.save(ctx.work / f"{side}-{name}.npy", array)
        ctx.files[side] = path
        lines.append(f"{n:,} pairs of uint8[3, {side}, {side}], {rep.seconds:.1f} s to write")
    ctx.beton = ctx.files[SIZES[0]]
    return lines


def step_cuda_tests(ctx: Context) -> list[str]:
    files = ["tests/test_cuda.py", "tests/test_lightning.py", "tests/test_batch_ops.py"]
    return _pytest(files, "-m", "cuda")


def step_throughput(ctx: Context) -> list[str]:
    from ffcv_pairs import make_loader

    rows = [
        "| pairs | batch | ffcv-pairs (bf16, flip + crop) | DataLoader + pin_memory (bf16) "
        "| ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for side in SIZES:
        for bs in ctx.args.batch_sizes:
            aug = _augment(side=side)
            loader = make_loader(_beton(ctx, side), batch_size=bs, augment=aug, device="cuda")
            a, _, label = next(iter(loader))
            if a.dtype != torch.bfloat16 or not a.is_cuda or not label.is_cuda:
                raise RuntimeError(f"batch {bs}: got {a.dtype} on {a.device}, want bf16 on cuda")
            ours = pairs_per_s(lambda loader=loader: loader, ctx.args.seconds)
            loader.close()
            base = pairs_per_s(dataloader_batches(ctx.work, side, bs), ctx.args.seconds)
            rows.append(
                f"| uint8[3, {side}, {side}] x 2 | {bs} | {ours:,.0f} | {base:,.0f} | "
                f"{ours / base:.1f}x |"
            )
    return [*rows, "", "Pairs/s delivered into GPU memory, whole epochs, after one warm-up."]


def _fit(model: Any, data: Any, seconds: float, root: Path, steps: int = -1) -> tuple[Any, float]:
    import lightning as L

    from ffcv_pairs.lightning.callbacks import LoaderMonitor

    class WholeRun(LoaderMonitor):
        """LoaderMonitor's figures over all epochs (it starts afresh every epoch)."""

        total = (0.0, 0.0, 0)

        def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            w, b, n = self.total
            self.total = (w + self.wait, b + self.busy, n + self.samples)
            super().on_train_epoch_start(trainer, pl_module)

        def figures(self) -> tuple[float, float, int]:
            w, b, n = (x + y for x, y in zip(self.total, (self.wait, self.busy, self.samples)))
            return w, b, int(n)

    monitor = WholeRun(prog_bar=False)
    trainer = L.Trainer(
        accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=steps, max_epochs=-1,
        max_time={"seconds": seconds}, callbacks=[monitor], limit_val_batches=0,
        default_root_dir=root, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    trainer.fit(model, **data)
    torch.cuda.synchronize()
    return (trainer.global_step, *monitor.figures()), time.perf_counter() - t0


class SameBatch:
    """The ceiling's data: one batch already on the GPU, ``steps`` times."""

    def __init__(self, batch: tuple[torch.Tensor, ...], steps: int):
        self.batch, self.steps = batch, steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Any:
        return iter([self.batch] * self.steps)


def step_train(ctx: Context) -> list[str]:
    from ffcv_pairs import make_loader
    from ffcv_pairs.lightning.datamodule import PairDataModule
    from ffcv_pairs.lightning.model import SiamesePairClassifier

    path, aug = str(_beton(ctx)), _augment()
    dm = PairDataModule(train_path=path, global_batch_size=GLOBAL_BATCH, augment=aug)
    (steps, w, b, n), seconds = _fit(
        SiamesePairClassifier(width=32), {"datamodule": dm}, ctx.args.train_seconds, ctx.work
    )
    loader = make_loader(path, batch_size=GLOBAL_BATCH, augment=aug, device="cuda")
    batch = tuple(t.clone() for t in next(iter(loader)))
    loader.close()
    (c_steps, _, c_busy, c_n), _ = _fit(
        SiamesePairClassifier(width=32), {"train_dataloaders": SameBatch(batch, 300)}, 60,
        ctx.work,
    )  # fmt: skip
    return [
        f"{steps} steps of {GLOBAL_BATCH} pairs in {seconds:.0f} s (time box "
        f"{ctx.args.train_seconds} s, with start-up): data wait {w / (w + b):.1%} of step time, "
        f"{n / (w + b):,.0f} pairs/s while stepping",
        f"ceiling, the same model on one batch already on the GPU ({c_steps} steps): "
        f"{c_n / c_busy:,.0f} pairs/s; the loader ran at {n / (w + b) / (c_n / c_busy):.0%} of it",
        "(host-side times: a step ends when its work is queued, or when it waits on the GPU)",
    ]


def _rank(rank: int, world: int, beton: str, port: int, backend: str) -> None:
    import torch.distributed as dist

    from ffcv_pairs import make_loader

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    dist.init_process_group(backend, rank=rank, world_size=world)
    loader = make_loader(beton, batch_size=256, distributed=True, device=None, augment=_augment())
    want = torch.device("cuda", rank % torch.cuda.device_count())
    if loader.device != want:
        raise RuntimeError(f"rank {rank}: device=None gave {loader.device}, want {want}")
    seen = 0
    for a, _, label in loader:
        if a.device != want:
            raise RuntimeError(f"rank {rank}: a batch on {a.device}, want {want}")
        seen += len(label)
    on = want if backend == "nccl" else torch.device("cpu")
    ids = torch.as_tensor(loader.epoch_order(0), device=on)
    every = [torch.empty_like(ids) for _ in range(world)]
    dist.all_gather(every, ids)
    total = torch.tensor([seen], device=on)
    dist.all_reduce(total)
    unique = len(torch.unique(torch.cat(every)))
    if seen != len(ids) or unique != world * seen or int(total) != world * seen:
        raise RuntimeError(f"rank {rank}: read {seen}, {unique} distinct of {int(total)} in all")
    dist.destroy_process_group()


def step_ranks(ctx: Context) -> list[str]:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gpus = torch.cuda.device_count()
    backend = "nccl" if gpus >= 2 else "gloo"
    args = (2, str(_beton(ctx)), port, backend)
    mp.start_processes(_rank, args, nprocs=2, start_method="spawn")
    where = "cuda:0 and cuda:1" if gpus >= 2 else "both on cuda:0 (one GPU, shared)"
    return [f"2 ranks, {backend}, device=None on {where}; every batch there; shards disjoint"]


def make_plan(gpus: int, args: argparse.Namespace) -> list[Step]:
    steps = [Step("simulation", "pytest tests/test_delivery.py", step_simulation)]
    if gpus < 1:
        return steps
    sizes = f"{args.pairs:,} at 64x64 and {args.pairs_224:,} at 224x224"
    return [
        *steps,
        Step("data", f"write {sizes} pairs of uint8", step_data),
        Step("cuda-tests", "pytest -m cuda", step_cuda_tests),
        Step("throughput", f"bf16 pairs/s on the GPU, batch {args.batch_sizes}", step_throughput),
        Step("train", f"{args.train_seconds} s of {GLOBAL_BATCH}, bf16-mixed", step_train),
        Step("ranks", "2 processes (NCCL on 2 GPUs, else gloo on one)", step_ranks),
    ]


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
    out += ["", f"{sum(r.seconds for r in results):.0f} s in all (budget: 360 s)."]
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
    gpus = gpu_count() if cuda_available() else 0
    date = datetime.date.today().isoformat()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        results = run_plan(plan(gpus, args), Context(args, Path(work)))
    if gpus == 0:
        print(NO_GPU)
    if gpus == 0 and args.out is None:
        return 0 if all(r.ok for r in results) else 1
    out = args.out or REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    report = out / f"gpu-{date}.md"
    report.write_text(render(results, date, machine() if gpus else [NO_GPU]))
    print(f"gpu-check: wrote {report}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
