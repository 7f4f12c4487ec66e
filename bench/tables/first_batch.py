"""``python -m bench --first-batch``: what a user waits for on a fresh machine, from the
library's import to the first batch, with an empty kernel cache and with a warm one.

Run it (from the repository root)::

    .venv/bin/python -m bench --first-batch                      # about 16 minutes on 2 cores
    .venv/bin/python -m bench --first-batch --first-batch-tree /tmp/before  # + "ours (before)"
    .venv/bin/python -m bench --first-batch --smoke              # warm caches only, 1 round

``--first-batch-tree`` adds the columns of another source tree of this project, e.g. a
commit unpacked with ``git archive 14984d3 | tar -x -C /tmp/before``.

Each measurement is a new interpreter (:func:`~bench.core.fresh_process.run_interpreter`
with :mod:`bench.tables.first_batch_probe`): not forked from a preloaded server, since the
import is part of what a user waits for. The kernel cache is a folder of its own for every
row (``FFCV_PAIRS_CACHE_DIR``, ``NUMBA_CACHE_DIR`` and ``XDG_CACHE_HOME`` all point at it):
"empty" is a new folder, "warm" the folder that the first round's empty run filled.
Upstream FFCV caches nothing of its pipeline, so its "warm" is simply a second start.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.fresh_process import RunnerError, run_interpreter
from bench.core.machine import describe_machine
from bench.core.main_data import make_arrays
from bench.core.settings import BENCH_DIR

__all__ = [
    "Contestant",
    "Pipeline",
    "check_tree",
    "import_seconds",
    "measure_first_batch",
    "pipelines",
]

log = logging.getLogger(__name__)

REPO = BENCH_DIR.parent
PROBE = Path(__file__).with_name("first_batch_probe.py")
PAIRS = 2048
SIDE = 48
BATCH = 64
JPEG_OUT = 32
CACHE_ENVS = ("FFCV_PAIRS_CACHE_DIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME")


@dataclass(frozen=True)
class Pipeline:
    """One row: the file each side reads, our augmentation and upstream's stock ops."""

    key: str
    title: str
    ours_file: str
    upstream_file: str
    augment: dict[str, Any] | None
    ours: str
    upstream: str
    only_ours: bool = False  # upstream FFCV has no such ops (nor an older tree the options)


#: open-cd's change-detection training pipeline, as far as our options go (issue 45's row).
OPENCD: dict[str, Any] = {
    "rotate": 180,
    "hflip": 0.5,
    "vflip": 0.5,
    "crop": [40, 40],
    "color_jitter": [0.2, 0.5, 0.5, 0.05],
    "color_jitter_paired": False,
    "swap": 0.5,
}


def _demo_augment() -> dict[str, Any]:
    """The demo's training augmentation, as ``configs/demo_cpu.yaml`` gives it."""
    import yaml

    config = yaml.safe_load((REPO / "configs" / "demo_cpu.yaml").read_text())
    return dict(config["data"]["augment"])


def pipelines() -> tuple[Pipeline, ...]:
    demo = _demo_augment()
    return (
        Pipeline(
            "plain", "plain decode", "raw", "raw", None,
            "`make_loader(path, batch_size=64)`",
            "`Loader` (RANDOM, every core): `NDArrayDecoder` for A and B, `IntDecoder` for "
            "the label, `ToTensor`",
        ),
        Pipeline(
            "demo", "the demo's augmentation", "raw", "raw_hwc", demo,
            "`PairAugment(" + ", ".join(f"{k}={v!r}" for k, v in demo.items()) + ")`",
            "`NDArrayDecoder`, `RandomHorizontalFlip(0.5)`, `RandomTranslate(padding=4)`, "
            "`RandomBrightness(0.2, p=1)`, `RandomContrast(0.2, p=1)`, `ToTensor`, for A and "
            "for B (not paired); its stock ops take HWC images, so it reads the same pairs "
            "stored 48x48x3",
        ),
        Pipeline(
            "jpeg", "JPEG: resized crop to 32x32 + hflip", "jpeg", "jpeg",
            {"hflip": 0.5, "resized_crop": [JPEG_OUT, JPEG_OUT]},
            "`PairAugment(hflip=0.5, resized_crop=(32, 32))`",
            "`RandomResizedCropRGBImageDecoder((32, 32))`, `RandomHorizontalFlip()`, "
            "`ToTensor`, for A and for B",
        ),
        Pipeline(
            "opencd", "open-cd-like: rotate, flips, crop, jitter per image, swap", "raw", "raw",
            OPENCD, "`PairAugment(" + ", ".join(f"{k}={v!r}" for k, v in OPENCD.items()) + ")`",
            "— (no rotation, colour jitter or swap among its stock ops)", only_ours=True,
        ),
    )  # fmt: skip


