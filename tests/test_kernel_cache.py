"""numba's disk cache never serves a kernel built against an older version of a
function in another file (see ffcv_pairs/kernels/_cache.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numba
import pytest

import ffcv_pairs
from ffcv_pairs.kernels import _cache

PACKAGE = Path(ffcv_pairs.__file__).parent


def _copy_kernels(root: Path) -> Path:
    """The package under ``root``, its ``__init__`` emptied: the probes import kernels only
    (which import nothing else of the package), so a probe skips torch and ffcv (seconds)."""
    copy = root / "ffcv_pairs"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "__init__.py").write_text("")
    return copy


# geometry_params (geometry.py) inlines the hash from hashing.py.
PROBE = """
import json, numpy as np
from ffcv_pairs.kernels.geometry import GeometryConfig, geometry_params
g = GeometryConfig(0.5, 0.0, False, 8, 8, 0, 1.0, 1.0, 1.0, 1.0, 0, 0, 0, False, False, True, False)
clock = np.array([7, 1], dtype=np.int64)
flips = [int(geometry_params(g, clock, i, 0, 8, 8).hflip) for i in range(64)]
print(json.dumps({"flips": flips, "hits": sum(geometry_params.stats.cache_hits.values())}))
"""


def _env(root: Path, **extra: str) -> dict[str, str]:
    """The environment of a probe of the package copied under ``root``: kernels cached in
    ``root/cache`` unless ``extra`` says otherwise (a value of "" removes the variable)."""
    env = {**os.environ, "PYTHONPATH": str(root), "FFCV_PAIRS_CACHE_DIR": str(root / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    env.update(extra)
    return {k: v for k, v in env.items() if v != ""}


def _probe(root: Path, probe: str = PROBE, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=root,
        env=env or _env(root),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}


def _kernel_folder(root: Path, copy: Path) -> Path:
    """Where the copied package's kernels are cached under the cache ``root``."""
    digest = _cache.kernel_sources_digest(copy / "kernels")[:16]
    return root / ffcv_pairs.__version__ / f"numba-{numba.__version__}" / digest / "kernels"


