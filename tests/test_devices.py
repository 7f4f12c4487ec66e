"""``resolve_device``: a definite device, ``cuda:LOCAL_RANK`` by default, and no CUDA for "cpu"."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ffcv_pairs.load.devices import resolve_device


def _untouchable(*_: object) -> None:
    raise AssertionError("CUDA was touched")


@pytest.fixture
def no_cuda_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any call into torch.cuda fails the test."""
    for name in ("is_available", "device_count", "current_device", "init", "set_device"):
        monkeypatch.setattr(torch.cuda, name, _untouchable)


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    """``gpus(count, current=0)``: pretend this process sees ``count`` GPUs."""

    def make(count: int, current: int = 0) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: current)

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    return make


@pytest.mark.parametrize("device", ["cpu", "cuda:2", torch.device("cuda", 1), "meta"])
def test_definite_devices_are_returned_without_touching_cuda(no_cuda_calls, device) -> None:
    assert resolve_device(device) == torch.device(device)


def test_no_gpu_means_cpu(gpus) -> None:
    gpus(0)
    assert resolve_device(None) == torch.device("cpu")


@pytest.mark.parametrize(
    ("local_rank", "count", "current", "expect"),
    [
        (None, 4, 0, 0),
        (None, 4, 2, 2),  # a process that called set_device(2)
        ("3", 4, 0, 3),  # torchrun / Lightning: one process per GPU
        ("3", 1, 0, 0),  # each process sees only its own GPU (CUDA_VISIBLE_DEVICES)
        ("5", 4, 0, 1),  # more ranks than GPUs: shared round-robin
        ("", 2, 1, 1),
    ],
)
@pytest.mark.parametrize("device", [None, "cuda"])
def test_default_gpu_is_local_rank_or_current(
    gpus, monkeypatch: pytest.MonkeyPatch, device, local_rank, count, current, expect
) -> None:
    gpus(count, current)
    if local_rank is not None:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    got = resolve_device(device)
    assert got == torch.device("cuda", expect) and got.index == expect


def test_the_loader_resolves_through_it(gpus, monkeypatch: pytest.MonkeyPatch) -> None:
    from ffcv_pairs.load import loader

    assert loader.resolve_device is resolve_device
    gpus(2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert loader.resolve_device(None) == torch.device("cuda", 1)
    gpus(0)
    assert loader.resolve_device(None) == torch.device("cpu")


@pytest.mark.parametrize(
    ("device", "local_rank", "needle"),
    [
        ("gpu", None, "device='gpu' is not a torch device"),
        ("cuda", None, "device='cuda' needs a CUDA GPU, but none is available"),
        (None, "x", "LOCAL_RANK='x' must be a non-negative integer"),
        (None, "-1", "LOCAL_RANK='-1' must be a non-negative integer"),
    ],
)
def test_bad_values_are_named(gpus, monkeypatch, device, local_rank, needle) -> None:
    gpus(0 if device == "cuda" else 2)
    if local_rank is not None:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        resolve_device(device)


def test_cpu_creates_no_cuda_context() -> None:
    """In a fresh interpreter, even where there is a GPU."""
    code = (
        "import torch\n"
        "from ffcv_pairs.load.devices import resolve_device\n"
        "assert resolve_device('cpu') == torch.device('cpu')\n"
        "assert not torch.cuda.is_initialized(), 'CUDA initialised'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