@dataclass(frozen=True)
class Contestant:
    """A column group: ``tree`` is the source tree on ``PYTHONPATH`` (None: upstream FFCV,
    which imports nothing of this project)."""

    key: str
    title: str
    tree: Path | None


def check_tree(tree: Path) -> Path:
    """``tree`` as an absolute path, if it holds a source tree of this project."""
    tree = tree.expanduser().resolve()
    if not (tree / "ffcv_pairs" / "__init__.py").is_file():
        raise ValueError(f"--first-batch-tree: {tree} holds no ffcv_pairs/__init__.py")
    return tree


def _files(work: Path, seed: int) -> dict[str, Path]:
    """The three files: random uint8 pairs as 3x48x48 and as 48x48x3, and JPEG photo crops."""
    from bench.tables.compression import make_pairs
    from ffcv_pairs import ArraySource, write_pairs

    a, b, labels = make_arrays(PAIRS, (3, SIDE, SIDE), "uint8", 10, seed)
    photo_a, photo_b = make_pairs(PAIRS, SIDE, seed=seed)
    sources = {
        "raw": (ArraySource(a, b, labels), None),
        "raw_hwc": (ArraySource(a.transpose(0, 2, 3, 1), b.transpose(0, 2, 3, 1), labels), None),
        "jpeg": (ArraySource(photo_a, photo_b, labels), "jpeg"),
    }
    files = {}
    for name, (source, codec) in sources.items():
        files[name] = work / f"first-batch-{name}.beton"
        quality = 90 if codec else None
        write_pairs(source, files[name], codec=codec, quality=quality, workers=1, progress=False)
    return files


