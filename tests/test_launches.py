"""Loaders busy at once in one process, under each of numba's threading layers
(``ffcv_pairs/kernels/launches.py``): numba's ``workqueue`` layer aborts the process when
two threads launch parallel kernels at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ffcv_pairs.kernels import launches

REPO = Path(__file__).resolve().parents[1]

TWO_LOADERS = """
import sys, threading
from pathlib import Path
import numba as nb
import numpy as np
from ffcv_pairs import ArraySource, PairAugment, make_loader, write_pairs

path = Path(sys.argv[1])
a = np.random.default_rng(0).integers(0, 256, (1024, 3, 16, 16), dtype=np.uint8)
write_pairs(ArraySource(a, a[::-1].copy(), np.arange(1024) % 2), path, progress=False)
errors = []

def run(seed, augment):
    try:
        loader = make_loader(path, batch_size=32, order="random", seed=seed, augment=augment,
                             num_threads=2)
        for _ in range(8):
            for _ in loader:
                pass
    except BaseException as e:
        errors.append(e)

# one loader that only decodes (decode_pairs), one that augments (fused_pairs)
threads = [threading.Thread(target=run, args=(0, None)),
           threading.Thread(target=run, args=(1, PairAugment(hflip=0.5, crop=(12, 12))))]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
print("layer", nb.threading_layer())
"""


@pytest.mark.parametrize("layer", ["workqueue", "default"])
def test_two_loaders_busy_at_once_in_one_process(tmp_path: Path, layer: str) -> None:
    """Without the turns, ``workqueue`` ends this process with SIGABRT within a few batches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["NUMBA_THREADING_LAYER"] = layer
    proc = subprocess.run(
        [sys.executable, "-c", TWO_LOADERS, str(tmp_path / "pairs.beton")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    chosen = proc.stdout.split()[-1]
    assert chosen == layer if layer != "default" else chosen in ("tbb", "omp", "workqueue")


def _held_elsewhere() -> bool:
    """Whether another thread holds the turns now (this thread tries to take them)."""
    out = []

    def probe() -> None:
        took = launches._TURNS.acquire(blocking=False)
        if took:
            launches._TURNS.release()
        out.append(not took)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return out[0]


@pytest.mark.parametrize(
    ("layer", "takes_turns"),
    [("workqueue", True), ("tbb", False), ("omp", False), (None, True)],
)
def test_launches_take_turns_only_where_the_layer_needs_it(
    monkeypatch: pytest.MonkeyPatch, layer: str | None, takes_turns: bool
) -> None:
    """``None``: no parallel launch yet, numba has not chosen its layer (it raises)."""

    def threading_layer() -> str:
        if layer is None:
            raise ValueError("Threading layer is not initialized.")
        return layer

    monkeypatch.setattr(launches, "_side_by_side", None)
    monkeypatch.setattr(launches.nb, "threading_layer", threading_layer)
    with launches.kernel_launches():  # the first batch: always in turn
        assert _held_elsewhere()
    with launches.kernel_launches():
        assert _held_elsewhere() is takes_turns
    assert launches._side_by_side is (None if layer is None else not takes_turns)


def test_a_child_forked_while_a_thread_holds_the_turns_gets_them_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holder does not exist in the child: its turns must not stay taken there."""
    monkeypatch.setattr(launches, "_side_by_side", None)
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with launches.kernel_launches():
            inside.set()
            leave.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(60)
        pid = os.fork()
        if pid == 0:  # the child: exit 0 if it gets the turns, 3 if they stay taken
            os._exit(0 if launches._TURNS.acquire(timeout=10) else 3)
        _, status = os.waitpid(pid, 0)
    finally:
        leave.set()
        holder.join()
    assert os.waitstatus_to_exitcode(status) == 0
