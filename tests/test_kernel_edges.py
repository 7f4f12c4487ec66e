"""No kernel touches a byte outside what its contract names, even by a vector that rewrites
bytes with their own values: each kernel runs on a page of memory between two pages that
fault on any access (``mprotect``), at both ends, in both kinds (intrinsic and plain).

A stray access kills the process, so the kernels run in a subprocess, which says what it
runs before each step: the last line names the one that faulted. The loader reads samples
from a mapped file, and a vector read past the last sample of the file could fault there.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import ctypes, faulthandler, mmap, sys
import numba as nb, numpy as np
from ffcv_pairs.kernels import bytemoves as bm, bytesums as bs, lanes as ln, warp_lanes as wl

faulthandler.enable()
PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
KEEP = []


def fenced(dtype=np.uint8):
    # One read-write page between two that fault on any access.
    m = mmap.mmap(-1, 3 * PAGE)
    KEEP.append(m)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    for off in (0, 2 * PAGE):
        assert libc.mprotect(base + off, PAGE, 0) == 0, ctypes.get_errno()
    return np.frombuffer(m, np.uint8)[PAGE : 2 * PAGE].view(dtype)


def moves(copy, reverse, fill, gap):
    @nb.njit
    def run(dst, src):
        p = dst.shape[0]
        for n in range(0, 300):
            copy(dst, p - n, src, p - n, n)
            copy(dst, 0, src, 0, n)
            reverse(dst, p - n, src, n - 1, n)
            reverse(dst, 0, src, p - 1, n)
            fill(dst, p - n, np.uint8(7), n)
            fill(dst, 0, np.uint8(7), n)
        for n in range(bm.GAP + 1):
            gap(dst, p - n, np.uint8(9), n)
            gap(dst, 0, np.uint8(9), n)
    return run


def sums(sums64, channel_sums48):
    @nb.njit
    def run(arr):
        p, total = arr.shape[0], 0
        for start in (0, p - bs.WIDTH):
            a, b, c = sums64(arr, start, np.uint8(100))
            total += a + b + c
        for start in (0, p - 48):
            a, b, c = channel_sums48(arr, start)
            total += a + b + c
        return total
    return run


def steps(rows8, store8):
    @nb.njit
    def run(src, line, dst):
        p, q = src.shape[0], line.shape[0]
        for i in (0, p - ln.LANES):
            rows8(src, i, p - ln.LANES - i, np.float32(0.5), np.float32(0.5), line, 0)
            rows8(src, i, i, np.float32(0.5), np.float32(0.5), line, q - ln.LANES)
        store8(line, 0, dst, 0)
        store8(line, q - ln.LANES, dst, dst.shape[0] - ln.LANES)
    return run


def blends(blend8):
    @nb.njit
    def run(rows, out, starts, offsets, weights):
        # the first window starts the first row, the last one ends the last row
        blend8(rows, out, (0, rows.shape[0] - 1), starts, offsets, 0, weights)
        blend8(rows, out, (0, rows.shape[0] - 1), starts, offsets, out.shape[1] - 8, weights)
    return run


def blend_args():
    rows, out = fenced(np.float32).reshape(4, -1), fenced(np.float32).reshape(4, -1)
    rows[:], cols = 1.0, rows.shape[1]
    starts = np.zeros(cols // 4, np.int64)
    starts[-2:] = cols - ln.LANES
    offsets = np.zeros(cols, np.int32)
    offsets[-ln.LANES :] = ln.MAX_SPAN
    return rows, out, starts, offsets, np.full(cols, 0.5, np.float32)


def gathers(blend8_gather):
    @nb.njit
    def run(src, dst, xs, ys, at):
        # taps of the first 2x2 block of the page, then of its last (rows of 64 bytes)
        blend8_gather(src, dst, 0, 0, 64, xs, ys, at, 0)
        blend8_gather(src, dst, 0, dst.shape[0] - wl.GATHER_LANES, 64, xs, ys, at, 8)
    return run


def gather_args():
    src, dst = fenced(), fenced()
    at = np.zeros(16, np.int64)
    at[8:] = src.shape[0] - 64 - 2  # the last block's top-left tap
    weights = np.arange(16, dtype=np.int64) * 65_537
    return src, dst, weights, weights[::-1].copy(), at


def taps(taps8):
    @nb.njit
    def run(xs, ys, at, ok):
        # the first eight points of the page's arrays, then the last eight
        for x in (0, xs.shape[0] - wl.GATHER_LANES):
            taps8(0.5, 0.5, 0.9, 0.1, 20, 20, 20, 1, xs, ys, at, ok, x)
    return run


STEPS = {}
for kind in ("intrinsic", "plain"):
    k = lambda mod, name: getattr(mod, f"{name}_{kind}")
    STEPS[f"{kind} byte moves"] = (
        moves(*(k(bm, n) for n in ("copy_bytes", "reverse_bytes", "fill_bytes", "fill_gap"))),
        (fenced(), fenced()),
    )
    STEPS[f"{kind} sums"] = (sums(k(bs, "sums64"), k(bs, "channel_sums48")), (fenced(),))
    STEPS[f"{kind} rows8, store8"] = (
        steps(k(ln, "rows8"), k(ln, "store8")),
        (fenced(), fenced(np.float32), fenced()),
    )
    STEPS[f"{kind} blend8"] = (blends(k(ln, "blend8")), blend_args())
    STEPS[f"{kind} blend8_gather"] = (gathers(k(wl, "blend8_gather")), gather_args())
    STEPS[f"{kind} taps8"] = (taps(k(wl, "taps8")), tuple(fenced(np.int64) for _ in range(4)))
STEPS["scalar-load blend8"] = (blends(ln.make_blend8(False)), blend_args())

for name, (run, args) in STEPS.items():
    print(name, flush=True)
    run(*args)
print("ok", flush=True)
"""


def test_kernels_touch_no_byte_outside_their_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600
    )
    last = (out.stdout.strip().splitlines() or ["(nothing)"])[-1]
    assert out.returncode == 0 and last == "ok", f"faulted in: {last}\n{out.stderr[-3000:]}"
