"""The warp's eight-pixel uint8 blend (kernels/warp_lanes.py): the intrinsic and its plain
twin byte for byte, and both the blend of the definition (kernels/warp's docstring, as
weights ``(1 - a)(1 - b)`` and so on), on random taps with the extremes (0 and 255, weights
0 and just below 1), taps at the very end of the source and the narrowest rows (2 bytes).
The eight-pixel source points of an affine row (``taps8``): both kinds, the values of the
row's per-pixel loop (kernels/warp's ``_store``, in Python), a half pixel and the image's
edges among them."""

from __future__ import annotations

import functools
import math

import numba as nb
import numpy as np
import pytest

from ffcv_pairs.kernels import warp_lanes, warp_quads

ONE = 1 << 20


@functools.cache
def _runner(kind: str):
    kernel = getattr(warp_lanes, f"blend8_gather_{kind}")

    @nb.njit
    def run(s, d, t0, row, xs, ys, at):  # pragma: no cover - JIT
        for x in range(0, len(at), 8):
            kernel(s, d, t0, x, row, xs, ys, at, x)

    return run


def _case(seed: int, height: int, width: int, n: int):
    """A source of ``height`` rows of ``width`` bytes and ``n`` points (a multiple of 8)
    whose four taps are inside, the last eight at the source's last 2x2 block."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 256, height * width, dtype=np.uint8)
    s[: height * width // 2] = rng.choice(np.array([0, 1, 254, 255], np.uint8), height * width // 2)
    x0, y0 = rng.integers(0, width - 1, n), rng.integers(0, height - 1, n)
    x0[-8:], y0[-8:] = width - 2, height - 2
    ax, ay = rng.integers(0, ONE, n), rng.integers(0, ONE, n)
    edges = np.array([0, 1, 511, 512, ONE // 2 - 1, ONE // 2, ONE - 1])  # and the cut's
    ax[:16] = rng.choice(edges, 16)
    ay[8:24] = rng.choice(edges, 16)
    xs, ys = (x0 << 20) + ax, (y0 << 20) + ay
    return s, xs.astype(np.int64), ys.astype(np.int64), (y0 * width + x0).astype(np.int64)


def _definition(s, row, xs, ys, at):
    out = np.empty(len(at), np.uint8)
    for j, t in enumerate(at):
        # weights: the fractions cut to 11 bits, in 2048ths
        ax, ay = (int(xs[j]) & (ONE - 1)) >> 9, (int(ys[j]) & (ONE - 1)) >> 9
        v = [int(s[t]), int(s[t + 1]), int(s[t + row]), int(s[t + row + 1])]
        top, low = (2048 - ax) * v[0] + ax * v[1], (2048 - ax) * v[2] + ax * v[3]
        out[j] = ((2048 - ay) * top + ay * low + (1 << 21)) >> 22
    return out


@pytest.mark.parametrize(("height", "width"), [(2, 2), (9, 3), (31, 40), (5, 224)])
@pytest.mark.parametrize("seed", [0, 1])
def test_blend8_gather_kinds_are_the_definition(height: int, width: int, seed: int) -> None:
    s, xs, ys, at = _case(seed, height, width, 160)
    want = _definition(s, width, xs, ys, at)
    for kind in ("intrinsic", "plain"):
        got = np.zeros(len(at), np.uint8)
        _runner(kind)(s, got, 0, width, xs, ys, at)
        np.testing.assert_array_equal(got, want, err_msg=kind)


def test_blend8_gather_reads_from_its_plane() -> None:
    """``t0`` moves every tap: the second plane of two is read, the first never."""
    s, xs, ys, at = _case(3, 6, 7, 64)
    two = np.concatenate([np.zeros_like(s), s])
    for kind in ("intrinsic", "plain"):
        got = np.zeros(len(at), np.uint8)
        _runner(kind)(two, got, len(s), 7, xs, ys, at)
        np.testing.assert_array_equal(got, _definition(s, 7, xs, ys, at), err_msg=kind)


def test_blend8_gather_refuses_other_dtypes() -> None:
    @nb.njit
    def call(s, d, xs):  # pragma: no cover - JIT
        warp_lanes.blend8_gather_intrinsic(s, d, 0, 0, 2, xs, xs, xs, 0)

    with pytest.raises((TypeError, nb.core.errors.TypingError), match="blends uint8 into uint8"):
        call(np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(8, np.int64))


@functools.cache
def _taps_runner(kind: str):
    kernel = getattr(warp_lanes, f"taps8_{kind}")

    @nb.njit
    def run(line, size, xs, ys, at, ok):  # pragma: no cover - JIT
        bad = 0
        for x in range(0, len(xs), 8):
            bad += kernel(*line, *size, xs, ys, at, ok, x)
        return bad

    return run


def _taps_definition(line, size, n):
    """kernels/warp's affine row, a pixel at a time in Python."""
    (bx, by, m00, m10), (width, height, row, px) = line, size
    out = np.zeros((4, n), np.int64)
    for x in range(n):
        sx = math.floor((bx + m00 * float(x)) * ONE + 0.5)
        sy = math.floor((by + m10 * float(x)) * ONE + 0.5)
        x0, y0 = sx >> 20, sy >> 20
        good = int(0 <= x0 < width - 1 and 0 <= y0 < height - 1)
        out[:, x] = sx, sy, (y0 * row + x0 * px) * good, good + 2
    return out, int(n - out[3].sum() + 2 * n)


