"""Lightning: DataModule batch sizes, the CLI, 2-rank DDP on gloo, mid-epoch resume, the demo."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
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


def test_a_datamodule_holding_a_loader_pickles(beton: Path) -> None:
    """``ddp_spawn`` pickles the datamodule, loaders and all: the copy's loader gives the
    same batches, and its resume hook is the copy's."""
    dm = PairDataModule(train_path=str(beton), batch_size=32, augment=PairAugment(hflip=0.5))
    loader = dm.train_dataloader()
    copy = pickle.loads(pickle.dumps(dm))
    again = copy._loaders["train"]
    assert again.on_resume == copy._align_progress and again.on_resume != dm._align_progress
    for epoch in range(2):
        got = [(x.numpy().tobytes(), lab.tolist()) for x, _, lab in again]
        assert got == [(x.numpy().tobytes(), lab.tolist()) for x, _, lab in loader], epoch


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
    # Nothing dropped; the ranks' shares padded to equal lengths (167 each) by wrapping.
    assert set(seen) == set(range(500)) and len(seen) == 3 * 167


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


def _records(out: Path, mode: str, devices: int) -> list[dict]:
    """Per rank: the ids of each batch trained on, with its epoch and step."""
    runs = []
    for rank in range(devices):
        path = out / f"{mode}-{devices}-rank{rank}.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        run = {k: [x[k] for x in lines] for k in ("ids", "epoch", "step")}
        summary = out / f"{mode}-{devices}-rank{rank}.json"
        runs.append({**run, **(json.loads(summary.read_text()) if summary.exists() else {})})
    return runs


def _ddp(out: Path, train: Path, mode: str, devices: int, batch: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(train), mode, str(devices), str(batch)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=out,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return _records(out, mode, devices)


def _by_epoch(run: dict, epoch: int) -> list[int]:
    return [i for ids, e in zip(run["ids"], run["epoch"]) if e == epoch for i in ids]


BATCH = 24  # per device, on 2 devices: 10 batches an epoch


@pytest.fixture(scope="module")
def killed(beton: Path, tmp_path_factory) -> tuple[Path, list[dict]]:
    """A 2-rank DDP fit that checkpoints 3 batches into epoch 1 (step 13), then loses
    rank 1 to SIGKILL at the next step; the survivor is killed too (as a scheduler
    would), after a grace period in which it may fail on its own.

    Returns the run's folder (with ``mid.ckpt``) and what each rank trained on up to
    the checkpoint."""
    out = tmp_path_factory.mktemp("killed")
    ids = beton.with_name("ids.beton")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(SCRIPT), str(out), str(ids), "kill", "2", str(BATCH)]
    with (out / "stderr").open("w") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=out, start_new_session=True
        )
        try:
            victim = out / "victim.pid"
            deadline = time.monotonic() + 600
            while not victim.exists():  # rank 1 writes it once the checkpoint is on disk
                assert proc.poll() is None, (out / "stderr").read_text()[-4000:]
                assert time.monotonic() < deadline, "the run never reached the kill point"
                time.sleep(0.05)
            os.kill(int(victim.read_text()), signal.SIGKILL)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the job's process group, started here
            proc.wait()
    assert proc.returncode != 0, "the job cannot have finished without rank 1"
    stop = 500 // 2 // BATCH + 3
    runs = _records(out, "kill", 2)
    for run in runs:  # what the checkpoint holds: the steps before it
        keep = [k for k, step in enumerate(run["step"]) if step < stop]
        for key in ("ids", "epoch", "step"):
            run[key] = [run[key][k] for k in keep]
        assert len(run["ids"]) == stop
    return out, runs


def _planned(ids: Path, rank: int, world: int, batch: int, epochs=(0, 1)) -> list[list[int]]:
    """The batches the loader plans for ``rank`` (what the DDP script's loader is)."""
    from ffcv_pairs import make_loader

    loader = make_loader(
        ids, batch_size=batch, seed=5, window_bytes=8192, rank=rank, world_size=world
    )
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        out += [lab.tolist() for _, _, lab in loader]
    return out