def _env(tree: Path | None, cache: Path | None) -> dict[str, str]:
    """This environment, with ``PYTHONPATH`` the tree alone and every cache in ``cache``
    (None: the caches a user has by default)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", *CACHE_ENVS)}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    if cache is not None:
        env.update(dict.fromkeys(CACHE_ENVS, str(cache)))
    return env


def _probe(
    c: Contestant, p: Pipeline, files: dict[str, Path], cache: Path | None, settle: bool = False
) -> dict:
    """One fresh process: the probe's phases plus its wall and CPU seconds from outside
    (``settle``: then run on until the kernels compiling in the background are cached)."""
    import json

    spec = {
        "who": "upstream" if c.tree is None else "ours",
        "pipeline": p.key,
        "path": str(files[p.upstream_file if c.tree is None else p.ours_file]),
        "batch_size": BATCH,
        "augment": p.augment,
        "out_side": JPEG_OUT,
        "settle": settle,
    }
    load = os.getloadavg()[0]
    try:
        args, cwd = ["-P", str(PROBE), json.dumps(spec)], cache or tempfile.gettempdir()
        run = run_interpreter(args, _env(c.tree, cache), cwd)
        res = json.loads(run.stdout.strip().splitlines()[-1])
    except (RunnerError, ValueError, IndexError) as e:
        return {"error": str(e), "load": load}
    where = Path(res["module"]).resolve()
    if c.tree is not None and not where.is_relative_to(c.tree):
        return {"error": f"imported ffcv_pairs from {where}, not from {c.tree}", "load": load}
    if c.tree is None and res["ffcv_pairs_imported"]:
        return {"error": "the upstream row imported ffcv_pairs", "load": load}
    return {**res, "wall_s": run.wall_s, "cpu_s": run.cpu_s, "load": load}


def import_seconds(contestants: list[Contestant], runs: int, cwd: Path) -> dict[str, Any]:
    """``python -c "import ..."`` wall seconds minus ``python -c pass``'s, each run after one
    unmeasured run (bytecode written, files in the page cache), interleaved."""
    commands = {"pass": (None, "pass")}
    for c in contestants:
        commands[c.key] = (c.tree, "import ffcv_pairs" if c.tree else "import ffcv.loader")
    seconds: dict[str, list[float]] = {k: [] for k in commands}
    for i in range(runs + 1):
        for key, (tree, code) in commands.items():
            run = run_interpreter(["-P", "-c", code], _env(tree, None), cwd)
            if i:
                seconds[key].append(run.wall_s)
    base = statistics.median(seconds.pop("pass"))
    return {
        "pass_s": base,
        "commands": {k: commands[k][1] for k in seconds},
        "seconds": {k: [s - base for s in xs] for k, xs in seconds.items()},
    }


def _one(c: Contestant, p: Pipeline, files: dict[str, Path], folder: Path | None) -> dict:
    """:func:`_probe` in the cache ``folder`` (made if missing; None: the user's caches)."""
    if folder is not None:
        folder.mkdir(exist_ok=True)
    res = _probe(c, p, files, folder)
    log.info("first batch: %s, %s: %s", p.key, c.key, res.get("loader_s", res.get("error")))
    return res


def measure_first_batch(
    work: Path, rounds: int = 3, before: Path | None = None, smoke: bool = False, seed: int = 0
) -> dict[str, Any]:
    """Every row, ``rounds`` interleaved rounds; with ``smoke`` only the plain row on the
    caches a user has (no compile from an empty cache)."""
    t0, load_start = time.perf_counter(), list(os.getloadavg())
    machine = describe_machine()  # the commit measured: the tree may change during the run
    contestants = [Contestant("ours", "ours", REPO)]
    if before is not None:
        contestants.append(Contestant("before", "ours (before)", before))
    contestants.append(Contestant("upstream", "upstream FFCV", None))
    rows = pipelines()[:1] if smoke else pipelines()
    work.mkdir(parents=True, exist_ok=True)
    files = _files(work, seed)
    file_mb = {name: path.stat().st_size / 1e6 for name, path in files.items()}
    scratch = Path(tempfile.mkdtemp(prefix="numba-", dir=work))
    runs: dict[str, dict[str, dict[str, list[dict]]]] = {
        p.key: {c.key: {"empty": [], "warm": []} for c in contestants} for p in rows
    }
    try:
        imports = import_seconds(contestants, 1 if smoke else 3, scratch)
        log.info("first batch: imports %s", imports["seconds"])
        for r in range(rounds):
            for p in rows:
                for c in contestants:
                    if p.only_ours and c.key != "ours":
                        continue
                    got = runs[p.key][c.key]
                    warm = None if smoke else scratch / f"warm-{p.key}-{c.key}"
                    if not smoke:  # the first round's empty folder is the warm one after it
                        empty = warm if r == 0 else Path(tempfile.mkdtemp(dir=scratch))
                        got["empty"].append(_one(c, p, files, empty))
                        if empty != warm:
                            shutil.rmtree(empty, ignore_errors=True)
                        else:  # the empty run compiled nothing: stand-ins served it
                            _probe(c, p, files, warm, settle=True)
                    got["warm"].append(_one(c, p, files, warm))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for path in files.values():
            for leftover in path.parent.glob(path.name + "*"):
                leftover.unlink()
    return {
        "pairs": PAIRS,
        "shape": [3, SIDE, SIDE],
        "batch_size": BATCH,
        "rounds": rounds,
        "smoke": smoke,
        "file_mb": file_mb,
        "contestants": [
            {"key": c.key, "title": c.title, "tree": str(c.tree or "")} for c in contestants
        ],
        "pipelines": [
            {"key": p.key, "title": p.title, "ours": p.ours, "upstream": p.upstream} for p in rows
        ],
        "runs": runs,
        "imports": imports,
        "load": {"start": load_start, "end": list(os.getloadavg())},
        "elapsed_s": time.perf_counter() - t0,
        "machine": machine,
    }
