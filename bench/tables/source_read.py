"""Only reading a per-sample ``.pt`` folder: the writer table's reference rows.

Run as its own command, like the writer's CLI, so that every row of the table is one
fresh process tree measured the same way::

    python -m bench.tables.source_read load SRC_DIR N --workers 2   # torch.load of every file
    python -m bench.tables.source_read read SRC_DIR N --workers 2   # open + read() of every file

Reads the three files (``<split>_A_images_<i>.pt``, ``<split>_B_images_<i>.pt``,
``<split>_labels_<i>.pt``) of samples ``0 .. N-1`` in ``--workers`` forked processes,
in runs of ``--step`` consecutive samples (as the writer's workers take pages), and
prints one JSON line: ``{"seconds": ..., "pairs": N, "files": 3N, "bytes": ...}``.
``seconds`` counts from before the worker pool starts to after it is joined (imports
excluded: ``torch`` is imported before the clock starts, and before the fork).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from collections.abc import Callable

__all__ = ["MODES", "main", "read_folder"]

MODES = ("load", "read")
_KINDS = ("A_images", "B_images", "labels")
_JOB: tuple[str, str, str] | None = None


def _read_bytes(path: str) -> int:
    with open(path, "rb") as f:
        return len(f.read())


def _torch_load(path: str) -> int:
    import torch

    return torch.load(path, weights_only=True).nbytes


def _reader(mode: str) -> Callable[[str], int]:
    return _torch_load if mode == "load" else _read_bytes


def _read_range(bounds: tuple[int, int]) -> int:
    assert _JOB is not None, "worker forked without a job"
    mode, root, split = _JOB
    read = _reader(mode)
    total = 0
    for i in range(*bounds):
        for kind in _KINDS:
            total += read(f"{root}/{split}_{kind}_{i}.pt")
    return total


def read_folder(
    mode: str, root: str, n: int, *, workers: int = 2, step: int = 256, split: str = "train"
) -> dict[str, float]:
    """Read samples ``[0, n)`` of ``root`` in ``workers`` forked processes; see the module doc.

    Raises:
        ValueError: an unknown ``mode`` or a count below 1.
    """
    global _JOB
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if min(n, workers, step) < 1:
        raise ValueError(f"n, workers and step must be at least 1, got {n}, {workers}, {step}")
    if mode == "load":
        import torch  # noqa: F401  (before the clock and the fork, as in the writer)
    jobs = [(s, min(n, s + step)) for s in range(0, n, step)]
    _JOB = (mode, root, split)
    try:
        t = time.perf_counter()
        with mp.get_context("fork").Pool(workers) as pool:
            total = sum(pool.imap_unordered(_read_range, jobs))
        seconds = time.perf_counter() - t
    finally:
        _JOB = None
    return {"seconds": seconds, "pairs": n, "files": 3 * n, "bytes": total}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tables.source_read", description=__doc__)
    p.add_argument("mode", choices=MODES)
    p.add_argument("src_dir")
    p.add_argument("n", type=int)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step", type=int, default=256)
    p.add_argument("--split", default="train")
    args = p.parse_args(argv)
    try:
        result = read_folder(
            args.mode, args.src_dir, args.n, workers=args.workers, step=args.step, split=args.split
        )
    except (ValueError, OSError) as e:
        sys.stderr.write(f"source_read: {e}\n")
        return 2
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