def test_ddp_two_ranks_and_mid_epoch_resume(beton: Path, killed) -> None:
    """Trainer(accelerator="cpu", devices=2, strategy="ddp") on gloo, killed, resumed on 2."""
    out, part = killed
    ids = beton.with_name("ids.beton")
    resumed = _ddp(out, ids, "resume", 2, BATCH)
    assert {run["world"] for run in resumed} == {2}
    planned = [_planned(ids, rank, 2, BATCH) for rank in (0, 1)]
    for rank in (0, 1):
        # Each rank trains on its share, batch by batch, and killed mid-epoch then
        # resumed, it continues exactly where it stopped.
        assert part[rank]["ids"] + resumed[rank]["ids"] == planned[rank]
        assert resumed[rank]["steps"] == 2 * (500 // 2 // BATCH)
    for epoch in (0, 1):
        r0, r1 = (_by_epoch(part[r], epoch) + _by_epoch(resumed[r], epoch) for r in (0, 1))
        assert len(r0) == len(r1) == (500 // 2 // BATCH) * BATCH
        assert not set(r0) & set(r1), "ranks must see disjoint samples"
        assert 500 - len(set(r0) | set(r1)) < 2 * BATCH
    epoch1 = _by_epoch(part[0], 1) + _by_epoch(resumed[0], 1)
    assert _by_epoch(part[0], 0) != epoch1, "epochs must differ"


@pytest.mark.parametrize(("devices", "batch"), [(1, 16), (3, 24)])
def test_killed_job_resumes_on_other_device_counts(
    beton: Path, killed, devices: int, batch: int
) -> None:
    """``--ckpt_path`` from the killed 2-rank job, on 1 device (global batch 48 -> 16) and
    on 3 (48 -> 72): the job completes, and epoch 1 is every sample once, apart from
    fewer than devices x batch dropped at its end. (With a larger global batch,
    Lightning would end the epoch early if its batch count were not moved.)"""
    from ffcv_pairs import make_loader

    out, part = killed
    ids = beton.with_name("ids.beton")
    resumed = _ddp(out, ids, "resume", devices, batch)
    assert {run["world"] for run in resumed} == {devices}
    assert all(set(run["epoch"]) == {1} for run in resumed), "only the rest of epoch 1"
    seen = [i for run in part for i in _by_epoch(run, 1)] + [
        i for run in resumed for ids_ in run["ids"] for i in ids_
    ]
    assert len(seen) == len(set(seen)), "a sample was trained on twice"
    assert 0 <= 500 - len(seen) < devices * batch
    # Each rank trained on exactly the loader's plan for it: Lightning's epoch ended
    # with the loader's last batch (its batch count was moved to this world's).
    state = torch.load(out / "mid.ckpt", weights_only=False)
    state = state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    stop = 500 // 2 // BATCH + 3
    for rank, run in enumerate(resumed):
        loader = make_loader(
            ids, batch_size=batch, seed=5, window_bytes=8192, rank=rank, world_size=devices
        )
        loader.load_state_dict(state)
        assert run["ids"] == [lab.tolist() for _, _, lab in loader]
        assert run["steps"] == stop + len(run["ids"])


def test_single_process_resume_through_lightning(beton: Path, tmp_path: Path) -> None:
    ids = beton.with_name("ids.beton")
    part = _ddp(tmp_path, ids, "part", 1, 16)
    resumed = _ddp(tmp_path, ids, "resume", 1, 16)
    assert part[0]["ids"] + resumed[0]["ids"] == _planned(ids, 0, 1, 16)
    ckpt = torch.load(tmp_path / "mid.ckpt", weights_only=False)
    state = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert state["epoch"] == 1 and state["batches_consumed"] == 3
    assert state["segments"] == [
        {"world_size": 1, "batch_size": 16, "drop_last": True, "batches": 3}
    ]


@pytest.mark.slow
def test_demo_accuracy(tmp_path: Path) -> None:
    """Paired augmentation learns the task; independent augmentation falls toward chance."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ffcv_pairs.demo",
            "--train",  # 1,200 pairs, 3 epochs: 94.2% paired, 53.5% independent here
            "1200",
            "--val",
            "400",
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


# -- the eval pipeline ------------------------------------------------------------------


@pytest.fixture(scope="module")
def large_images(tmp_path_factory) -> Path:
    """96x96 pairs: what a user's training resizes to 64x64."""
    a, b, labels = make_arrays(40, (3, 96, 96), seed=5)
    path = tmp_path_factory.mktemp("pl96") / "val.beton"
    write_pairs(ArraySource(a, b, labels), path, page_size=1 << 16, progress=False)
    return path


def _eval_batches(dm: PairDataModule, hook: str, epoch: int) -> list[torch.Tensor]:
    dm.trainer = _fake_trainer(rank=0, world=1, devices=1)
    loader = getattr(dm, hook)()
    loader.set_epoch(epoch)
    return [a.clone() for a, _, _ in loader]


@pytest.mark.parametrize("hook", ["val_dataloader", "test_dataloader", "predict_dataloader"])
def test_eval_batches_have_the_training_size_by_default(large_images: Path, hook: str) -> None:
    """A resized crop to 64 in training: 64x64 evaluation batches (the largest central
    square of each 96x96 image, resized), normalised the same way, the same every epoch."""
    mean, std = (1.0, 2.0, 3.0), (2.0, 2.0, 4.0)
    train = PairAugment(resized_crop=(64, 64), hflip=0.5, normalize_mean=mean, normalize_std=std)
    path = str(large_images)
    dm = PairDataModule(path, path, path, path, batch_size=16, augment=train)
    assert dm.eval_augment == PairAugment(
        resized_crop=(64, 64), center=True, normalize_mean=mean, normalize_std=std
    )
    first = _eval_batches(dm, hook, epoch=0)
    assert [tuple(a.shape) for a in first] == [(16, 3, 64, 64), (16, 3, 64, 64), (8, 3, 64, 64)]
    assert first[0].dtype == torch.float32
    for a, again in zip(first, _eval_batches(dm, hook, epoch=3)):
        assert torch.equal(a, again)


def test_eval_augment_is_used_for_val_and_test(large_images: Path) -> None:
    path = str(large_images)
    own = PairAugment(crop=(48, 40), center=True)
    dm = PairDataModule(
        path, path, path, batch_size=16, augment=PairAugment(hflip=1.0), eval_augment=own
    )
    a, _, _ = make_arrays(40, (3, 96, 96), seed=5)
    for hook in ("val_dataloader", "test_dataloader"):
        got = torch.cat(_eval_batches(dm, hook, epoch=1)).numpy()
        np.testing.assert_array_equal(got, a[:, :, 24:72, 28:68])  # the central 48x40
    with pytest.raises(TypeError, match="eval_augment must be a PairAugment or None, got 3"):
        PairDataModule(path, batch_size=8, eval_augment=3)


def test_eval_without_a_crop_is_only_the_normalisation(beton: Path) -> None:
    flips = PairDataModule(str(beton), batch_size=8, augment=PairAugment(hflip=0.5))
    assert flips.eval_augment is None
    mean, std = (3.0, 2.0, 1.0), (4.0, 4.0, 4.0)
    norm = PairAugment(hflip=0.5, translate=(2, 2), normalize_mean=mean, normalize_std=std)
    dm = PairDataModule(str(beton), batch_size=8, augment=norm)
    assert dm.eval_augment == PairAugment(normalize_mean=mean, normalize_std=std)


def test_eval_augment_from_the_cli_yaml(large_images: Path, tmp_path: Path, monkeypatch) -> None:
    """LightningCLI reads ``eval_augment`` from YAML as it reads ``augment``."""
    from ffcv_pairs.train import cli_main

    monkeypatch.setattr(sys, "argv", ["train.py"])  # pytest's own flags are not the CLI's
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data:\n  train_path: {large_images}\n  batch_size: 8\n"
        "  augment:\n    resized_crop: [64, 64]\n"
        "  eval_augment:\n    resized_crop: [32, 32]\n    center: true\n"
        f"trainer:\n  logger: false\n  default_root_dir: {tmp_path}\n"
    )
    cli = cli_main(["--config", str(config)], run=False)
    assert cli.datamodule.eval_augment == PairAugment(resized_crop=(32, 32), center=True)
    assert cli.datamodule.augment == PairAugment(resized_crop=(64, 64))


def test_init_documents_its_own_arguments() -> None:
    """help(PairDataModule.__init__) lists the arguments, not LightningDataModule's text."""
    import inspect

    doc = inspect.getdoc(PairDataModule.__init__)
    assert doc is not None and "prepare_data_per_node" not in doc
    names = [p for p in inspect.signature(PairDataModule.__init__).parameters if p != "self"]
    assert doc.count("\nArgs:\n") == 1
    for name in names:
        assert f"\n    {name}: " in doc, name


@pytest.mark.parametrize(
    "aug",
    [
        PairAugment(hflip=0.5),
        PairAugment(noise_std=1.0),
        PairAugment(crop=(4, 4)),
        PairAugment(resized_crop=(4, 4)),
        PairAugment(translate=(1, 0), crop=(4, 4), center=True),
    ],
    ids=["hflip", "noise", "crop-not-centred", "resized-not-centred", "translate"],
)
def test_an_eval_augment_that_draws_at_random_is_refused(aug: PairAugment) -> None:
    """Validation batches that change with the epoch make its metrics noise: refused by name
    (found by a probe: the docstring said deterministic, nothing checked it)."""
    with pytest.raises(ValueError, match=r"eval_augment draws at random \("):
        PairDataModule("x.beton", batch_size=2, eval_augment=aug)


def test_the_default_eval_twin_draws_nothing() -> None:
    from ffcv_pairs.augment.evaluation import eval_pipeline, random_ops

    every = PairAugment(
        hflip=0.5, vflip=0.5, rot90=True, resized_crop=(8, 8), brightness=0.3,
        contrast=0.3, noise_std=2.0, normalize_mean=(1.0,), normalize_std=(2.0,),
    )  # fmt: skip
    assert random_ops(every) and random_ops(eval_pipeline(every)) == []
    assert PairDataModule("x.beton", batch_size=2, augment=every).eval_augment == eval_pipeline(
        every
    )
