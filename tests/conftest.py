"""Shared fixtures: seeded synthetic pairs in tmp_path, in both .pt layouts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("PYTHONHASHSEED", "0")

# Torch's intra-op threads: one per test process, and in the subprocesses the tests start
# (the demo, writers, torchrun ranks), unless OMP_NUM_THREADS says otherwise. `make test`
# runs three test processes on two cores, and a loader's numba threads share a process with
# the training it feeds: there a parallel region of two OpenMP threads spins at each barrier
# for a thread that the OS has descheduled. The change example's two trainings, on a loaded
# machine: 42 s and 35 CPU s on two threads, 4 s and 8 CPU s on one, the same IoU. The
# loaders' threads are numba's (their own option), not these.
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

# A suite started in the background (`make test &`, a script's `cmd &`) inherits SIGINT
# ignored, and so would every writer it forks: the writer rightly keeps an ignored SIGINT
# ignored (tests/test_write_pool.py checks that), and the tests that press Ctrl-C on it
# would fail. Each test runs as if in a terminal's foreground.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def make_arrays(n: int, shape=(3, 8, 8), dtype="uint8", seed: int = 0):
    """A[i], B[i] = 255 - A[i] (for uint8) and label i, seeded."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "u":
        a = rng.integers(0, 256, (n, *shape), dtype=np.uint8).astype(dtype)
        b = (255 - a).astype(dtype)
    else:
        a = rng.standard_normal((n, *shape)).astype(dtype)
        b = (-a).astype(dtype)
    return a, b, np.arange(n, dtype=np.int64)


def write_small_beton(
    tmp_path: Path, n=300, shape=(3, 8, 8), dtype="uint8", page_size=4096, name="d.beton"
) -> tuple[Path, np.ndarray, np.ndarray]:
    """A ``.beton`` of :func:`make_arrays` (seeded with ``n``) in ``tmp_path``: (path, A, B)."""
    from ffcv_pairs import ArraySource, write_pairs

    a, b, labels = make_arrays(n, shape, dtype, seed=n)
    path = tmp_path / name
    write_pairs(ArraySource(a, b, labels), path, page_size=page_size, progress=False)
    return path, a, b


def write_per_sample(root: Path, split: str, a, b, labels) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(len(a)):
        torch.save(torch.from_numpy(a[i].copy()), root / f"{split}_A_images_{i}.pt")
        torch.save(torch.from_numpy(b[i].copy()), root / f"{split}_B_images_{i}.pt")
        torch.save(torch.tensor(int(labels[i])), root / f"{split}_labels_{i}.pt")
    return root


def write_batched(root: Path, split: str, a, b, labels, per_file: int = 7) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for k, start in enumerate(range(0, len(a), per_file)):
        items = [
            (torch.from_numpy(a[i].copy()), torch.from_numpy(b[i].copy()), int(labels[i]))
            for i in range(start, min(len(a), start + per_file))
        ]
        torch.save(items, root / f"{split}_batch_{k}.pt")
    return root


def read_upstream(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Everything in a .beton, read back by plain ffcv.loader.Loader in SEQUENTIAL order.

    Upstream's numba decoder cannot type float16 arrays (its thread dies with
    ``NotImplementedError: float16`` and the loader hangs), so float16 fields are
    read as int16 bits and viewed back.
    """
    from ffcv.fields import NDArrayField
    from ffcv.loader import Loader, OrderOption

    dtypes = {}

    class BitsField(NDArrayField):
        @staticmethod
        def from_binary(binary):
            field = NDArrayField.from_binary(binary)
            dtypes[len(dtypes)] = field.dtype
            if field.dtype == np.float16:
                return NDArrayField(np.dtype("int16"), field.shape)
            return field

    loader = Loader(
        str(path),
        batch_size=64,
        num_workers=1,
        order=OrderOption.SEQUENTIAL,
        drop_last=False,
        custom_fields={"A": BitsField, "B": BitsField},
    )
    parts: list[list[np.ndarray]] = [[], [], []]
    for batch in loader:
        for p, x in zip(parts, batch):
            p.append(x.numpy().copy())
    a, b, labels = (np.concatenate(p) for p in parts)
    return a.view(dtypes[0]), b.view(dtypes[1]), labels.reshape(-1)


def run_python(
    code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -c code *args`` in a fresh interpreter (``env``: its whole environment, or
    this one's), its exit status checked: 0, or the tail of its stderr in the failure."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture
def pairs_dir(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``pairs_dir(layout, n, shape, dtype)`` -> directory of .pt files."""

    def make(
        layout: str = "per-sample",
        n: int = 40,
        shape=(3, 8, 8),
        dtype="uint8",
        split: str = "train",
        seed: int = 0,
    ) -> Path:
        a, b, labels = make_arrays(n, shape, dtype, seed)
        root = tmp_path / f"pt-{layout}"
        writer = write_per_sample if layout == "per-sample" else write_batched
        return writer(root, split, a, b, labels)

    return make


# -- the small per-sample source of the writer's kill, resume and pool tests -----------------
SMALL_N = 120  # uint8[3, 8, 8] pairs: 10 per 4 KiB page, 12 data pages


def small_argv(src: Path, out: Path, *extra: str) -> list[str]:
    """The write command for the small source: 4 KiB pages, so 12 data pages."""
    return [str(src), str(out), "--split", "train", "--page-size", "4KiB", "--no-progress", *extra]


@pytest.fixture(scope="module")
def small_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    a, b, labels = make_arrays(SMALL_N, (3, 8, 8), seed=3)
    return write_per_sample(tmp_path_factory.mktemp("small") / "pt", "train", a, b, labels)


@pytest.fixture(scope="module")
def small_reference_dir(small_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 2-worker write of ``small_src``."""
    from ffcv_pairs.cli import write_main

    out = tmp_path_factory.mktemp("reference")
    assert write_main(small_argv(small_src, out, "--workers", "2")) == 0
    return out


@pytest.fixture(scope="module")
def small_reference(small_reference_dir: Path) -> bytes:
    """The `.beton` bytes of ``small_reference_dir``."""
    return (small_reference_dir / "train.beton").read_bytes()


@pytest.fixture(scope="module")
def small_reference_stats(small_reference_dir: Path) -> bytes:
    """The image statistics bytes of ``small_reference_dir``."""
    return (small_reference_dir / "train.beton.stats").read_bytes()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first (a minute or more each: started last, one of them
    would keep the run going on one core while the other waits). Tests marked ``cuda``
    need a CUDA GPU: skipped without one (``pytest -m cuda`` runs them)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_leftover_process_group():
    yield
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
