"""Numpy stand-ins (:mod:`ffcv_pairs.kernels.numpy_ops`) serve the first batches on an empty
kernel cache while the kernels compile in the background: their bytes are the kernels'."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ffcv_pairs import PairAugment, make_loader
from ffcv_pairs.kernels import numpy_ops, stand_in

DEMO = dict(
    hflip=0.5,
    crop=[16, 16],
    crop_padding=4,
    brightness=0.2,
    brightness_paired=False,
    contrast=0.2,
    contrast_paired=False,
)
CONFIGS: list[dict[str, Any] | None] = [
    None,
    DEMO,
    dict(hflip=0.5, vflip=0.5, crop=[12, 10], crop_padding=6, brightness=0.6, contrast=0.5),
    dict(rot90=True, hflip=0.5, brightness=0.9, contrast=0.9, contrast_paired=False),
    dict(crop=[10, 14], crop_padding=8, pad_mode="reflect", brightness=0.3, vflip=0.5),
    dict(crop=[12, 12], crop_padding=30, pad_mode="edge", contrast=0.3, fill=7),
    dict(crop=[8, 8], center=True, brightness=0.5, translate=(2, 3)),
    dict(hflip=0.5, contrast=0.8),
    # the matrix geometry: the warp's stand-in (kernels/numpy_warp)
    dict(rotate=180, hflip=0.5, crop=[12, 12], swap=0.5),
    dict(affine_degrees=20, affine_scale=(0.8, 1.3), affine_shear=10, pad_mode="reflect"),
    dict(perspective=0.4, pad_mode="edge", fill=9, crop=[10, 14]),
    dict(elastic=(30.0, 4.0), scale_jitter=(0.7, 1.4), fill=200),
]


def _both(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Every call that has a stand-in runs the serial kernel, then the stand-in on zeroed
    outputs, and counts the batches where they differ."""
    seen = {"batches": 0, "differ": 0}

    def call(self: stand_in.ParallelSoon, *args: Any) -> None:
        if self.stand_in is None:
            return self._call(self.parallel, *args)
        name = self.serial.__name__
        outs = (
            args[4:6]
            if name.startswith("copy")
            else args[4:5]
            if name.startswith("warp_mapped")
            else args[1:2]
            if "warp" in name
            else tuple(args[2])
        )
        self._call(self.serial, *args)
        want = [o.copy() for o in outs]
        for o in outs:
            o[:] = 0
        self.stand_in(*args)
        seen["batches"] += 1
        seen["differ"] += any((w != o).any() for w, o in zip(want, outs))

    monkeypatch.setattr(stand_in.ParallelSoon, "__call__", call)
    return seen


@pytest.mark.parametrize("layout", [(3, 16, 16), (16, 16, 3)])
def test_the_stand_ins_write_the_kernels_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: tuple[int, ...]
) -> None:
    """Flips, quarter turns, padded crops of every padding mode, brightness and contrast
    (per image and paired, means from the stored statistics and from the pixels), the plain
    copy, and the matrix geometry's warp (rotations, affines, perspectives, elastic fields),
    CHW and HWC: the stand-in's batches are the serial kernel's."""
    from tests.conftest import write_small_beton

    path, _, _ = write_small_beton(tmp_path, n=200, shape=layout)
    seen = _both(monkeypatch)
    for config in CONFIGS:
        before = seen["batches"]
        aug = None if config is None else PairAugment(**config)
        loader = make_loader(path, batch_size=32, augment=aug, num_threads=1, seed=5)
        for _epoch in range(2):
            for _batch in loader:
                pass
        assert seen["batches"] > before, config  # the stand-in had this pipeline
        assert seen["differ"] == 0, config


def test_pipelines_the_stand_in_lacks_wait_for_their_kernel() -> None:
    """Noise, a resized crop or a float output: no stand-in (the kernel serves)."""
    from ffcv_pairs.kernels.geometry import GeometryConfig
    from ffcv_pairs.kernels.photometric import PhotometricConfig
    from ffcv_pairs.kernels.pixels import OUT_FLOAT32, OUT_UINT8

    geo = GeometryConfig(
        0.5, 0.0, False, 8, 8, 0, 1.0, 1.0, 1.0, 1.0, 0, 0, 0, False, False, True, False
    )
    photo = PhotometricConfig(0.2, False, 0.2, False, 0.0, False, 0.0, 1.0)

    class Ops:
        kind, downscale = OUT_UINT8, np.zeros(2, bool)

    assert numpy_ops.fused_stand_in(geo, photo, Ops) is not None
    assert numpy_ops.fused_stand_in(geo, photo._replace(noise_std=0.1), Ops) is None
    assert numpy_ops.fused_stand_in(geo._replace(resize=True, crop=True), photo, Ops) is None
    Ops.kind = OUT_FLOAT32
    assert numpy_ops.fused_stand_in(geo, photo, Ops) is None


