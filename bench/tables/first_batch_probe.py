"""One fresh interpreter's first batch: the library's import, the loader's construction and
its first batch, and the CPU seconds numba spent compiling on the way.

:mod:`bench.tables.first_batch` starts it once per measurement, in a new interpreter that
imported nothing yet, with ``NUMBA_CACHE_DIR`` and ``PYTHONPATH`` set for the row::

    python -P bench/tables/first_batch_probe.py '{"who": "ours", "pipeline": "plain",
        "path": "/tmp/pairs.beton", "batch_size": 64, "augment": null}'

``-P`` keeps this script's folder off ``sys.path``, so ``ffcv_pairs`` comes from
``PYTHONPATH`` (the tree measured). Prints one JSON line and exits at once (``os._exit``:
no row waits for its loader's threads to wind down). Standard library only at the top:
every import of the measured libraries happens inside the timed phases.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from typing import Any

__all__ = ["CompileClock", "probe"]

_T0 = time.perf_counter()


class CompileClock:
    """Thread CPU seconds inside numba's outermost ``numba:compile`` events.

    A compile nests the compiles of its callees; only the outermost interval of each
    thread counts. (numba compiles under one global lock, so threads never overlap.)
    """

    def __init__(self) -> None:
        self.cpu_s = self.wall_s = 0.0
        self.count = 0
        self._depth: dict[int, tuple[int, float, float]] = {}

    def on_start(self, event: Any) -> None:
        tid = threading.get_ident()
        depth, cpu, wall = self._depth.get(tid, (0, 0.0, 0.0))
        if depth == 0:
            cpu, wall = time.thread_time(), time.perf_counter()
        self._depth[tid] = (depth + 1, cpu, wall)

    def on_end(self, event: Any) -> None:
        tid = threading.get_ident()
        depth, cpu, wall = self._depth[tid]
        self._depth[tid] = (depth - 1, cpu, wall)
        if depth == 1:
            self.cpu_s += time.thread_time() - cpu
            self.wall_s += time.perf_counter() - wall
            self.count += 1

    def install(self) -> None:
        """Listen from now on, for the rest of the process."""
        from numba.core import event

        clock = self

        class _Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                clock.on_start(ev)

            def on_end(self, ev: Any) -> None:
                clock.on_end(ev)

        event.register("numba:compile", _Listener())


def _ours(spec: dict[str, Any]) -> tuple[Any, str]:
    import ffcv_pairs
    from ffcv_pairs import PairAugment, make_loader

    def build() -> Any:
        aug = None if spec["augment"] is None else PairAugment(**spec["augment"])
        return make_loader(spec["path"], batch_size=spec["batch_size"], augment=aug)

    return build, str(ffcv_pairs.__file__)


def _upstream(spec: dict[str, Any]) -> tuple[Any, str]:
    """A user's upstream FFCV: every core, RANDOM order, the stock ops of the row."""
    import ffcv
    from ffcv.fields.decoders import IntDecoder, NDArrayDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import (
        RandomBrightness,
        RandomContrast,
        RandomHorizontalFlip,
        RandomTranslate,
        ToTensor,
    )

    def image() -> list[Any]:
        if spec["pipeline"] == "jpeg":
            side = spec["out_side"]
            return [RandomResizedCropRGBImageDecoder((side, side)), RandomHorizontalFlip()]
        ops: list[Any] = [NDArrayDecoder()]
        if spec["pipeline"] == "demo":
            aug = spec["augment"]
            ops += [RandomHorizontalFlip(aug["hflip"]), RandomTranslate(aug["crop_padding"])]
            ops += [RandomBrightness(aug["brightness"], p=1.0)]
            ops += [RandomContrast(aug["contrast"], p=1.0)]
        return ops

    def build() -> Any:
        pipes = {"A": [*image(), ToTensor()], "B": [*image(), ToTensor()]}
        return Loader(
            spec["path"],
            batch_size=spec["batch_size"],
            num_workers=len(os.sched_getaffinity(0)),
            order=OrderOption.RANDOM,
            os_cache=True,
            seed=0,
            pipelines={**pipes, "label": [IntDecoder(), ToTensor()]},
        )

    return build, str(ffcv.__file__)


def _settle(loader: Any, who: str) -> None:
    """Run on until every kernel the background compiles of ours are making is compiled
    and cached (a few epochs, waiting for each compile): fills a cache for the warm runs.
    Without it a warm run would find only what the empty run compiled before it took its
    first batch, where ours compiles nothing (stand-ins serve the first batches)."""
    if who != "ours":
        return
    from ffcv_pairs.kernels.stand_in import wait_for_compiles

    for _ in range(3):
        for _batch in loader:
            wait_for_compiles()


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Import, build and take one batch as ``spec`` says; the seconds of each phase."""
    t = time.perf_counter()
    clock = CompileClock()
    clock.install()  # imports numba: its own phase, the same for every row
    t_numba = time.perf_counter()
    build, module = (_ours if spec["who"] == "ours" else _upstream)(spec)
    t_import = time.perf_counter()
    loader = build()
    t_build = time.perf_counter()
    batch = next(iter(loader))
    t_first = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    if spec.get("settle"):
        _settle(loader, spec["who"])
    return {
        "start_s": t - _T0,
        "numba_import_s": t_numba - t,
        "import_s": t_import - t_numba,
        "build_s": t_build - t_import,
        "first_s": t_first - t_build,
        "loader_s": t_first - t_import,
        "self_cpu_s": usage.ru_utime + usage.ru_stime,
        "compile_cpu_s": clock.cpu_s,
        "compile_wall_s": clock.wall_s,
        "compiles": clock.count,
        "batch_rows": int(batch[2].shape[0]),
        "module": module,
        "ffcv_pairs_imported": "ffcv_pairs" in sys.modules,
    }


if __name__ == "__main__":
    result = probe(json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)
