"""No global side effects: the loader leaves torch's and numba's thread counts, and
upstream FFCV's compiler switch, as it found them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numba
import pytest
from conftest import write_small_beton as _write

from ffcv_pairs import PairAugment, make_loader


def test_import_leaves_thread_counts_as_found(tmp_path: Path) -> None:
    """Upstream's import sets torch's and numba's thread counts to 1; ours must not, and
    neither may reading an epoch (the epoch thread sets its own, per thread)."""
    code = (
        "import torch, numba\n"
        "torch.set_num_threads(3); numba.set_num_threads(2)\n"
        "import ffcv_pairs\n"
        "from ffcv_pairs import make_loader\n"
        "print(torch.get_num_threads(), numba.get_num_threads())\n"
        f"loader = make_loader({str(_write(tmp_path)[0])!r}, batch_size=16, num_threads=1)\n"
        "assert sum(1 for _ in loader) == len(loader)\n"
        "print(torch.get_num_threads(), numba.get_num_threads())\n"
    )
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["3 2", "3 2"]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_two_loaders_with_different_threads_do_not_interfere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each epoch thread decodes with its own loader's thread count, however the two
    loaders' batches interleave (upstream keeps one process-wide count)."""
    from ffcv_pairs.load import decoders

    seen: list[tuple[object, str, int]] = []

    def spy(kernel):
        def run(*args):
            seen.append((threading.current_thread(), kernel.__name__, numba.get_num_threads()))
            return kernel(*args)

        return run

    for name in ("copy_pairs", "copy_pairs_serial"):  # no geometry: the copy kernels
        monkeypatch.setattr(decoders, name, spy(getattr(decoders, name)))
    path, a, _ = _write(tmp_path, n=600)
    one = make_loader(path, batch_size=8, num_threads=1)
    two = make_loader(path, batch_size=8, num_threads=2)
    it1, it2 = iter(one), iter(two)
    threads = {}
    for _ in range(10):
        for loader, it in ((one, it1), (two, it2)):
            batch = next(it)
            threads[loader._active] = loader.num_threads
            assert batch[0].numpy().tobytes() == a[batch[2].numpy()].tobytes()
    assert len(seen) >= 20, seen  # and the batches decoded ahead
    for thread, kernel, count in seen:
        expected = threads[thread]
        assert count == expected
        assert kernel == ("copy_pairs" if expected > 1 else "copy_pairs_serial")


def test_building_a_loader_leaves_upstreams_compiler_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's ``Compiler`` switch is process-wide: flipping it while another thread
    builds an upstream ``Loader`` would leave that loader uncompiled."""
    from ffcv.pipeline.compiler import Compiler

    calls: list[bool] = []
    monkeypatch.setattr(Compiler, "set_enabled", classmethod(lambda cls, b: calls.append(b)))
    path, a, _ = _write(tmp_path)
    loader = make_loader(path, batch_size=16, augment=PairAugment(hflip=1.0))
    assert calls == [] and Compiler.is_enabled
    xa, _, label = next(iter(loader))
    assert xa.numpy().tobytes() == a[label.numpy()][..., ::-1].tobytes()


def test_ffcv_imports_where_python_has_no_distutils() -> None:
    """Python 3.12 has no ``distutils``, which upstream's ``graph.py`` imports: the import
    still works, and leaves no stand-in ``distutils`` behind."""
    code = (
        "import sys, importlib.abc\n"
        "class NoDistutils(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'distutils' or name.startswith('distutils.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoDistutils())\n"
        "gone = ('distutils', '_distutils_hack')\n"
        "for name in [m for m in sys.modules if m.split('.')[0] in gone]:\n"
        "    del sys.modules[name]\n"
        "import ffcv_pairs, ffcv.pipeline.graph\n"
        "assert 'distutils' not in sys.modules and 'distutils.log' not in sys.modules\n"
        "ffcv.pipeline.graph.warn('a warning through the stand-in')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "a warning through the stand-in" in proc.stderr


def test_importing_imports_no_distutils_and_keeps_one_already_there() -> None:
    """3.11's ``distutils`` costs 35 ms of every import: upstream's one ``warn`` comes from
    the stand-in, and none is left behind; a process that imported ``distutils.log`` first
    keeps it, and upstream uses the real one."""
    code = (
        "import sys\n"
        "import ffcv_pairs, ffcv.pipeline.graph\n"
        "assert 'distutils' not in sys.modules and 'distutils.log' not in sys.modules\n"
    )
    first = "import distutils.log, sys\nfrom ffcv_pairs._upstream import import_ffcv\n"
    first += "import_ffcv()\nimport ffcv.pipeline.graph\n"
    first += "assert ffcv.pipeline.graph.warn is distutils.log.warn\n"
    for c in (code, first):
        proc = subprocess.run(
            [sys.executable, "-c", c], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