def test_one_rounding_as_a_fused_multiply_add() -> None:
    """:func:`numpy_ops._fma32` is ``a * b + c`` rounded once: the exact value (in Python
    fractions) rounded to float32, where two float32 roundings or a float64 one then a
    float32 one can differ."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.5, 2000).astype(np.float32)
    b = rng.integers(0, 256, 2000).astype(np.float32)
    c = np.float32(2.0**-60)  # a tiny addend: the float64 sum rounds
    # products on a float32 midpoint, so that the addend decides the rounding
    a[:1000] = np.float32(1.0) + np.float32(2.0**-23)
    b[:1000] = np.float32(3.0)
    got = numpy_ops._fma32(a, b, c)
    for x, y, z in zip(a.tolist(), b.tolist(), got.tolist()):
        exact = Fraction(x) * Fraction(y) + Fraction(float(c))
        assert _nearest(exact, z), (x, y, z)


def _nearest(exact: Any, z: float) -> bool:
    """``z`` is a float32 nearest to ``exact`` (ties to even)."""
    from fractions import Fraction

    z32 = np.float32(z)
    up = np.nextafter(z32, np.float32(np.inf))
    down = np.nextafter(z32, np.float32(-np.inf))
    d = abs(Fraction(float(z32)) - exact)
    if d < abs(Fraction(float(up)) - exact) and d < abs(Fraction(float(down)) - exact):
        return True
    tie = d in (abs(Fraction(float(up)) - exact), abs(Fraction(float(down)) - exact))
    return tie and int(z32.view(np.uint32)) % 2 == 0


CHAIN = """
import hashlib, json, sys, time
from ffcv_pairs import PairAugment, make_loader
from ffcv_pairs.kernels import stand_in

made = []
init = stand_in.ParallelSoon.__init__
stand_in.ParallelSoon.__init__ = lambda self, *a: (init(self, *a), made.append(self))[0]
aug = json.loads(sys.argv[3])
loader = make_loader(sys.argv[1], batch_size=16, augment=aug and PairAugment(**aug),
                     num_threads=2, seed=3)
soon = [m for m in made if m.parallel is not m.serial][0]
epochs, batches = int(sys.argv[2]), []
deadline = time.monotonic() + 400
for epoch in range(10_000):
    for a, b, label in loader:
        batches.append({"digest": hashlib.sha256(a.numpy().tobytes() + b.numpy().tobytes()
                                                 + label.numpy().tobytes()).hexdigest(),
                        "served": sorted(k for k, v in soon.served.items() if v)})
    done = epoch + 1 >= epochs if epochs else len(batches[-1]["served"]) == 3
    if done or time.monotonic() > deadline:
        break
    if not epochs:  # waiting for the compiles: no need to spin a core (the warm run repeats it)
        time.sleep(0.5)
