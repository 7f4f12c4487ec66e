"""A `.beton` truncated or overwritten in place under a running loader: one line naming
the file, never a bare bus error. Each case runs in its own process (a bus error ends it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_small_beton

REPO = Path(__file__).parents[1]

# Reads one batch, waits until the loading thread is parked on a full queue (so the file is
# changed between two batches), changes the file as argv[2] says, then reads on.
SCRIPT = """
import os, shutil, sys, time
from pathlib import Path
from ffcv_pairs import make_loader
from ffcv_pairs.load.pipeline import LoaderError
path, how = Path(sys.argv[1]), sys.argv[2]
loader = make_loader(path, batch_size=8, order="sequential", batches_ahead=1, num_threads=1,
                     prefetch=0)
it = iter(loader)
next(it)
queue = loader._active.output_queue
deadline = time.monotonic() + 60
parked = lambda: queue.waiting and queue.full()  # blocked on a full queue, not reading
while not parked() and time.monotonic() < deadline:
    time.sleep(0.01)
assert parked(), "the loading thread never filled the queue"
size = path.stat().st_size
if how == "truncate":
    os.truncate(path, size // 2)
elif how == "cp":  # what `cp new.beton train.beton` does: truncate, then write
    other = path.with_name("other.beton")
    shutil.copyfile(other, path)
elif how == "rename":  # the safe way: a new file renamed over the old one
    other = path.with_name("other.beton")
    os.replace(other, path)
n = 1
try:
    for batch in it:
        n += 1
except LoaderError as e:
    print("LoaderError:", e)
    sys.exit(3)
print("read", n, "batches of", len(loader))
"""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    path, _, _ = write_small_beton(tmp_path, n=400, page_size=4096)
    write_small_beton(tmp_path, n=401, page_size=4096, name="other.beton")
    return path


def _run(path: Path, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), how],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


@pytest.mark.parametrize("how", ["truncate", "cp"])
def test_a_file_changed_in_place_is_refused_at_the_next_batch(files: Path, how: str) -> None:
    proc = _run(files, how)
    assert "Fatal Python error" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.returncode == 3, proc.stdout + proc.stderr[-2000:]
    line = proc.stdout.strip().splitlines()[-1]
    what = "truncated from" if how == "truncate" else "overwritten in place"
    assert line.startswith(f"LoaderError: {files}: {what}"), line
    assert "renaming it over the old one" in line


def test_a_file_renamed_over_is_read_whole_from_the_old_one(files: Path) -> None:
    proc = _run(files, "rename")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "read 50 batches of 50"


BUS = """
import os, sys, threading
import numba, numpy as np
from pathlib import Path
from ffcv_pairs.load.truncation import watch_mappings
ours, where = Path(sys.argv[1]), sys.argv[2]
ours.write_bytes(b"x" * (1 << 20))
mapping = np.memmap(ours, dtype=np.uint8, mode="r")
watch_mappings(1, ours, [mapping])
if where == "elsewhere":  # a mapping of no loader: the fault is not ours to name
    other = ours.with_name("other.bin")
    other.write_bytes(b"y" * (1 << 20))
    mapping = np.memmap(other, dtype=np.uint8, mode="r")
    os.truncate(other, 4096)
else:
    os.truncate(ours, 4096)

@numba.njit(nogil=True, parallel=True)
def total(a):
    s = 0
    for i in numba.prange(a.size):
        s += a[i]
    return s

if where in ("main", "elsewhere"):  # one faulting thread: faulthandler restores SIG_DFL on
    print(int(mapping[500_000]))   # entry, so a second thread's fault would cut its output short
elif where == "thread":
    t = threading.Thread(target=lambda: print(int(mapping[-1])))
    t.start()
    t.join()
else:
    print(total(mapping))
"""


@pytest.mark.parametrize("where", ["main", "thread", "numba"])
def test_a_bus_error_in_a_loader_mapping_is_one_line(tmp_path: Path, where: str) -> None:
    """Within a batch the check cannot help: the fault itself names the file."""
    ours = tmp_path / "data.beton"
    proc = subprocess.run(
        [sys.executable, "-c", BUS, str(ours), where], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 135, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"ffcv-pairs: {ours} was truncated or overwritten"), lines[0]


def test_a_bus_error_elsewhere_goes_to_the_handler_before(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", BUS, str(tmp_path / "d.beton"), "elsewhere"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Fatal Python error: Bus error" in proc.stderr  # faulthandler's, as before
    assert "ffcv-pairs:" not in proc.stderr
