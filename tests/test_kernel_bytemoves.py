"""The byte moves (kernels/bytemoves.py): each intrinsic and its plain twin against numpy's
definition, and against each other byte for byte, over seeded cases: every length from 0
to 80 and the lengths around the 16-, 32- and 64-byte vectors and the ``memcpy``
threshold (256), unaligned offsets, runs that start at 0 and runs that end exactly at the
end of the buffer. Each buffer is a view followed by guard bytes that must stay as they
were (tests/test_kernel_edges.py puts unmapped pages there instead)."""

from __future__ import annotations

import functools

import numba as nb
import numpy as np
import pytest

from ffcv_pairs.kernels import bytemoves
from ffcv_pairs.kernels.bytemoves import GAP

KINDS = ["intrinsic", "plain"]
CAP = 320  # bytes of each buffer the kernels see
GUARD = 16  # bytes after it, in the same row, that no kernel may write
LENGTHS = [*range(81), 95, 96, 97, 127, 128, 129, 191, 192, 255, 256, 257, 300, CAP]


def _kernel(name: str, kind: str):
    return getattr(bytemoves, f"{name}_{kind}")


def _placements(rng: np.random.Generator, lengths, cap: int) -> np.ndarray:
    """``(d0, s0, n)`` rows: per length, random offsets, both ends at 0, dst ending at
    ``cap``, src ending at ``cap``."""
    rows = []
    for n in lengths:
        d, s = rng.integers(0, cap - n + 1, 2)
        rows += [(d, s, n), (0, 0, n), (cap - n, s, n), (d, cap - n, n)]
    return np.array(rows, dtype=np.int64)


@functools.cache
def _runner(name: str, kind: str):
    """A jitted loop: case ``c`` writes row ``c`` of ``dst`` (the first :data:`CAP` bytes)."""
    kernel = _kernel(name, kind)
    if name in ("copy_bytes", "reverse_bytes"):
        reverse = name == "reverse_bytes"

        @nb.njit
        def moves(dst, src, cases):  # pragma: no cover - JIT
            for c in range(cases.shape[0]):
                d0, s0, n = cases[c, 0], cases[c, 1], cases[c, 2]
                kernel(dst[c, :CAP], d0, src[c, :CAP], s0 + n - 1 if reverse else s0, n)

        return moves

    @nb.njit
    def fills(dst, values, cases):  # pragma: no cover - JIT
        for c in range(cases.shape[0]):
            kernel(dst[c, :CAP], cases[c, 0], values[c], cases[c, 2])

    return fills


def _buffers(seed: int, cases: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (cases.shape[0], CAP + GUARD)
    return rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 256, shape, np.uint8)


def _moved(name: str, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(what ``name`` of ``kind`` wrote, what numpy's definition writes)."""
    cases = _placements(np.random.default_rng(seed), LENGTHS, CAP)
    dst, src = _buffers(seed, cases)
    want = dst.copy()
    for c, (d0, s0, n) in enumerate(cases):
        run = src[c, s0 : s0 + n]
        want[c, d0 : d0 + n] = run[::-1] if name == "reverse_bytes" else run
    _runner(name, kind)(dst, src, cases)
    return dst, want


def _filled(name: str, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = range(GAP + 1) if name == "fill_gap" else LENGTHS
    cases = _placements(np.random.default_rng(seed), lengths, CAP)
    dst, _ = _buffers(seed, cases)
    values = np.random.default_rng(seed + 1).integers(0, 256, cases.shape[0], dtype=np.uint8)
    want = dst.copy()
    for c, (d0, _, n) in enumerate(cases):
        want[c, d0 : d0 + n] = values[c]
    _runner(name, kind)(dst, values, cases)
    return dst, want


def _run(name: str, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    return (_moved if name in ("copy_bytes", "reverse_bytes") else _filled)(name, kind, seed)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["copy_bytes", "reverse_bytes", "fill_bytes", "fill_gap"])
def test_byte_moves_follow_their_numpy_definition(name: str, kind: str) -> None:
    got, want = _run(name, kind, seed=5)
    np.testing.assert_array_equal(got[:, :CAP], want[:, :CAP])
    np.testing.assert_array_equal(got[:, CAP:], want[:, CAP:], err_msg="wrote past the end")


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", ["copy_bytes", "reverse_bytes", "fill_bytes", "fill_gap"])
def test_byte_move_intrinsics_equal_their_twins(name: str, seed: int) -> None:
    intrinsic, _ = _run(name, "intrinsic", seed)
    plain, _ = _run(name, "plain", seed)
    assert intrinsic.tobytes() == plain.tobytes()


@functools.cache
def _prefetcher(kind: str):
    kernel = _kernel("prefetch", kind)

    @nb.njit
    def touch(arr, at):  # pragma: no cover - JIT
        total = 0
        for i in at:
            kernel(arr, i)
            total += arr[min(max(i, 0), arr.shape[0] - 1)]
        return total

    return touch


@pytest.mark.parametrize("kind", KINDS)
def test_prefetch_changes_no_byte_and_never_faults(kind: str) -> None:
    """The definition of a prefetch: nothing observable, for any index (the resize asks for
    rows it may not read; LLVM's prefetch never faults)."""
    rng = np.random.default_rng(9)
    arr = rng.integers(0, 256, 1000, dtype=np.uint8)
    before = arr.copy()
    at = np.concatenate([np.arange(-70, 1070), rng.integers(-(1 << 40), 1 << 40, 200)])
    clipped = arr[np.clip(at, 0, arr.shape[0] - 1)].astype(np.int64).sum()
    assert _prefetcher(kind)(arr, at) == clipped
    assert arr.tobytes() == before.tobytes()


def test_the_prefetch_intrinsic_emits_a_prefetch_and_its_twin_none() -> None:
    arr, at = np.zeros(64, np.uint8), np.arange(4)
    emitted = {}
    for kind in KINDS:
        run = _prefetcher(kind)
        run(arr, at)
        emitted[kind] = "@llvm.prefetch" in run.inspect_llvm(run.signatures[0])
    assert emitted == {"intrinsic": True, "plain": False}
