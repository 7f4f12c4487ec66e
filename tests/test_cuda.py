"""The GPU path against the CPU path, by value. Skipped without CUDA; ``make gpu-check`` runs them.

* uint8 batches (with and without augmentation) are byte-identical to the CPU path's;
* normalised outputs agree with the CPU path, and with ``(x - mean) / std`` computed here
  from the CPU path's uint8 batch, within one unit in the last place of the output dtype
  (relative ``2**-23``, ``2**-10``, ``2**-7`` for float32, float16, bfloat16);
* ``device=None`` puts batches on ``cuda:LOCAL_RANK``.

* ``device="cpu"`` leaves CUDA uninitialised in a process that has a GPU;
* batches stay intact when the host runs far ahead of a slow GPU, when the consumer works
  under a stream of its own, and when it holds every batch (see
  :mod:`ffcv_pairs.load.delivery.stage`; ``tests/test_delivery.py`` proves the same
  ordering on the CPU);
* a process touches only its own GPU: one CUDA context, on ``cuda:LOCAL_RANK``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs

pytestmark = pytest.mark.cuda

SEED = 5
MEAN, STD = (123.7, 116.3, 103.5), (58.4, 57.1, 57.4)
ULP = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


@pytest.fixture(scope="module")
def beton(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (300, 3, 20, 24), dtype=np.uint8)
    b = rng.integers(0, 256, (300, 3, 20, 24), dtype=np.uint8)
    path = tmp_path_factory.mktemp("cuda") / "pairs.beton"
    write_pairs(ArraySource(a, b, np.arange(300)), path, page_size=1 << 16, progress=False)
    return path


def run_epochs(
    path: Path, device: str, aug: PairAugment | None, epochs=(0, 3), **kw
) -> list[torch.Tensor]:
    """A, B and labels of ``epochs``, concatenated, copied to the CPU."""
    loader = make_loader(
        path,
        batch_size=64,
        seed=SEED,
        augment=aug,
        device=device,
        drop_last=False,
        num_threads=2,
        window_bytes=1 << 17,
        **kw,
    )
    parts: list[list[torch.Tensor]] = [[], [], []]
    for epoch in epochs:
        loader.set_epoch(epoch)
        for batch in loader:
            assert all(t.device.type == torch.device(device).type for t in batch)
            for part, t in zip(parts, batch):
                part.append(t.to("cpu", copy=True))  # slots are reused: copy
    return [torch.cat(p) for p in parts]


UINT8 = [
    None,
    PairAugment(hflip=0.5, crop=(16, 20), crop_padding=4),
    PairAugment(
        rot90=True, vflip=0.5, resized_crop=(12, 12), crop_scale=(0.3, 1.0), translate=(2, 2)
    ),
    PairAugment(hflip=0.5, brightness=0.3, contrast=0.2, noise_std=2.0, brightness_paired=False),
]


@pytest.mark.parametrize("aug", UINT8, ids=["plain", "flip+crop", "resized+rot", "photometric"])
def test_uint8_batches_equal_the_cpu_path_byte_for_byte(beton: Path, aug) -> None:
    gpu, cpu = run_epochs(beton, "cuda", aug), run_epochs(beton, "cpu", aug)
    for g, c in zip(gpu, cpu):
        assert g.dtype == c.dtype and g.shape == c.shape
        assert torch.equal(g, c)


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
def test_normalised_batches_match_the_cpu_path(beton: Path, out_dtype: str) -> None:
    geometry = {"hflip": 0.5, "crop": (16, 20), "crop_padding": 4}
    aug = PairAugment(**geometry, normalize_mean=MEAN, normalize_std=STD, out_dtype=out_dtype)
    dtype = getattr(torch, out_dtype)
    gpu, cpu = run_epochs(beton, "cuda", aug), run_epochs(beton, "cpu", aug)
    raw = run_epochs(beton, "cpu", PairAugment(**geometry))
    m, s = (torch.tensor(v).reshape(1, 3, 1, 1) for v in (MEAN, STD))
    tol = ULP[out_dtype]
    for g, c, r in zip(gpu[:2], cpu[:2], raw[:2]):
        assert g.dtype == c.dtype == dtype
        torch.testing.assert_close(g.float(), c.float(), rtol=tol, atol=tol)
        expect = ((r.float() - m) / s).to(dtype)
        torch.testing.assert_close(g.float(), expect.float(), rtol=tol, atol=tol)
    assert torch.equal(gpu[2], cpu[2])


def test_default_device_is_cuda_local_rank(beton: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    last = torch.cuda.device_count() - 1
    monkeypatch.setenv("LOCAL_RANK", str(last))
    loader = make_loader(beton, batch_size=32, order="sequential", device=None)
    assert loader.device == torch.device("cuda", last)
    a, b, label = next(iter(loader))
    assert a.device == b.device == label.device == torch.device("cuda", last)
    cpu = next(iter(make_loader(beton, batch_size=32, order="sequential", device="cpu")))
    for g, c in zip((a, b, label), cpu):
        assert torch.equal(g.cpu(), c.clone())


def test_cpu_device_creates_no_cuda_context(beton: Path) -> None:
    code = (
        "import torch\n"
        "from ffcv_pairs import make_loader\n"
        f"loader = make_loader({str(beton)!r}, batch_size=32, device='cpu')\n"
        "for batch in loader:\n"
        "    pass\n"
        "assert not torch.cuda.is_initialized(), \"device='cpu' initialised CUDA\"\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("normalize", [False, True], ids=["uint8", "normalised"])
def test_a_consumer_ahead_of_the_gpu_gets_its_own_batches(beton: Path, normalize: bool) -> None:
    """The host runs far ahead of a slow GPU (no synchronisation until the end), as an
    asynchronous training loop may: each batch must still arrive intact."""
    extra = {"normalize_mean": MEAN, "normalize_std": STD} if normalize else {}
    aug = PairAugment(hflip=0.5, **extra)
    loader = make_loader(beton, batch_size=16, order="sequential", seed=SEED, augment=aug)
    kept = []
    for batch in loader:
        torch.cuda._sleep(50_000_000)  # tens of ms of GPU time per batch, queued
        kept.append([t.clone() for t in batch])  # on the default stream, after the sleep
    torch.cuda.synchronize()
    want = make_loader(
        beton, batch_size=16, order="sequential", seed=SEED, augment=aug, device="cpu"
    )
    for k, (got, expect) in enumerate(zip(kept, want, strict=True)):
        for g, c in zip(got, expect):
            assert torch.equal(g.cpu(), c), f"batch {k} differs from the CPU path"


def _slow_consumer(loader, side: torch.cuda.Stream | None = None, keep: bool = False) -> list:
    got = []
    ctx = torch.cuda.stream(side) if side is not None else contextlib.nullcontext()
    with ctx:
        for batch in loader:
            torch.cuda._sleep(20_000_000)  # GPU time queued ahead of the reads
            got.append(list(batch) if keep else [t.clone() for t in batch])
    torch.cuda.synchronize()
    return got


def _equal_cpu(got: list, path: Path, aug: PairAugment | None) -> None:
    want = make_loader(
        path, batch_size=16, order="sequential", seed=SEED, augment=aug, device="cpu"
    )
    for k, (g, c) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(g, c):
            assert torch.equal(x.cpu(), y), f"batch {k} differs from the CPU path"


def test_a_consumer_under_its_own_stream_gets_its_batches(beton: Path) -> None:
    aug = PairAugment(hflip=0.5)
    loader = make_loader(beton, batch_size=16, order="sequential", seed=SEED, augment=aug)
    _equal_cpu(_slow_consumer(loader, side=torch.cuda.Stream()), beton, aug)


def test_every_batch_may_be_held_on_the_gpu(beton: Path) -> None:
    aug = PairAugment(hflip=0.5)
    loader = make_loader(beton, batch_size=16, order="sequential", seed=SEED, augment=aug)
    _equal_cpu(_slow_consumer(loader, keep=True), beton, aug)


def test_one_cuda_context_on_the_local_rank_gpu(beton: Path) -> None:
    """The loader's threads create no context on another GPU (threads start on GPU 0)."""
    last = torch.cuda.device_count() - 1
    code = (
        "import os, torch\n"
        "from ffcv_pairs import make_loader\n"
        f"loader = make_loader({str(beton)!r}, batch_size=32)\n"
        "for epoch in range(2):\n"
        "    for a, b, label in loader:\n"
        "        assert a.device == torch.device('cuda', int(os.environ['LOCAL_RANK']))\n"
        "ctx = [i for i in range(torch.cuda.device_count())\n"
        "       if torch.cuda.memory_reserved(i) or torch.cuda.memory_allocated(i)]\n"
        "print('devices with memory:', ctx)\n"
        "assert ctx == [int(os.environ['LOCAL_RANK'])], ctx\n"
    )
    env = {**os.environ, "LOCAL_RANK": str(last)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