def test_kernels_are_cached_per_user_and_version_not_beside_the_source(tmp_path: Path) -> None:
    """By default the kernels go to ``$XDG_CACHE_HOME/ffcv-pairs/<version>/...``, which
    outlives a virtual environment and works from a read-only site-packages."""
    copy = _copy_kernels(tmp_path)
    env = _env(tmp_path, FFCV_PAIRS_CACHE_DIR="", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    first, again = _probe(tmp_path, env=env), _probe(tmp_path, env=env)
    assert (first["hits"], again["hits"]) == (0, 1), (first, again)
    cached = list(_kernel_folder(tmp_path / "xdg" / "ffcv-pairs", copy).glob("*.nbi"))
    assert cached, sorted(str(p) for p in (tmp_path / "xdg").rglob("*"))
    assert not list(copy.rglob("*.nbi")), "kernels were cached beside the source"


@pytest.mark.parametrize("ours", [True, False])
def test_the_cache_folder_is_ours_then_numbas(tmp_path: Path, ours: bool) -> None:
    """FFCV_PAIRS_CACHE_DIR wins; without it, numba's own NUMBA_CACHE_DIR is respected."""
    copy = _copy_kernels(tmp_path)
    mine, numbas = tmp_path / "mine", tmp_path / "numbas"
    env = _env(
        tmp_path, FFCV_PAIRS_CACHE_DIR=str(mine) if ours else "", NUMBA_CACHE_DIR=str(numbas)
    )
    _probe(tmp_path, env=env)
    assert bool(list(_kernel_folder(mine, copy).glob("*.nbi"))) is ours
    assert bool(list(numbas.rglob("*.nbi"))) is not ours


def test_an_unwritable_cache_folder_falls_back_with_one_warning(tmp_path: Path) -> None:
    copy = _copy_kernels(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = _env(tmp_path, FFCV_PAIRS_CACHE_DIR=str(blocker / "cache"), TMPDIR=str(temp))
    first, again = _probe(tmp_path, env=env), _probe(tmp_path, env=env)
    assert (first["hits"], again["hits"]) == (0, 1), (first, again)  # the fallback persists
    warned = [line for line in first["stderr"].splitlines() if "is not writable" in line]
    assert len(warned) == 1 and str(blocker / "cache") in warned[0], first["stderr"]
    fallback = temp / f"ffcv-pairs-{os.getuid()}"
    assert list(_kernel_folder(fallback, copy).glob("*.nbi")), sorted(temp.rglob("*"))


def test_a_change_in_another_kernel_file_recompiles_its_callers(tmp_path: Path) -> None:
    copy = _copy_kernels(tmp_path)
    first = _probe(tmp_path)
    again = _probe(tmp_path)
    assert first["hits"] == 0 and again["hits"] == 1, (first, again)  # the cache is used
    assert again["flips"] == first["flips"]
    hashing = copy / "kernels" / "hashing.py"
    text = hashing.read_text()
    assert "0xBF58476D1CE4E5B9" in text
    hashing.write_text(text.replace("0xBF58476D1CE4E5B9", "0xBF58476D1CE4E5B7"))
    changed = _probe(tmp_path)
    assert changed["hits"] == 0, "a stale kernel was loaded from the cache"
    assert changed["flips"] != first["flips"]


def test_a_renamed_signature_type_recompiles_instead_of_failing(tmp_path: Path) -> None:
    """numba pickles a kernel's argument types into its cache index; once a named tuple is
    renamed (or an older install's cache sits under a newer one), reading that index raised
    "Can't get attribute 'GeometryConfig'" at the first call."""
    copy = _copy_kernels(tmp_path)
    first = _probe(tmp_path)
    geometry = copy / "kernels" / "geometry.py"
    for path in copy.rglob("*.py"):
        text = path.read_text()
        if "GeometryConfig" in text:
            path.write_text(text.replace("GeometryConfig", "GeometryKnobs"))
    assert "GeometryKnobs" in geometry.read_text()
    renamed = _probe(tmp_path, PROBE.replace("GeometryConfig", "GeometryKnobs"))
    assert renamed["hits"] == 0 and renamed["flips"] == first["flips"], (first, renamed)


def test_the_digest_covers_every_kernel_source(tmp_path: Path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    before = _cache.kernel_sources_digest(tmp_path)
    (tmp_path / "b.py").write_text("# b.py, edited\n")
    edited = _cache.kernel_sources_digest(tmp_path)
    assert edited != before
    (tmp_path / "c.py").write_text("")  # a new, empty source changes it too
    added = _cache.kernel_sources_digest(tmp_path)
    assert added not in (before, edited)
    (tmp_path / "c.py").unlink()
    assert _cache.kernel_sources_digest(tmp_path) == edited


# A kernel of the copied package that calls an intrinsic-or-twin (fill_gap) and freezes
# the setting of the process that compiled it: served from the cache to a process of the
# other setting, it would say so.
TWIN_PROBE_MODULE = """
import numba as nb, numpy as np
from .bytemoves import fill_gap
from .twins import PLAIN


@nb.njit(cache=True)
def probe(dst):
    fill_gap(dst, 0, np.uint8(1), 3)
    return PLAIN
"""

TWIN_PROBE = """
import json, numpy as np
from ffcv_pairs.kernels import twins
from ffcv_pairs.kernels._twin_probe import probe
dst = np.zeros(16, np.uint8)
compiled_plain = bool(probe(dst))
print(json.dumps({"plain": twins.PLAIN, "compiled_plain": compiled_plain,
                  "bytes": dst.tolist(), "hits": sum(probe.stats.cache_hits.values())}))
"""


def _twin_probe(root: Path, cache: Path, plain: bool) -> dict:
    env = _env(
        root,
        FFCV_PAIRS_CACHE_DIR="",
        NUMBA_CACHE_DIR=str(cache),
        FFCV_PAIRS_PLAIN_KERNELS="1" if plain else "0",
    )
    out = subprocess.run(
        [sys.executable, "-c", TWIN_PROBE], cwd=root, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_cache_keeps_intrinsic_and_plain_kernels_apart(tmp_path: Path) -> None:
    """Two settings, one NUMBA_CACHE_DIR: each process compiles or loads its own kind, and
    the kinds are cached side by side (a run of one does not evict the other)."""
    copy = _copy_kernels(tmp_path)
    (copy / "kernels" / "_twin_probe.py").write_text(TWIN_PROBE_MODULE)
    cache = tmp_path / "numba-cache"
    runs = [(plain, _twin_probe(tmp_path, cache, plain)) for plain in (False, True, False, True)]
    for i, (plain, run) in enumerate(runs):
        assert run["plain"] is plain and run["compiled_plain"] is plain, (i, run)
        assert run["hits"] == (1 if i >= 2 else 0), (i, run)  # compiled once, then loaded
        assert run["bytes"] == [1, 1, 1] + [0] * 13, (i, run)
    index = sorted(p.name for p in cache.rglob("_twin_probe.probe-*.nbi"))
    assert len(index) == 2 and "-intrinsic." in index[0] and "-plain." in index[1], index


SHARED = """
import json, sys, numpy as np
from ffcv_pairs.kernels._cache import SharedCompile
from ffcv_pairs.kernels.bytesums import image_stats
images, out = np.zeros((2, 48), np.uint8), np.zeros((2, 4), np.uint32)
print("ready", flush=True)
SharedCompile()(image_stats, images, 1, out)
s = image_stats.stats
print(json.dumps({"hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values())}))
"""


def test_processes_needing_a_new_kernel_at_once_compile_it_once(tmp_path: Path) -> None:
    """Two processes reach a kernel's first call together (DDP ranks): one compiles, the other
    waits on the lock beside the cache, then loads the kernel from it."""
    import fcntl

    copy = _copy_kernels(tmp_path)
    lock = _kernel_folder(tmp_path / "cache", copy) / "ffcv_pairs.kernels.bytesums.image_stats.lock"
    lock.parent.mkdir(parents=True)
    env = _env(tmp_path)
    with open(lock, "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # both start, then race for it as soon as it is free
        probes = [
            subprocess.Popen(
                [sys.executable, "-c", SHARED],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for p in probes:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    outs = [p.communicate(timeout=300) for p in probes]
    assert all(p.returncode == 0 for p in probes), [err[-2000:] for _, err in outs]
    stats = sorted(json.loads(out.strip().splitlines()[-1])["misses"] for out, _ in outs)
    assert stats == [0, 1], stats  # one compiled; the other loaded its machine code


def test_a_first_compile_is_announced_once_and_a_cached_kernel_is_not(tmp_path: Path) -> None:
    """A new user waited a minute on the first batch with no word: a kernel compiled for the
    first time says so on one line (what, roughly how long, where it is cached)."""
    _copy_kernels(tmp_path)
    first, again = _probe(tmp_path, SHARED), _probe(tmp_path, SHARED)
    assert (first["misses"], again["misses"]) == (1, 0), (first, again)
    said = [line for line in first["stderr"].splitlines() if "compiling" in line]
    assert len(said) == 1, first["stderr"]
    assert "image_stats kernel" in said[0] and str(tmp_path / "cache") in said[0], said
    assert "compiling" not in again["stderr"], again["stderr"]


SWITCH = """
import hashlib, json, sys, time
from ffcv_pairs import PairAugment, make_loader
from ffcv_pairs.kernels import stand_in

made = []
init = stand_in.ParallelSoon.__init__
stand_in.ParallelSoon.__init__ = lambda self, *a: (init(self, *a), made.append(self))[0]
loader = make_loader(sys.argv[1], batch_size=16, augment=PairAugment(hflip=0.5, vflip=0.5),
                     num_threads=2, seed=3)
epochs, batches = int(sys.argv[2]), []
deadline = time.monotonic() + 240
for epoch in range(10_000):
    for a, b, label in loader:
        served = dict(made[0].served)
        batches.append({"digest": hashlib.sha256(a.numpy().tobytes() + b.numpy().tobytes()
                                                 + label.numpy().tobytes()).hexdigest(),
                        "served": served})
    done = epoch + 1 >= epochs if epochs else len(made[0].served) == 2
    if done or time.monotonic() > deadline:
        break
    if not epochs:  # waiting for the compile: no need to spin a core (the warm run repeats it)
        time.sleep(0.5)
print(json.dumps({"epochs": epoch + 1, "batches": batches}))
"""


def test_batches_before_and_after_the_parallel_kernel_arrives_are_a_warm_runs(
    tmp_path: Path,
) -> None:
    """On an empty cache the first batches come from the serial kernel while the parallel one
    compiles in the background; then the loader switches. Every batch, before and after the
    switch, is byte-identical to a warm run's (which uses the parallel kernel throughout)."""
    from tests.conftest import run_python, write_small_beton

    path, _, _ = write_small_beton(tmp_path, n=256, shape=(3, 8, 8))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["FFCV_PAIRS_CACHE_DIR"] = str(tmp_path / "cache")

    def run(epochs: int) -> tuple[dict, str]:
        out = run_python(SWITCH, str(path), str(epochs), env=env, timeout=600)
        return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr

    cold, said = run(0)  # until both kernels have served
    kinds = [set(b["served"]) for b in cold["batches"]]  # the kernels that served so far
    # The first batch did not wait: the serial kernel had served by then. (Served so far, not
    # by this batch alone: the epoch thread runs ahead, and under load the parallel kernel may
    # have taken over for the batches after it before the first is handed out.)
    assert "decode_pairs_serial" in kinds[0], kinds[:3]
    assert kinds[-1] == {"decode_pairs_serial", "decode_pairs"}, kinds[-1]
    assert "in the background" in said, said
    warm, _ = run(cold["epochs"])
    assert all(set(b["served"]) == {"decode_pairs"} for b in warm["batches"])
    assert [b["digest"] for b in warm["batches"]] == [b["digest"] for b in cold["batches"]]


FORK_WHILE_COMPILING = """
import os, sys, threading, time
import numba as nb
from numba.core.compiler_lock import global_compiler_lock
import ffcv_pairs.kernels  # noqa: F401  (the fork hooks)

holding = threading.Event()

def compile_for_a_while():  # stands for a kernel compiling in the background
    with global_compiler_lock:
        holding.set()
        time.sleep(1.5)

threading.Thread(target=compile_for_a_while, daemon=True).start()
holding.wait()
pid = os.fork()
if pid == 0:  # the child compiles a function of its own
    f = nb.njit(lambda x: x + 1)
    os._exit(0 if f(1) == 2 else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_process_forked_while_a_kernel_compiles_can_compile(tmp_path: Path) -> None:
    """A writer forked its workers while the loader compiled a kernel in the background:
    the workers inherited numba's compiler lock held by a thread they do not have, and hung
    at their first compile. A fork now waits for the compile under way."""
    out = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_COMPILING],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "0", (out.stdout, out.stderr[-2000:])


def test_wait_for_compiles_returns_once_the_background_compiles_ended() -> None:
    """What a benchmark calls before its timed epoch: every compile ``compile_pending``
    started has ended when it returns."""
    import threading
    import time

    from ffcv_pairs.kernels import stand_in

    class Slow:
        done = threading.Event()

        def run(self) -> None:
            time.sleep(0.3)
            self.done.set()

    job = Slow()
    stand_in._queue(job)  # type: ignore[arg-type]
    stand_in.compile_pending()
    stand_in.wait_for_compiles()
    assert job.done.is_set()
