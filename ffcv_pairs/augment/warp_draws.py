"""Each sample's geometry as one 3x3 output -> source matrix (the options:
:mod:`.warp_options`; the sampler: :mod:`ffcv_pairs.kernels.warp`).

Every op is a matrix that maps a pixel of its output to the pixel of its input it reads, pixel
centres at whole coordinates, built here in numpy from the sample's uniforms
(``uniform_rows(ids, clock, WARP_OP_IDS[draw], key_tag, k)``: ``key_tag`` 0, or the field's
tag when ``geometry_paired`` is False); the sample's matrix is their product, the first op
(the resize) leftmost. The same ids, clock and options give the same matrices for every
thread count, rank and resume, and A, B and a dense mask share them (B adds ``b_offset``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels.hashing import WARP_OP_IDS, uniform_rows
from .warp_options import warp_canvas

__all__ = [
    "affine_map",
    "matrices",
    "output_size",
    "perspective_map",
    "resize_map",
    "rotation_map",
    "warp_matrices",
]


def matrices(n: int, *entries: Any) -> np.ndarray:
    """``(n, 3, 3)`` float64 from the 6 entries of the top two rows (each a number or an
    ``(n,)`` array), and optionally the 2 of the bottom row before its 1."""
    m = np.zeros((n, 3, 3))
    for j, value in enumerate(entries):
        m[:, j // 3, j % 3] = value
    m[:, 2, 2] = 1.0
    return m


def resize_map(n: int, h_in: Any, w_in: Any, h_out: Any, w_out: Any) -> np.ndarray:
    """A resize from ``(h_in, w_in)`` to ``(h_out, w_out)`` (half-pixel centres, as
    torchvision's and OpenCV's bilinear resize)."""
    sx, sy = np.divide(w_in, w_out), np.divide(h_in, h_out)
    return matrices(n, sx, 0.0, 0.5 * sx - 0.5, 0.0, sy, 0.5 * sy - 0.5)


def _about_centre(lin: np.ndarray, cx: Any, cy: Any, tx: Any = 0.0, ty: Any = 0.0) -> np.ndarray:
    """The map ``source = c + lin @ (out - c - t)``: the inverse of a linear map ``lin^-1``
    about the centre ``c``, then a shift by ``t``."""
    n = len(lin)
    px, py = np.broadcast_to(cx + tx, (n,)), np.broadcast_to(cy + ty, (n,))
    ox = cx - (lin[:, 0, 0] * px + lin[:, 0, 1] * py)
    oy = cy - (lin[:, 1, 0] * px + lin[:, 1, 1] * py)
    return matrices(n, lin[:, 0, 0], lin[:, 0, 1], ox, lin[:, 1, 0], lin[:, 1, 1], oy)


def _linear(a: Any, b: Any, c: Any, d: Any) -> np.ndarray:
    a, b, c, d = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, c, d)))
    return np.stack([np.stack([a, b], -1), np.stack([c, d], -1)], -2)


def rotation_map(degrees: np.ndarray, cx: Any, cy: Any) -> np.ndarray:
    """A rotation by ``degrees`` counter-clockwise (as displayed: y points down) about
    ``(cx, cy)``: torchvision's ``rotate``."""
    t = np.radians(degrees)
    return _about_centre(_linear(np.cos(t), -np.sin(t), np.sin(t), np.cos(t)), cx, cy)


def affine_map(
    degrees: np.ndarray,
    shift: tuple[np.ndarray, np.ndarray],
    scale: np.ndarray,
    shear: tuple[np.ndarray, np.ndarray],
    centre: tuple[Any, Any],
) -> np.ndarray:
    """torchvision's affine about ``centre``: forward ``T(shift) C R(a) S(scale) SHy(sy)
    SHx(sx) C^-1`` with ``R(a) = [[cos a, -sin a], [sin a, cos a]]`` (clockwise as displayed),
    ``SHx(s) = [[1, -tan s], [0, 1]]``, ``SHy(s) = [[1, 0], [-tan s, 1]]``; ``shear`` in
    degrees, ``shift`` in pixels; returned as its inverse."""
    a = np.radians(degrees)
    sx, sy = (np.tan(np.radians(s)) for s in shear)
    rot = _linear(np.cos(a), -np.sin(a), np.sin(a), np.cos(a)) * np.reshape(scale, (-1, 1, 1))
    forward = rot @ _linear(1.0, 0.0, -sy, 1.0) @ _linear(1.0, -sx, 0.0, 1.0)
    return _about_centre(np.linalg.inv(forward), *centre, *shift)


