"""The host-to-device stage's ordering, proven on the CPU with a simulated GPU.

:class:`SimulatedEngine` runs every copy late, on a thread of its own, and the
consumer's work late on another: a host that refills a pinned slot before its copy
ran, an event recorded before the copy, or a consumer that reads before the copy,
each gives batches that differ from the CPU path's. (Each was broken once on
purpose and these tests failed; see the notes of issue 28.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ffcv_pairs import ArraySource, PairAugment, write_pairs
from ffcv_pairs.load.delivery.simulated import SimStream, SimulatedEngine
from ffcv_pairs.load.delivery.stage import DeviceStage
from ffcv_pairs.load.loader import LoaderConfig, PairLoader

SEED = 3
MEAN, STD = (120.0, 110.0, 100.0), (60.0, 55.0, 50.0)
GEOMETRY = {"hflip": 0.5, "crop": (10, 12), "crop_padding": 2}


@pytest.fixture(scope="module")
def beton(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, (360, 3, 12, 14), dtype=np.uint8)
    b = rng.integers(0, 256, (360, 3, 12, 14), dtype=np.uint8)
    path = tmp_path_factory.mktemp("delivery") / "pairs.beton"
    write_pairs(ArraySource(a, b, np.arange(360) * 7), path, page_size=1 << 16, progress=False)
    return path


def _config(aug: PairAugment | None, batches_ahead: int) -> LoaderConfig:
    return LoaderConfig(
        batch_size=16,
        order="quasi_random",
        seed=SEED,
        augment=aug,
        device="cpu",
        num_threads=1,
        batches_ahead=batches_ahead,
        window_bytes=1 << 17,
        drop_last=False,
    )


def cpu_path(path: Path, aug: PairAugment | None, epochs: int = 2) -> list[list[torch.Tensor]]:
    loader = PairLoader(path, _config(aug, 2))
    return [[t.clone() for t in batch] for _ in range(epochs) for batch in loader]


def expected(path: Path, aug: PairAugment) -> list[list[torch.Tensor]]:
    """The device path's values by definition: the CPU path's uint8 batch, then
    ``(x - mean) / std`` in float32 (what the device stage is asked to do)."""
    m, s = (torch.tensor(v).reshape(1, 3, 1, 1) for v in (MEAN, STD))
    raw = cpu_path(path, PairAugment(**GEOMETRY))
    return [[(a.float() - m) / s, (b.float() - m) / s, label] for a, b, label in raw]


def simulated(
    path: Path,
    aug: PairAugment | None,
    engine: SimulatedEngine,
    batches_ahead: int,
    consumer: SimStream | None = None,
    keep: bool = False,
) -> list[list[torch.Tensor]]:
    """Two epochs through the simulated GPU. The consumer's reads are enqueued on its
    stream (they run late), or with ``keep`` it holds every batch it was given and
    reads them all at the end."""
    loader = PairLoader(path, _config(aug, batches_ahead), copy_engine=engine)
    got: list[list[torch.Tensor]] = []
    stream = consumer or engine.default_stream
    with engine.stream(stream):
        for _ in range(2):
            for batch in loader:
                assert engine.consumer_stream() is stream
                if keep:
                    got.append(list(batch))
                else:
                    engine.run(lambda b=batch: got.append([t.clone() for t in b]), stream)
    engine.synchronize()
    loader.close()
    return got


def assert_same(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]]) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        for name, x, y in zip(("A", "B", "label"), g, w):
            assert x.dtype == y.dtype and x.shape == y.shape, (k, name)
            assert torch.equal(x, y), f"batch {k}: {name} differs from the CPU path"


@pytest.fixture
def engine():
    made: list[SimulatedEngine] = []

    def make(copy_delay: float, consumer_delay: float) -> SimulatedEngine:
        made.append(SimulatedEngine(copy_delay, consumer_delay))
        return made[-1]

    yield make
    for e in made:
        e.close()


@pytest.mark.parametrize("batches_ahead", [1, 2, 4])
@pytest.mark.parametrize("aug", [None, PairAugment(**GEOMETRY)], ids=["plain", "geometry"])
def test_a_lagging_consumer_gets_every_batch_intact(beton, engine, aug, batches_ahead) -> None:
    """The GPU (copies and the consumer's work) far behind the host, as with
    asynchronous training steps: every batch equals the CPU path's."""
    got = simulated(beton, aug, engine(0.002, 0.004), batches_ahead)
    assert_same(got, cpu_path(beton, aug))


@pytest.mark.parametrize("batches_ahead", [1, 3])
def test_normalised_on_the_device_equals_the_definition(beton, engine, batches_ahead) -> None:
    aug = PairAugment(**GEOMETRY, normalize_mean=MEAN, normalize_std=STD)
    got = simulated(beton, aug, engine(0.001, 0.003), batches_ahead)
    assert_same(got, expected(beton, aug))


def test_copies_far_behind_a_fast_consumer(beton, engine) -> None:
    """Only the copies lag: the consumer must still read each batch after its copy."""
    got = simulated(beton, None, engine(0.004, 0.0), 2)
    assert_same(got, cpu_path(beton, None))


def test_a_consumer_under_another_stream(beton, engine) -> None:
    """Batches are ready on the stream current at ``next()``, not the default one."""
    eng = engine(0.002, 0.003)
    got = simulated(beton, None, eng, 2, consumer=eng.side_stream())
    assert_same(got, cpu_path(beton, None))


def test_every_batch_may_be_held(beton, engine) -> None:
    """On a device each batch is its own tensors: holding them all is allowed."""
    aug = PairAugment(**GEOMETRY)
    got = simulated(beton, aug, engine(0.001, 0.0), 1, keep=True)
    assert_same(got, cpu_path(beton, aug))


def test_the_stage_waits_on_the_host_before_a_slot_is_refilled(engine) -> None:
    """Unit level: ``before_fill`` returns only after the slot's last copy ran."""
    eng = engine(0.05, 0.0)
    stage = DeviceStage(eng, 2, [[]])
    host = stage.host_buffer((4,), torch.int64)
    host.fill_(1)
    first = stage.send(0, [host])
    stage.before_fill(0)  # the copy (50 ms late) must have read the 1s by now
    host.fill_(2)
    eng.synchronize()
    assert first.tensors[0].tolist() == [1, 1, 1, 1]


def test_stage_arguments_are_checked(engine) -> None:
    with pytest.raises(ValueError, match="slots must be at least 2, got 1"):
        DeviceStage(engine(0, 0), 1, [[]])


NO_CUDA = """
import sys, torch
touched = []

def forbid(name):
    def call(*args, **kwargs):
        touched.append(name)
        raise RuntimeError(f"CUDA touched: {name}")
    return call

torch.cuda.is_available = lambda: True  # claim a GPU
for name in ("init", "_lazy_init", "current_device", "device_count", "set_device",
             "synchronize", "current_stream", "default_stream", "stream", "Stream", "Event",
             "device", "get_device_properties", "mem_get_info", "memory_allocated",
             "empty_cache", "is_initialized"):
    setattr(torch.cuda, name, forbid("torch.cuda." + name))
for name in ("pin_memory", "cuda", "record_stream", "is_pinned"):
    setattr(torch.Tensor, name, forbid("Tensor." + name))
for name in ("empty", "zeros", "full", "tensor", "as_tensor", "from_numpy"):
    real = getattr(torch, name)
    def checked(*args, _real=real, _name=name, **kwargs):
        if kwargs.get("pin_memory") or "cuda" in str(kwargs.get("device", "")):
            touched.append(f"torch.{_name}({kwargs})")
            raise RuntimeError("CUDA touched")
        return _real(*args, **kwargs)
    setattr(torch, name, checked)

from ffcv_pairs import PairAugment, make_loader
aug = PairAugment(hflip=0.5, crop=(10, 12), crop_padding=2, normalize_mean=(1.0, 2.0, 3.0),
                  normalize_std=(4.0, 5.0, 6.0), out_dtype=sys.argv[2])
loader = make_loader(sys.argv[1], batch_size=16, device="cpu", augment=aug, num_threads=1)
for epoch in range(2):
    n = sum(1 for _ in loader)
assert n == len(loader) > 0, n
print("touched:", touched)
sys.exit(1 if touched else 0)
"""


def test_cpu_device_touches_no_cuda_api_where_a_gpu_is_claimed(beton) -> None:
    """``torch.cuda.is_available()`` says yes and every CUDA entry point raises (and is
    recorded, since upstream swallows pinning errors): ``device="cpu"`` calls none."""
    proc = subprocess.run(
        [sys.executable, "-c", NO_CUDA, str(beton), "bfloat16"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "touched: []" in proc.stdout
