r"""Memory of a process tree, sampled from outside: RSS, USS, PSS and peak RSS.

USS and PSS come from psutil's ``memory_full_info()`` (``/proc/PID/smaps_rollup``).
Sums are over the process and all its descendants (DataLoader workers,
simulated ranks); peaks are the largest sums seen while sampling. For a group of
simulated ranks the process that spawned them is left out (``include_root=False``):
it is the benchmark's harness, holding its preloaded imports, not a rank.

``pss_own`` leaves out the PSS of memory-mapped dataset files (``.beton``,
``.npy``, ``.bin``, ``.mds``, ``.pt``): those pages are the OS page cache, shared
by every process on the node and reclaimable, and a loader that ``read()``\ s its
files holds the same pages without them showing in its PSS at all.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

import psutil

__all__ = ["MB", "MemoryPeaks", "TreeSampler", "own_pss", "snapshot", "vm_hwm"]

MB = 1 << 20
DATA_SUFFIXES = (".beton", ".npy", ".bin", ".mds", ".pt")


def vm_hwm(pid: int) -> int:
    """Peak resident set (``VmHWM``) of ``pid`` in bytes, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class MemoryPeaks:
    """Largest values seen, in bytes. ``hwm``: the largest VmHWM of any process in the tree."""

    rss: int = 0
    uss: int = 0
    pss: int = 0
    pss_own: int = 0
    hwm: int = 0
    procs: int = 0

    def update(self, other: MemoryPeaks) -> None:
        for k in ("rss", "uss", "pss", "pss_own", "hwm", "procs"):
            setattr(self, k, max(getattr(self, k), getattr(other, k)))

    def to_mb(self) -> dict[str, Any]:
        return {k: (v / MB if k != "procs" else v) for k, v in asdict(self).items()}


def snapshot(pid: int, include_root: bool = True) -> MemoryPeaks:
    """Sums of RSS, USS and PSS over ``pid`` (unless not ``include_root``) and its
    descendants, right now."""
    out = MemoryPeaks()
    try:
        root = psutil.Process(pid)
        procs = [*([root] if include_root else []), *root.children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            info = p.memory_full_info()
        except psutil.Error:
            continue
        out.rss += info.rss
        out.uss += info.uss
        out.pss += getattr(info, "pss", 0)
        out.pss_own += own_pss(p, getattr(info, "pss", 0))
        out.hwm = max(out.hwm, vm_hwm(p.pid))
        out.procs += 1
    return out


def own_pss(proc: psutil.Process, pss: int) -> int:
    """PSS of ``proc`` without the dataset files it maps (page cache, see the module
    docstring), both from one read of its ``smaps`` (two reads while the process
    touches pages would not add up); ``pss`` minus nothing when that read fails."""
    try:
        maps = proc.memory_maps(grouped=True)
    except (psutil.Error, AttributeError):
        return pss
    return sum(m.pss for m in maps if not m.path.endswith(DATA_SUFFIXES))


class TreeSampler:
    """``with TreeSampler(pid) as s: ...`` samples the tree every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.25, include_root: bool = True):
        self.pid, self.interval, self.include_root = pid, interval, include_root
        self.peaks = MemoryPeaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            self.peaks.update(snapshot(self.pid, self.include_root))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peaks.update(snapshot(self.pid, self.include_root))