def perspective_map(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The homography taking the corners ``end`` (``(n, 4, 2)``, x then y) of the output to
    ``start`` of the input, applied as torchvision applies it: on pixel corners (a pixel
    centre at ``i + 1/2``)."""
    n = len(start)
    a, b = np.zeros((n, 8, 8)), np.zeros((n, 8))
    for i in range(4):
        ex, ey, sx, sy = end[:, i, 0], end[:, i, 1], start[:, i, 0], start[:, i, 1]
        one, zero = np.ones(n), np.zeros(n)
        a[:, 2 * i] = np.stack([ex, ey, one, zero, zero, zero, -sx * ex, -sx * ey], -1)
        a[:, 2 * i + 1] = np.stack([zero, zero, zero, ex, ey, one, -sy * ex, -sy * ey], -1)
        b[:, 2 * i], b[:, 2 * i + 1] = sx, sy
    h = matrices(n, *np.linalg.solve(a, b[..., None])[..., 0].T)
    return matrices(n, 1, 0, -0.5, 0, 1, -0.5) @ h @ matrices(n, 1, 0, 0.5, 0, 1, 0.5)


def output_size(aug: Any, height: int, width: int) -> tuple[int, int]:
    """The output ``(height, width)`` for stored images of ``(height, width)``: the crop's or
    resized crop's, else the resized size, padded by ``pad_if_needed``."""
    if aug.out_size is not None:
        return tuple(aug.out_size)
    h, w = warp_canvas(aug, height, width)
    if aug.pad_if_needed is not None:
        h, w = max(h, aug.pad_if_needed[0]), max(w, aug.pad_if_needed[1])
    return h, w


def _randint(u: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    """Integers uniform in ``[lo, hi]`` (inclusive) from uniforms ``u``."""
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    return np.minimum(lo + np.floor(u * (hi - lo + 1)).astype(np.int64), hi)


def _central(h: np.ndarray, w: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, ...]:
    """The largest central region of aspect (width / height) clamped to ``[lo, hi]``."""
    ratio = w / h
    rh = np.where(ratio < lo, np.round(w / lo), h).astype(np.int64)
    rw = np.where(ratio > hi, np.round(h * hi), w).astype(np.int64)
    rh = np.where(ratio > hi, h, rh)
    rw = np.where(ratio < lo, w, rw)
    return (h - rh) // 2, (w - rw) // 2, rh, rw


def _resized_region(aug: Any, u: np.ndarray, h: np.ndarray, w: np.ndarray) -> tuple:
    """torchvision's ``RandomResizedCrop.get_params``: 10 tries, then a central region;
    try ``t`` reads uniforms ``4t`` to ``4t + 3`` of ``u``."""
    lo, hi = aug.scale_range
    log_lo, log_hi = math.log(aug.crop_ratio[0]), math.log(aug.crop_ratio[1])
    area = (h * w)[:, None].astype(np.float64)
    scale = lo + u[:, 0:40:4] * (hi - lo)
    aspect = np.exp(log_lo + u[:, 1:40:4] * (log_hi - log_lo))
    rw = np.round(np.sqrt(area * scale * aspect)).astype(np.int64)
    rh = np.round(np.sqrt(area * scale / aspect)).astype(np.int64)
    ok = (rw > 0) & (rw <= w[:, None]) & (rh > 0) & (rh <= h[:, None])
    rows, first = np.arange(len(u)), np.argmax(ok, axis=1)
    rh, rw = rh[rows, first], rw[rows, first]
    y0 = _randint(u[rows, 2 + 4 * first], 0, h - rh)
    x0 = _randint(u[rows, 3 + 4 * first], 0, w - rw)
    cy, cx, ch, cw = _central(h, w, *aug.crop_ratio)
    found = ok.any(axis=1)
    return tuple(np.where(found, a, b) for a, b in ((y0, cy), (x0, cx), (rh, ch), (rw, cw)))


def _window(aug: Any, u: np.ndarray, h: np.ndarray, w: np.ndarray, out: tuple) -> tuple:
    """The region ``(y0, x0, rh, rw)`` of the canvas (per-sample sizes ``h``, ``w``) the
    output shows, before the shift: uniforms 0-1 the crop's place, 2-41 the resized crop's."""
    oh, ow = out
    if aug.resized_crop is not None and aug.center:
        return _central(h, w, ow / oh, ow / oh)
    if aug.resized_crop is not None:
        return _resized_region(aug, u[:, 2:42], h, w)
    full = (np.full(len(u), oh), np.full(len(u), ow))
    if aug.crop is not None and not aug.center:
        pad = aug.crop_padding
        ends = [(-pad, h + pad - oh), (-pad, w + pad - ow)]
        starts = [
            _randint(u[:, j], np.minimum(a, b), np.maximum(a, b)) for j, (a, b) in enumerate(ends)
        ]
        return (*starts, *full)
    return (h - oh) // 2, (w - ow) // 2, *full


def _turns(n: int, k: np.ndarray, oh: int, ow: int) -> np.ndarray:
    """The quarter turns ``k`` (output -> its input: the turn undone)."""
    table = np.stack(
        [
            np.eye(3),
            matrices(1, 0, -1, ow - 1, 1, 0, 0)[0],
            matrices(1, -1, 0, ow - 1, 0, -1, oh - 1)[0],
            matrices(1, 0, 1, 0, -1, 0, oh - 1)[0],
        ]
    )
    return table[np.asarray(k, np.int64) % 4]


_TRANSPOSE = matrices(1, 0, 1, 0, 1, 0, 0)[0]


def warp_matrices(
    aug: Any, ids: np.ndarray, clock: np.ndarray, tag: int, height: int, width: int
) -> np.ndarray:
    """``(n, 3, 3)``: the output -> source matrix of each sample of ``ids`` for field ``tag``
    (0: A and the dense fields, 1: B) of stored images of ``(height, width)``."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    n, key = len(ids), 0 if aug.geometry_paired else tag

    def draw(name: str, count: int) -> np.ndarray:
        return uniform_rows(ids, clock, WARP_OP_IDS[name], key, count)

    h1, w1 = warp_canvas(aug, height, width)
    m = None if (h1, w1) == (height, width) else resize_map(n, height, width, h1, w1)
    h, w = np.full(n, h1, np.int64), np.full(n, w1, np.int64)
    if aug.scale_jitter is not None or aug.scale_jitter_aspect is not None:
        u = draw("scale_jitter", 2)
        lo, hi = aug.scale_jitter or (1.0, 1.0)
        alo, ahi = aug.scale_jitter_aspect or (1.0, 1.0)
        s = lo + (hi - lo) * u[:, 0]
        a = np.exp(math.log(alo) + (math.log(ahi) - math.log(alo)) * u[:, 1])
        h = np.maximum(1, np.round(h1 * s / np.sqrt(a))).astype(np.int64)
        w = np.maximum(1, np.round(w1 * s * np.sqrt(a))).astype(np.int64)
        m = _then(m, resize_map(n, h1, w1, h, w))
    if aug.pad_if_needed is not None:
        ph, pw = np.maximum(h, aug.pad_if_needed[0]), np.maximum(w, aug.pad_if_needed[1])
        m = _then(m, matrices(n, 1, 0, -((pw - w) // 2), 0, 1, -((ph - h) // 2)))
        h, w = ph, pw
    m = _then(m, _warps(aug, draw, n, h, w))
    oh, ow = output_size(aug, height, width)
    u = draw("window", 44)
    y0, x0, rh, rw = (np.asarray(v, np.float64) for v in _window(aug, u, h, w, (oh, ow)))
    ty, tx = aug.translate
    y0, x0 = y0 + _randint(u[:, 42], -ty, ty), x0 + _randint(u[:, 43], -tx, tx)
    if tag == 1 and any(aug.b_offset):
        o = uniform_rows(ids, clock, WARP_OP_IDS["b_offset"], 0, 2)
        y0, x0 = y0 + (2 * o[:, 0] - 1) * aug.b_offset[0], x0 + (2 * o[:, 1] - 1) * aug.b_offset[1]
    sy, sx = rh / oh, rw / ow
    m = _then(m, matrices(n, sx, 0, x0 + 0.5 * sx - 0.5, 0, sy, y0 + 0.5 * sy - 0.5))
    m = _then(m, _output_turns(aug, draw, n, oh, ow))
    assert m is not None  # the window's map is never left out
    return m


def _then(m: np.ndarray | None, then: np.ndarray | None) -> np.ndarray | None:
    """``m @ then``, None standing for the identity (left out: no product to compute)."""
    if m is None or then is None:
        return then if m is None else m
    return m @ then


def _warps(aug: Any, draw: Any, n: int, h: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """Rotation, affine and perspective on the canvas of ``(h, w)``, about its centre
    (None: none of them)."""
    m, eye = None, np.eye(3)
    cx, cy = (w - 1) / 2, (h - 1) / 2
    if aug.rotate is not None and aug.rotate_p > 0:
        u = draw("rotate", 2)
        lo, hi = aug.rotate
        turn = rotation_map(lo + (hi - lo) * u[:, 1], cx, cy)
        m = _then(m, np.where((u[:, 0] < aug.rotate_p)[:, None, None], turn, eye))
    if aug.has_affine:
        u = draw("affine", 7)
        lo, hi = aug.affine_degrees or (0.0, 0.0)
        fx, fy = aug.affine_translate or (0.0, 0.0)
        slo, shi = aug.affine_scale or (1.0, 1.0)
        x0, x1, y0, y1 = aug.affine_shear or (0.0, 0.0, 0.0, 0.0)
        shift = (np.round((2 * u[:, 2] - 1) * fx * w), np.round((2 * u[:, 3] - 1) * fy * h))
        shear = (x0 + (x1 - x0) * u[:, 5], y0 + (y1 - y0) * u[:, 6])
        scale = slo + (shi - slo) * u[:, 4]
        moved = affine_map(lo + (hi - lo) * u[:, 1], shift, scale, shear, (cx, cy))
        m = _then(m, np.where((u[:, 0] < aug.affine_p)[:, None, None], moved, eye))
    if aug.perspective > 0 and aug.perspective_p > 0:
        u = draw("perspective", 9)
        m = _then(
            m,
            np.where((u[:, 0] < aug.perspective_p)[:, None, None], _perspective(aug, u, h, w), eye),
        )
    return m


def _perspective(aug: Any, u: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """torchvision's ``RandomPerspective.get_params`` (uniforms 1-8 of ``u``)."""
    bh = (aug.perspective * (h // 2)).astype(np.int64) + 1
    bw = (aug.perspective * (w // 2)).astype(np.int64) + 1

    def pick(k: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:  # in [lo, hi)
        return _randint(u[:, k], lo, hi - 1)

    zero = np.zeros_like(h)
    end = np.stack(
        [
            np.stack([pick(1, zero, bw), pick(2, zero, bh)], -1),
            np.stack([pick(3, w - bw, w), pick(4, zero, bh)], -1),
            np.stack([pick(5, w - bw, w), pick(6, h - bh, h)], -1),
            np.stack([pick(7, zero, bw), pick(8, h - bh, h)], -1),
        ],
        1,
    ).astype(np.float64)
    corners = ((zero, zero), (w - 1, zero), (w - 1, h - 1), (zero, h - 1))
    start = np.stack([np.stack(c, -1) for c in corners], 1).astype(np.float64)
    return perspective_map(start, end)


def _output_turns(aug: Any, draw: Any, n: int, oh: int, ow: int) -> np.ndarray | None:
    """Flips, quarter turns, ``transpose`` and ``d4`` on the output (square where they
    turn it); None: none of them."""
    m = None
    if aug.hflip or aug.vflip or aug.rot90:
        u = draw("flips", 3)
        h_on, v_on = u[:, 0] < aug.hflip, u[:, 1] < aug.vflip
        flips = matrices(
            n, np.where(h_on, -1, 1), 0, np.where(h_on, ow - 1, 0), 0, np.where(v_on, -1, 1)
        )
        flips[:, 1, 2] = np.where(v_on, oh - 1, 0)
        m = _then(flips, _turns(n, np.floor(u[:, 2] * 4), oh, ow) if aug.rot90 else None)
    if aug.transpose:
        u = draw("transpose", 1)
        m = _then(m, np.where((u[:, 0] < aug.transpose)[:, None, None], _TRANSPOSE, np.eye(3)))
    if aug.d4:
        k = np.floor(draw("d4", 1)[:, 0] * 8).astype(np.int64)
        turned = _then(m, _turns(n, k, oh, ow))
        m = _then(turned, np.where((k >= 4)[:, None, None], _TRANSPOSE, np.eye(3)))
    return m