@pytest.mark.parametrize("seed", range(6))
def test_taps8_kinds_are_the_row_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, width, height = 64, int(rng.integers(2, 40)), int(rng.integers(2, 40))
    angle, scale = rng.uniform(-np.pi, np.pi), rng.uniform(0.2, 3.0)
    m00, m10 = scale * math.cos(angle), scale * math.sin(angle)
    bx, by = rng.uniform(-20, 60), rng.uniform(-20, 60)
    if seed == 0:  # points a half step of the fixed point apart: every one a tie
        bx, by, m00, m10 = -1.5 + 2.0**-21, 0.5 + 2.0**-21, 0.5, 0.0
    line, size = (bx, by, m00, m10), (width, height, width * 3, 3)
    want, bad = _taps_definition(line, size, n)
    assert 0 < bad < n or seed > 0
    for kind in ("intrinsic", "plain"):
        got = np.full((4, n), -7, np.int64)
        assert _taps_runner(kind)(line, size, *got) == bad, kind
        np.testing.assert_array_equal(got, want, err_msg=kind)


@functools.cache
def _quads_runner(kind: str):
    kernel = getattr(warp_quads, f"quads16_{kind}")

    @nb.njit
    def run(quads, d, planes, width, height, line, n):  # pragma: no cover - JIT
        bits = np.zeros(n // 16, np.int64)
        for x in range(0, n, 16):
            bits[x // 16] = kernel(quads, d, planes, n, x, width, height, *line, x)
        return bits

    return run


def _quads_definition(planes, s, width, height, line, n):
    """Sixteen-lane steps of an affine row blended from ``planes`` planes of ``s``, in Python:
    the lanes with a tap outside are 0 and set in the mask."""
    bx, by, m00, m10 = line
    out, bits = np.zeros((planes, n), np.uint8), np.zeros(n // 16, np.int64)
    for x in range(n):
        sx = math.floor((bx + m00 * float(x)) * ONE + 0.5)
        sy = math.floor((by + m10 * float(x)) * ONE + 0.5)
        x0, y0, wx, wy = sx >> 20, sy >> 20, (sx & (ONE - 1)) >> 9, (sy & (ONE - 1)) >> 9
        if not (0 <= x0 < width - 1 and 0 <= y0 < height - 1):
            bits[x // 16] |= 1 << (x % 16)
            continue
        for k in range(planes):
            v = s[k, y0 : y0 + 2, x0 : x0 + 2].astype(np.int64)
            top, low = (2048 - wx) * v[0, 0] + wx * v[0, 1], (2048 - wx) * v[1, 0] + wx * v[1, 1]
            out[k, x] = ((2048 - wy) * top + wy * low + (1 << 21)) >> 22
    return out, bits


@pytest.mark.parametrize("planes", [2, 3, 4])
@pytest.mark.parametrize("seed", range(4))
def test_quads16_kinds_are_the_definition(planes: int, seed: int) -> None:
    """Both kinds of :func:`quads16` against the blend of the taps' planes, lane by lane, on
    rotated and scaled rows that leave the source (masked lanes) and on one of ties (seed 0:
    points a half step of the fixed point apart, weights at the cut's edges); the planes'
    words from :func:`interleave`."""
    rng = np.random.default_rng([planes, seed])
    n, width, height = 64, int(rng.integers(2, 40)), int(rng.integers(2, 40))
    s = rng.integers(0, 256, (planes, height, width), dtype=np.uint8)
    s[:, ::2] = rng.choice(np.array([0, 255], np.uint8), s[:, ::2].shape)
    angle, scale = rng.uniform(-np.pi, np.pi), rng.uniform(0.7, 3.0)  # 45 pixels and more
    start = (rng.uniform(0, width - 1), rng.uniform(0, height - 1))  # inside, then out
    line = (*start, scale * math.cos(angle), scale * math.sin(angle))
    if seed == 0:
        line = (-1.5 + 2.0**-21, 0.5 + 2.0**-21, 0.5 + 2.0**-12, 2.0**-11)
    quads = np.zeros(height * width, np.uint32)
    warp_quads.interleave(s.reshape(-1), planes, height * width, quads)
    want, bits = _quads_definition(planes, s, width, height, line, n)
    assert np.count_nonzero(want) > 0 and bits.any()
    for kind in ("intrinsic", "plain"):
        got = np.full((planes, n), 7, np.uint8)
        np.testing.assert_array_equal(
            _quads_runner(kind)(quads, got.reshape(-1), planes, width, height, line, n), bits
        )
        np.testing.assert_array_equal(got, want, err_msg=kind)