print(json.dumps({"epochs": epoch + 1, "batches": batches}))
"""


@pytest.mark.parametrize(
    ("config", "names"),
    [
        (None, ("copy_stand_in", "copy_pairs_serial", "copy_pairs")),
        (DEMO, ("fused_stand_in", "fused_pairs_serial", "fused_pairs")),
    ],
)
def test_stand_in_then_serial_then_parallel_give_a_warm_runs_batches(
    tmp_path: Path, config: dict | None, names: tuple[str, str, str]
) -> None:
    """On an empty cache the first batch comes from the numpy stand-in (nothing compiled
    before it), then the serial kernel, compiled in the background meanwhile, then the
    parallel one; every batch is byte-identical to a warm run's (the parallel kernel
    throughout)."""
    from tests.conftest import run_python, write_small_beton

    path, _, _ = write_small_beton(tmp_path, n=256, shape=(3, 16, 16))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["FFCV_PAIRS_CACHE_DIR"] = str(tmp_path / "cache")

    def run(epochs: int) -> tuple[dict, str]:
        out = run_python(CHAIN, str(path), str(epochs), json.dumps(config), env=env, timeout=600)
        return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr

    cold, said = run(0)  # until all three have served
    served = [b["served"] for b in cold["batches"]]
    assert served[0] == [names[0]], served[:3]  # the first batch waited for no compile
    assert served[-1] == sorted(names), served[-1]
    assert "numpy stand-in" in said, said
    warm, _ = run(cold["epochs"])
    assert all(b["served"] == [names[2]] for b in warm["batches"])
    assert [b["digest"] for b in warm["batches"]] == [b["digest"] for b in cold["batches"]]


@pytest.mark.parametrize("layout", [(3, 1), (1, 3), (1, 1)])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_the_colour_jitter_stand_in_writes_the_kernels_bytes(layout, dtype) -> None:
    """:func:`color_jitter_stand_in` against :func:`color_jitter`: every order of the four
    parts, any of them on, factors across their ranges, images of more than one block of
    the kernel (1,024 pixels) and of a ragged last lane of its sums (not a multiple of 64
    pixels), planes and interleaved channels, uint8 and float32 with a value range."""
    from ffcv_pairs.kernels.colour import color_jitter
    from ffcv_pairs.kernels.numpy_colour import color_jitter_stand_in

    rng = np.random.default_rng([*layout, np.dtype(dtype).itemsize])
    for h, w in ((37, 41), (1, 1), (64, 16), (5, 300)):
        image = rng.integers(0, 256, (layout[0], h, w, layout[1])).astype(dtype)
        tail = (0.0, 255.0, 1.0) if dtype == np.uint8 else (-0.5, 300.0, 0.0)
        for _ in range(12):
            on = rng.integers(0, 2, 4) if layout != (1, 1) else np.array([1, 1, 0, 0])
            factors = [*rng.uniform(0.0, 2.0, 3), rng.uniform(-0.5, 0.5)]
            params = np.array([*rng.permutation(4), *factors, *on, *tail], dtype=np.float64)
            got, want = image.copy(), image.copy()
            color_jitter_stand_in(got, params, 0)
            color_jitter(want, params, 0)
            assert got.tobytes() == want.tobytes(), (h, w, params)


def test_a_drawn_step_runs_its_twin_until_its_apply_is_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the jitter's apply is not compiled, :func:`apply_photo_steps` runs the numpy
    twin on each image, then the kernel: the same batch either way."""
    from ffcv_pairs.augment import photo_ops

    aug = PairAugment(color_jitter=(0.4, 0.4, 0.4, 0.1), color_jitter_paired=False)
    steps = photo_ops.photo_steps(aug, 3, "uint8", "A")
    assert [s.name for s in steps] == ["color_jitter"], steps
    twin, serves = photo_ops._STAND_INS[steps[0].apply]
    calls = []
    monkeypatch.setitem(
        photo_ops._STAND_INS, steps[0].apply, (lambda *a: (calls.append(1), twin(*a)), serves)
    )
    rng = np.random.default_rng(3)
    view = rng.integers(0, 256, (6, 3, 20, 30, 1)).astype(np.uint8)
    clock, ids, tail = np.array([11, 2]), np.arange(6), photo_ops.value_range("uint8", aug)
    outs = []
    for ready in (False, True):
        monkeypatch.setattr(photo_ops, "types_ready", lambda *a, r=ready, **k: r)
        out = view.copy()
        photo_ops.apply_photo_steps(out, ids, clock, steps, tail, 1)
        outs.append(out)
    assert len(calls) == 6  # the twin served every image of the first batch, none after
    assert not np.array_equal(outs[0], view)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_types_ready_queues_one_background_compile_and_then_says_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """:func:`stand_in.types_ready` on a kernel with no machine code: False, its compile queued
    once (a second ask queues nothing), compiled by :func:`compile_pending` on the background
    thread, then True (the drawn ops' twins serve until then)."""
    import numba as nb
    from numba.core import types

    @nb.njit(nogil=True)
    def twice(x):  # pragma: no cover - JIT
        return 2 * x

    monkeypatch.setattr(stand_in, "is_cached", lambda kernel, types: False)  # not on disk

    sig = (types.int64,)
    assert not stand_in.types_ready(twice, sig)
    with stand_in._PENDING_LOCK:
        queued = [job for job, _ in stand_in._PENDING if job.kernel is twice]
    assert len(queued) == 1
    assert not stand_in.types_ready(twice, sig)  # asked again: still compiling, not queued twice
    with stand_in._PENDING_LOCK:
        assert sum(job.kernel is twice for job, _ in stand_in._PENDING) == 1
    stand_in.compile_pending()
    stand_in.wait_for_compiles()
    assert sig in twice.overloads
    assert stand_in.types_ready(twice, sig)


def test_a_kernel_with_no_disk_cache_compiles_without_a_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background compile of a kernel that numba does not cache (a user's own, say)
    leaves no lock file in the working directory: it has nothing to share."""
    import numba as nb

    from ffcv_pairs.kernels._cache import compile_lock

    @nb.njit(nogil=True)
    def thrice(x):  # pragma: no cover - JIT
        return 3 * x

    monkeypatch.chdir(tmp_path)
    with compile_lock(thrice):
        thrice(2)
    assert list(tmp_path.iterdir()) == []
