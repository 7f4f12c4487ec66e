"""Lightning: DataModule batch sizes, the CLI, 2-rank DDP on gloo, mid-epoch resume, the demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import make_arrays

from ffcv_pairs import ArraySource, PairAugment, write_pairs
from ffcv_pairs.lightning.datamodule import PairDataModule

REPO = Path(__file__).parents[1]
SCRIPT = REPO / "tests" / "scripts" / "ddp_fit.py"


@pytest.fixture(scope="module")
def beton(tmp_path_factory) -> Path:
    a, b, labels = make_arrays(500, (3, 12, 12))
    path = tmp_path_factory.mktemp("pl") / "train.beton"
    write_pairs(ArraySource(a, b, labels % 2 + 0 * labels), path, page_size=4096, progress=False)
    # The label doubles as the sample id in the DDP test: write ids instead.
    write_pairs(
        ArraySource(a, b, labels), path.with_name("ids.beton"), page_size=4096, progress=False
    )
    return path


def _fake_trainer(rank: int, world: int, devices: int) -> SimpleNamespace:
    return SimpleNamespace(
        global_rank=rank,
        world_size=world,
        num_devices=devices,
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
    )


def test_global_batch_is_split_over_ranks(beton: Path) -> None:
    dm = PairDataModule(train_path=str(beton), global_batch_size=1024)
    assert dm.per_device_batch_size(4) == 256
    assert dm.per_device_batch_size(8) == 128
    with pytest.raises(
        ValueError, match="global_batch_size 1024 is not divisible by the world size 3"
    ):
        dm.per_device_batch_size(3)
    small = PairDataModule(train_path=str(beton), global_batch_size=64)
    small.trainer = _fake_trainer(rank=1, world=4, devices=4)
    loader = small.train_dataloader()
    assert loader.batch_size == 16 and loader.rank == 1 and loader.world_size == 4
    assert loader.num_threads >= 1


def test_exactly_one_batch_size(beton: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of global_batch_size"):
        PairDataModule(train_path=str(beton), global_batch_size=8, batch_size=8)
    with pytest.raises(ValueError, match="exactly one of global_batch_size"):
        PairDataModule(train_path=str(beton))


def test_val_is_sequential_and_complete(beton: Path) -> None:
    dm = PairDataModule(
        train_path=str(beton),
        val_path=str(beton.with_name("ids.beton")),
        batch_size=64,
        augment=PairAugment(hflip=1.0),
    )
    seen = []
    for rank in range(3):
        dm.trainer = _fake_trainer(rank=rank, world=3, devices=3)
        loader = dm.val_dataloader()
        assert loader.spec.kind == "sequential" and loader.config.augment is None
        seen.extend(int(i) for _, _, lab in loader for i in lab)
    assert sorted(seen) == list(range(500))


def test_cli_fast_dev_run_with_demo_config(beton: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ffcv_pairs.train",
            "fit",
            "--config",
            str(REPO / "configs" / "demo_cpu.yaml"),
            "--trainer.fast_dev_run=true",
            f"--data.train_path={beton}",
            f"--data.val_path={beton}",
            f"--trainer.default_root_dir={tmp_path}",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--data.augment.crop=[12, 12]",
            "--data.batch_size=32",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _ddp(out: Path, train: Path, mode: str, devices: int = 2) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(train), mode, str(devices)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=out,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in range(devices)]


def _by_epoch(run: dict, epoch: int) -> list[int]:
    return [i for ids, e in zip(run["ids"], run["epochs"]) if e == epoch for i in ids]


def test_ddp_two_ranks_and_mid_epoch_resume(beton: Path, tmp_path: Path) -> None:
    """Trainer(accelerator="cpu", devices=2, strategy="ddp") on gloo, then resume."""
    ids = beton.with_name("ids.beton")
    full = _ddp(tmp_path, ids, "full")
    assert full[0]["world"] == 2
    assert full[0]["steps"] == full[1]["steps"] == 2 * (500 // 32)
    for epoch in (0, 1):
        r0, r1 = _by_epoch(full[0], epoch), _by_epoch(full[1], epoch)
        assert len(r0) == len(r1) == (500 // 32) * 16
        assert not set(r0) & set(r1), "ranks must see disjoint samples"
        assert 500 - len(set(r0) | set(r1)) < 2 * 16
    assert _by_epoch(full[0], 0) != _by_epoch(full[0], 1), "epochs must differ"

    part = _ddp(tmp_path, ids, "part")
    resumed = _ddp(tmp_path, ids, "resume")
    for rank in (0, 1):
        # A repeated run with the same seed trains on the same samples in the same order...
        assert part[rank]["ids"] == full[rank]["ids"][: len(part[rank]["ids"])]
        # ...and interrupted mid-epoch then resumed, it continues exactly where it stopped.
        assert part[rank]["ids"] + resumed[rank]["ids"] == full[rank]["ids"]


def test_single_process_resume_through_lightning(beton: Path, tmp_path: Path) -> None:
    ids = beton.with_name("ids.beton")
    full = _ddp(tmp_path, ids, "full", devices=1)
    part = _ddp(tmp_path, ids, "part", devices=1)
    resumed = _ddp(tmp_path, ids, "resume", devices=1)
    assert part[0]["ids"] + resumed[0]["ids"] == full[0]["ids"]
    ckpt = torch.load(tmp_path / "mid.ckpt", weights_only=False)
    state = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert state["epoch"] == 1 and state["batches_consumed"] == 3


@pytest.mark.slow
def test_demo_accuracy(tmp_path: Path) -> None:
    """Paired augmentation learns the task; independent augmentation falls toward chance."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ffcv_pairs.demo",
            "--train",
            "2000",
            "--val",
            "500",
            "--epochs",
            "3",
            "--compare",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    paired, independent = json.loads((tmp_path / "results.json").read_text())
    assert paired["paired"] and paired["val_acc"] >= 0.90, paired
    assert not independent["paired"] and independent["val_acc"] <= 0.65, independent


cuda = pytest.mark.cuda  # skipped without a GPU (conftest.py); `pytest -m cuda` selects them


@cuda
def test_to_device_and_bf16_on_gpu(beton: Path) -> None:
    from ffcv_pairs import make_loader

    aug = PairAugment(
        hflip=0.5,
        normalize_mean=(1.0, 2.0, 3.0),
        normalize_std=(2.0, 2.0, 2.0),
        out_dtype="bfloat16",
    )
    loader = make_loader(beton, batch_size=32, augment=aug, device="cuda")
    a, b, label = next(iter(loader))
    assert a.is_cuda and b.is_cuda and label.is_cuda
    assert a.dtype == torch.bfloat16 and label.dtype == torch.int64 and label.shape == (32,)
    assert np.isfinite(a.float().cpu().numpy()).all()


@cuda
def test_bf16_mixed_training_on_gpu(beton: Path, tmp_path: Path) -> None:
    import lightning as L

    from ffcv_pairs.lightning.model import SiamesePairClassifier

    dm = PairDataModule(train_path=str(beton), batch_size=32, augment=PairAugment(hflip=0.5))
    trainer = L.Trainer(
        accelerator="gpu",
        devices=1,
        precision="bf16-mixed",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(SiamesePairClassifier(width=4), datamodule=dm)
    assert trainer.global_step == len(dm.train_dataloader())
