"""The storage's own random 4 KiB read rate at a queue depth: a Python equivalent of fio.

One thread keeps ``depth`` random 4 KiB reads of a large file in flight through the page
cache: it asks for the next block with ``posix_fadvise(WILLNEED)`` (which queues the read
and returns at once) until ``depth`` are outstanding, then reads the oldest with ``preadv``
(waiting for it if it has not landed yet) and drops it again with ``POSIX_FADV_DONTNEED``,
so that every read comes from the storage. ``POSIX_FADV_RANDOM`` on the file turns the
kernel's own readahead off: one block is one 4 KiB read. It is how the writer keeps its
reads in flight (:mod:`ffcv_pairs.write.readahead`), and one thread keeps up with fio's
libaio on the 2-core VM, where ``depth`` threads doing ``O_DIRECT`` reads ran out of CPU.
Where ``fio`` is installed the same depths are also measured by ``fio --rw=randread
--bs=4k --direct=1 --ioengine=libaio --iodepth=D``, beside them. Run it alone::

    python -m bench.tables.storage_rate bench/.work/shards --gib 4 --seconds 5

which prints one JSON line (reads per second at depths 1 and 32). The file
(``random-reads.bin``, random bytes) is written once and reused.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BLOCK", "DEPTHS", "fio_rate", "main", "measure_storage", "random_read_rate"]

BLOCK = 4096
DEPTHS = (1, 32)
_NAME = "random-reads.bin"


def _test_file(work: Path, gib: float) -> Path:
    """``work/random-reads.bin`` of ``gib`` GiB of random bytes (kept when it has that size)."""
    path = work / _NAME
    size = int(gib * 2**30) // (1 << 20) * (1 << 20)
    if path.exists() and path.stat().st_size == size:
        return path
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
        f.flush()
        os.fsync(f.fileno())
    return path


def random_read_rate(path: Path, depth: int, seconds: float) -> float:
    """Random 4 KiB reads per second of ``path`` from the storage, ``depth`` in flight."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        blocks = os.fstat(fd).st_size // BLOCK
        rng = random.Random(depth)
        queue: collections.deque[int] = collections.deque()
        buf = bytearray(BLOCK)
        done = 0
        t0 = time.perf_counter()
        stop = t0 + seconds
        while done % 256 or time.perf_counter() < stop:
            while len(queue) < depth:
                queue.append(rng.randrange(blocks) * BLOCK)
                os.posix_fadvise(fd, queue[-1], BLOCK, os.POSIX_FADV_WILLNEED)
            at = queue.popleft()
            os.preadv(fd, [buf], at)
            os.posix_fadvise(fd, at, BLOCK, os.POSIX_FADV_DONTNEED)
            done += 1
        rate = done / (time.perf_counter() - t0)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the blocks still queued
    finally:
        os.close(fd)
    return rate


def fio_rate(path: Path, depth: int, seconds: float) -> float | None:
    """fio's random 4 KiB direct reads per second at ``depth`` (libaio); None without fio."""
    fio = shutil.which("fio")
    if fio is None:
        return None
    args = [
        *(fio, "--name=randread", f"--filename={path}", "--rw=randread", f"--bs={BLOCK}"),
        *("--direct=1", "--ioengine=libaio", f"--iodepth={depth}", "--time_based"),
        *(f"--runtime={seconds:g}", "--output-format=json", "--readonly"),
    ]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["jobs"][0]["read"]["iops"])


def measure_storage(work: Path, gib: float = 4.0, seconds: float = 5.0) -> dict[str, Any]:
    """Reads per second at :data:`DEPTHS` by :func:`random_read_rate` (``fadvise``) and by
    fio (``fio``, None without it) on a ``gib`` GiB file in ``work``."""
    path = _test_file(work, gib)
    ours = {str(d): random_read_rate(path, d, seconds) for d in DEPTHS}
    fio = {str(d): fio_rate(path, d, seconds) for d in DEPTHS}
    return {"file": str(path), "gib": gib, "seconds": seconds, "fadvise": ours, "fio": fio}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tables.storage_rate", description=__doc__)
    p.add_argument("work", type=Path, help="folder for the test file (on the storage measured)")
    p.add_argument("--gib", type=float, default=4.0, help="test file size (GiB)")
    p.add_argument("--seconds", type=float, default=5.0, help="time per depth")
    args = p.parse_args(argv)
    if args.gib <= 0 or args.seconds <= 0:
        got = f"{args.gib}, {args.seconds}"
        sys.stderr.write(f"storage_rate: --gib and --seconds must be > 0, got {got}\n")
        return 2
    try:
        res = measure_storage(args.work, args.gib, args.seconds)
    except OSError as e:
        sys.stderr.write(f"storage_rate: {e}\n")
        return 2
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
