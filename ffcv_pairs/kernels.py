"""Numba kernels for decoding and augmenting pairs. Cached on disk, parallel over the batch.

Randomness is counter-based: every random number is ``hash(seed, epoch,
sample_id, op, field_tag, k)``. Nothing depends on thread scheduling, rank,
traversal order or what else is in the batch, so A and B (which share the
key unless an op is unpaired) get the same parameters, on every run.

Images are seen in a canonical 4-d form ``(planes, height, width * pixel)``:
CHW is ``(C, H, W)`` with 1-element pixels, HWC is ``(1, H, W*C)`` with
C-element pixels. The geometric decoder moves whole pixels as bytes, so it
works for any dtype; numeric kernels take uint8 or float32 arrays.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .order import mix64

__all__ = [
    "OP_BRIGHTNESS",
    "OP_CONTRAST",
    "OP_GEOMETRY",
    "OP_NOISE",
    "copy_bytes",
    "decode_pairs",
    "decode_pairs_serial",
    "fill_bytes",
    "geometry_params",
    "photometric",
    "resized_crop",
    "reverse_bytes",
    "uniform",
]

# Op ids: part of the random key, so ops never share random numbers.
OP_GEOMETRY, OP_BRIGHTNESS, OP_CONTRAST, OP_NOISE = 1, 2, 3, 4

# Layout of the geometry config vector ``g`` (float64).
G_HFLIP, G_VFLIP, G_ROT90, G_OUT_H, G_OUT_W, G_PAD = 0, 1, 2, 3, 4, 5
G_SCALE_LO, G_SCALE_HI, G_RATIO_LO, G_RATIO_HI, G_TRANS_Y, G_TRANS_X = 6, 7, 8, 9, 10, 11
G_PAD_MODE, G_CROP, G_RESIZE, G_PAIRED, G_IDENTITY = 12, 13, 14, 15, 16
G_SIZE = 17
PAD_CONSTANT, PAD_REFLECT, PAD_EDGE = 0, 1, 2

# Layout of per-sample geometry parameters.
P_HFLIP, P_VFLIP, P_ROT, P_Y0, P_X0, P_RH, P_RW = 0, 1, 2, 3, 4, 5, 6
P_SIZE = 7

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


_VECTORS = (64, 32, 16)  # vector widths for row copies, widest first (LLVM splits them
# into what the CPU has: one AVX-512 move per 64-byte row, four SSE moves without it)
_LARGE = 256  # longer runs go to the C library's memcpy


def _move(builder, dptr, sptr, k, width, reverse):
    """One vector: ``dst[k : k+width] = src[k : k+width]``, or with ``reverse``
    ``dst[k + j] = src[-(k + j)]`` (``sptr`` then points at the last source byte)."""
    i64, vec = ir.IntType(64), ir.VectorType(ir.IntType(8), width)
    if reverse:
        src = builder.gep(sptr, [builder.sub(ir.Constant(i64, 1 - width), k)])
    else:
        src = builder.gep(sptr, [k])
    value = builder.load(builder.bitcast(src, vec.as_pointer()), align=1)
    if reverse:
        mask = ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width - 1, -1, -1)))
        value = builder.shuffle_vector(value, ir.Constant(vec, None), mask)
    builder.store(value, builder.bitcast(builder.gep(dptr, [k]), vec.as_pointer()), align=1)


def _vector_run(builder, dptr, sptr, n, reverse):
    """Emit ``dst[k] = src[k]`` (or ``src[-k]``) for ``k < n``, with no byte loop above 16.

    ``n >= _VECTORS[0]``: whole vectors, then one that overlaps the previous; a
    shorter run goes to :func:`_short_run`.
    """
    i64 = ir.IntType(64)
    widest = _VECTORS[0]
    width = ir.Constant(i64, widest)
    with builder.if_else(builder.icmp_signed(">=", n, width)) as (then, otherwise):
        with then:
            with cgutils.for_range(builder, builder.sdiv(n, width)) as loop:
                _move(builder, dptr, sptr, builder.mul(loop.index, width), widest, reverse)
            rem = builder.srem(n, width)
            with builder.if_then(builder.icmp_signed("!=", rem, ir.Constant(i64, 0))):
                _move(builder, dptr, sptr, builder.sub(n, width), widest, reverse)
        with otherwise:
            _short_run(builder, dptr, sptr, n, reverse, _VECTORS[1:])


def _short_run(builder, dptr, sptr, n, reverse, widths):
    """A run shorter than twice ``widths[0]``: two overlapping vectors of the widest width
    that fits; below the narrowest, a byte loop."""
    if not widths:
        with cgutils.for_range(builder, n) as loop:
            k = builder.neg(loop.index) if reverse else loop.index
            builder.store(builder.load(builder.gep(sptr, [k])), builder.gep(dptr, [loop.index]))
        return
    i64 = ir.IntType(64)
    width = ir.Constant(i64, widths[0])
    with builder.if_else(builder.icmp_signed(">=", n, width)) as (then, otherwise):
        with then:
            _move(builder, dptr, sptr, ir.Constant(i64, 0), widths[0], reverse)
            _move(builder, dptr, sptr, builder.sub(n, width), widths[0], reverse)
        with otherwise:
            _short_run(builder, dptr, sptr, n, reverse, widths[1:])


def _run_codegen(reverse):
    def codegen(context, builder, signature, args):
        dst_v, d0_v, src_v, s0_v, n_v = args
        d_arr = context.make_array(signature.args[0])(context, builder, dst_v)
        s_arr = context.make_array(signature.args[2])(context, builder, src_v)
        dptr = builder.gep(d_arr.data, [d0_v])
        sptr = builder.gep(s_arr.data, [s0_v])
        if reverse:
            _vector_run(builder, dptr, sptr, n_v, True)
        else:
            large = builder.icmp_signed(">", n_v, ir.Constant(ir.IntType(64), _LARGE))
            with builder.if_else(large) as (big, small):
                with big:
                    cgutils.raw_memcpy(builder, dptr, sptr, n_v, 1)
                with small:
                    _vector_run(builder, dptr, sptr, n_v, False)
        return context.get_dummy_value()

    return codegen


@intrinsic
def copy_bytes(typingctx, dst, d0, src, s0, n):  # pragma: no cover - JIT
    """``dst[d0:d0+n] = src[s0:s0+n]`` for 1-d uint8 arrays (no overlap).

    Inline vector moves for row-sized runs (a call to ``memcpy``, or a
    slice assignment, costs more than the copy at 64-byte rows; numba does not
    vectorise a byte loop), ``memcpy`` for long ones. An intrinsic is also
    cacheable (a ctypes ``memcpy`` is not).
    """
    sig = types.void(dst, types.intp, src, types.intp, types.intp)
    return sig, _run_codegen(reverse=False)


@intrinsic
def reverse_bytes(typingctx, dst, d0, src, s_last, n):  # pragma: no cover - JIT
    """``dst[d0 + k] = src[s_last - k]`` for ``k < n``: a vector at a time (a byte shuffle)."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)
    return sig, _run_codegen(reverse=True)


@intrinsic
def fill_bytes(typingctx, dst, d0, value, n):  # pragma: no cover - JIT
    """``dst[d0:d0+n] = value`` for a 1-d uint8 array (``memset``: a numba byte loop with
    computed indices is not vectorised)."""
    sig = types.void(dst, types.intp, types.uint8, types.intp)

    def codegen(context, builder, signature, args):
        dst_v, d0_v, value_v, n_v = args
        d_arr = context.make_array(signature.args[0])(context, builder, dst_v)
        cgutils.memset(builder, builder.gep(d_arr.data, [d0_v]), n_v, value_v)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def sample_key(seed, epoch, sample_id, op, tag):  # pragma: no cover - JIT
    """The random key of one (sample, op, field) in one epoch."""
    k = mix64(np.uint64(seed) ^ _GOLDEN)
    k = mix64(k ^ np.uint64(epoch))
    k = mix64(k ^ np.uint64(sample_id))
    return mix64(k ^ (np.uint64(op) << np.uint64(8)) ^ np.uint64(tag))


@nb.njit(cache=True, nogil=True)
def uniform(key, k):  # pragma: no cover - JIT
    """The k-th uniform double in [0, 1) of ``key``."""
    return np.float64(mix64(key + np.uint64(k + 1) * _GOLDEN) >> np.uint64(11)) * (
        1.0 / 9007199254740992.0
    )


@nb.njit(cache=True, nogil=True)
def _randint(key, k, lo, hi):  # pragma: no cover - JIT
    """Uniform integer in [lo, hi]."""
    return lo + np.int64(math.floor(uniform(key, k) * (hi - lo + 1)))


@nb.njit(cache=True, nogil=True)
def geometry_params(g, seed, epoch, sample_id, tag, height, width, out):  # pragma: no cover
    """Fill ``out[P_SIZE]`` with sample ``sample_id``'s geometry (see module docstring)."""
    key = sample_key(seed, epoch, sample_id, OP_GEOMETRY, 0 if g[G_PAIRED] else tag)
    out[P_HFLIP] = 1.0 if uniform(key, 0) < g[G_HFLIP] else 0.0
    out[P_VFLIP] = 1.0 if uniform(key, 1) < g[G_VFLIP] else 0.0
    out[P_ROT] = _randint(key, 2, 0, 3) if g[G_ROT90] else 0
    y0, x0, rh, rw = 0, 0, height, width
    if g[G_CROP] and g[G_RESIZE]:
        # torchvision's RandomResizedCrop.get_params, with hashed uniforms.
        area = height * width
        log_lo, log_hi = math.log(g[G_RATIO_LO]), math.log(g[G_RATIO_HI])
        found = False
        for attempt in range(10):
            target = area * (
                g[G_SCALE_LO] + uniform(key, 10 + 4 * attempt) * (g[G_SCALE_HI] - g[G_SCALE_LO])
            )
            aspect = math.exp(log_lo + uniform(key, 11 + 4 * attempt) * (log_hi - log_lo))
            w = np.int64(round(math.sqrt(target * aspect)))
            h = np.int64(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                y0 = _randint(key, 12 + 4 * attempt, 0, height - h)
                x0 = _randint(key, 13 + 4 * attempt, 0, width - w)
                rh, rw = h, w
                found = True
                break
        if not found:  # central crop at the nearest allowed ratio
            ratio = width / height
            if ratio < g[G_RATIO_LO]:
                rw, rh = width, np.int64(round(width / g[G_RATIO_LO]))
            elif ratio > g[G_RATIO_HI]:
                rh, rw = height, np.int64(round(height * g[G_RATIO_HI]))
            else:
                rh, rw = height, width
            y0, x0 = (height - rh) // 2, (width - rw) // 2
    elif g[G_CROP]:
        oh, ow, pad = np.int64(g[G_OUT_H]), np.int64(g[G_OUT_W]), np.int64(g[G_PAD])
        y0 = _randint(key, 3, -pad, height + pad - oh)
        x0 = _randint(key, 4, -pad, width + pad - ow)
        rh, rw = oh, ow
    if g[G_TRANS_Y] > 0:
        y0 += _randint(key, 5, -np.int64(g[G_TRANS_Y]), np.int64(g[G_TRANS_Y]))
    if g[G_TRANS_X] > 0:
        x0 += _randint(key, 6, -np.int64(g[G_TRANS_X]), np.int64(g[G_TRANS_X]))
    out[P_Y0], out[P_X0], out[P_RH], out[P_RW] = y0, x0, rh, rw


@nb.njit(cache=True, nogil=True, inline="always")
def _border(i, n, mode):  # pragma: no cover - JIT
    """Index ``i`` mapped into [0, n) by the padding mode; -1 means 'fill'."""
    if 0 <= i < n:
        return i
    if mode == PAD_CONSTANT:
        return -1
    if mode == PAD_EDGE:
        return 0 if i < 0 else n - 1
    if n == 1:
        return 0
    if i < 0:
        i = -i
    if i >= n:
        i = 2 * n - 2 - i
    if 0 <= i < n:  # one reflection covers pads smaller than the image
        return i
    period = 2 * n - 2
    i = abs(i) % period
    return period - i if i >= n else i


@nb.njit(cache=True, nogil=True, inline="always")
def _inverse(y, x, n_h, n_w, rot, fv, fh):  # pragma: no cover - JIT
    """Output pixel -> pixel of the cropped region (undo rot90, then the flips)."""
    if rot == 1:
        y, x = x, n_w - 1 - y
    elif rot == 2:
        y, x = n_h - 1 - y, n_w - 1 - x
    elif rot == 3:
        y, x = n_h - 1 - x, y
    if fv:
        y = n_h - 1 - y
    if fh:
        x = n_w - 1 - x
    return y, x


@nb.njit(cache=True, nogil=True, inline="always")
def _copy_pixel(src, s_row, sx, dst, d, pb, fill):  # pragma: no cover - JIT
    """Copy one pixel (``pb`` bytes) from ``src[s_row + sx*pb]``; ``s_row``/``sx`` < 0: fill."""
    if s_row < 0 or sx < 0:
        for b in range(pb):
            dst[d + b] = fill[b]
    else:
        s = s_row + sx * pb
        for b in range(pb):
            dst[d + b] = src[s + b]


@nb.njit(cache=True, nogil=True)
def _transposed_plane(src, s0, dst, d0, height, width, oh, ow, pb, prm, mode, fill):
    """rot90 by an odd k: rows become columns, so pixel by pixel."""
    fh, fv, rot = prm[P_HFLIP] > 0, prm[P_VFLIP] > 0, np.int64(prm[P_ROT])
    y0, x0 = np.int64(prm[P_Y0]), np.int64(prm[P_X0])
    for y in range(oh):
        for x in range(ow):
            ry, rx = _inverse(y, x, oh, ow, rot, fv, fh)
            sy = _border(y0 + ry, height, mode)
            sx = _border(x0 + rx, width, mode)
            s_row = s0 + sy * width * pb if sy >= 0 else -1
            _copy_pixel(src, s_row, sx, dst, d0 + (y * ow + x) * pb, pb, fill)


@nb.njit(cache=True, nogil=True)
def _row_ends(
    src, s_row, dst, d_row, xa, xb, ow, base, step, width, pb, mode, fill
):  # pragma: no cover - JIT
    """The padded ends of a row, [0, xa) and [xb, ow), pixel by pixel (any mode)."""
    for j in range(xa + ow - xb):
        x = j if j < xa else xb + j - xa
        sx = _border(base + step * x, width, mode)
        d = d_row + x * pb
        for b in range(pb):
            dst[d + b] = fill[b] if sx < 0 else src[s_row + sx * pb + b]


@nb.njit(cache=True, nogil=True)
def _constant_plane(
    src, s0, dst, d0, height, oh, ow, pb, y0, flip_rows, xa, xb, base, step, s_stride, fill
):  # pragma: no cover - JIT
    """The common case of :func:`_geometry_plane`: constant padding, runs that need no
    per-pixel work. Padding is filled in one pass over the plane (when there is any),
    then each in-image row is one run: no per-row branches besides the copy. The
    run geometry (``xa``, ``xb``, ``base``, ``step``) is :func:`_geometry_plane`'s.
    """
    d_stride = ow * pb
    # Output rows y whose source row (y0 + y, or y0 + oh - 1 - y) is inside the image.
    if flip_rows:
        ya, yb = max(0, y0 + oh - height), min(oh, y0 + oh)
    else:
        ya, yb = max(0, -y0), min(oh, height - y0)
    if ya > 0 or yb < oh or xa > 0 or xb < ow:
        if pb == 1:
            fill_bytes(dst, d0, fill[0], oh * d_stride)
        else:
            for k in range(oh * ow):
                for c in range(pb):
                    dst[d0 + k * pb + c] = fill[c]
    n = (xb - xa) * pb
    if n <= 0:
        return
    for y in range(ya, yb):
        sy = y0 + (oh - 1 - y if flip_rows else y)
        s_row, d = s0 + sy * s_stride, d0 + y * d_stride + xa * pb
        if step > 0:
            copy_bytes(dst, d, src, s_row + (base + xa) * pb, n)
        else:
            reverse_bytes(dst, d, src, s_row + base - xa, n)


@nb.njit(cache=True, nogil=True)
def _geometry_plane(src, s0, dst, d0, height, width, oh, ow, pb, prm, mode, fill):
    """One plane, flat bytes from ``src[s0:]`` to ``dst[d0:]``: crop/pad/translate + flips +
    rot90, whole pixels of ``pb`` bytes. Offsets, not slices: a slice is a new array.

    Rows that stay rows are copied as runs (``copy_bytes`` / ``reverse_bytes``,
    inline vector moves); constant padding with byte pixels, or any pixels
    unflipped, takes :func:`_constant_plane`. Reflect/edge padding fills the ends
    of each row pixel by pixel; rot90 by an odd k goes pixel by pixel.
    """
    fh, fv, rot = prm[P_HFLIP] > 0, prm[P_VFLIP] > 0, np.int64(prm[P_ROT])
    if rot == 1 or rot == 3:
        _transposed_plane(src, s0, dst, d0, height, width, oh, ow, pb, prm, mode, fill)
        return
    y0, x0 = np.int64(prm[P_Y0]), np.int64(prm[P_X0])
    # Source x = base + step * x: the in-image part [xa, xb) of every row is one run.
    step = -1 if (rot == 2) != fh else 1
    base = x0 + ow - 1 if step < 0 else x0
    if step > 0:
        xa, xb = max(0, -base), min(ow, width - base)
    else:
        xa, xb = max(0, base - width + 1), min(ow, base + 1)
    xa = min(xa, ow)
    xb = max(xa, xb)
    flip_rows = (rot == 2) != fv
    s_stride, d_stride = width * pb, ow * pb
    if mode == PAD_CONSTANT and (pb == 1 or step > 0):
        _constant_plane(
            src, s0, dst, d0, height, oh, ow, pb, y0, flip_rows, xa, xb, base, step, s_stride, fill
        )
        return
    for y in range(oh):
        sy = _border(y0 + (oh - 1 - y if flip_rows else y), height, mode)
        d_row = d0 + y * d_stride
        if sy < 0:  # the whole row is padding
            for k in range(d_stride):
                dst[d_row + k] = fill[k % pb]
            continue
        s_row = s0 + sy * s_stride
        _row_ends(src, s_row, dst, d_row, xa, xb, ow, base, step, width, pb, mode, fill)
        if step > 0:
            copy_bytes(dst, d_row + xa * pb, src, s_row + (base + xa) * pb, (xb - xa) * pb)
        else:  # pixels of several bytes, reversed
            for x in range(xa, xb):
                s, d = s_row + (base - x) * pb, d_row + x * pb
                for c in range(pb):
                    dst[d + c] = src[s + c]


@nb.njit(cache=True, nogil=True)
def _decode_sample(
    i, indices, rows, ptr_a, ptr_b, mm, out_a, out_b, geo_a, geo_b, g, clock, fill_a, fill_b, prm
):  # pragma: no cover - JIT
    """Sample ``i`` of a batch: see :func:`decode_pairs`."""
    pa, pb = ptr_a[rows[i]], ptr_b[rows[i]]
    if g[G_IDENTITY] > 0:
        copy_bytes(out_a[i].reshape(-1), 0, mm, pa, geo_a[0] * geo_a[1] * geo_a[2] * geo_a[3])
        copy_bytes(out_b[i].reshape(-1), 0, mm, pb, geo_b[0] * geo_b[1] * geo_b[2] * geo_b[3])
        return
    mode = np.int64(g[G_PAD_MODE])
    for t in range(2):
        geo = geo_a if t == 0 else geo_b
        out = out_a if t == 0 else out_b
        fill = fill_a if t == 0 else fill_b
        if t == 0 or not g[G_PAIRED]:
            geometry_params(g, clock[0], clock[1], indices[i], t, geo[1], geo[2], prm)
        plane_in = geo[1] * geo[2] * geo[3]
        start = pa if t == 0 else pb
        dst = out[i].reshape(-1)
        plane_out = dst.shape[0] // geo[0]
        oh, ow = out.shape[2], out.shape[3] // geo[3]
        for plane in range(geo[0]):
            _geometry_plane(
                mm,
                start + plane * plane_in,
                dst,
                plane * plane_out,
                geo[1],
                geo[2],
                oh,
                ow,
                geo[3],
                prm,
                mode,
                fill,
            )


@nb.njit(cache=True, parallel=True, nogil=True)
def decode_pairs(
    indices, rows, ptr_a, ptr_b, mm, out_a, out_b, geo_a, geo_b, g, clock, fill_a, fill_b
):  # pragma: no cover - JIT
    """Decode (and geometrically augment) A and B of every sample, straight from the mapping.

    ``indices`` are the sample ids (they key the randomness); the images of sample
    ``i`` start at ``ptr_x[rows[i]]`` in ``mm``. ``out_x`` are byte arrays
    ``(batch, planes, out_h, out_w * pixel_bytes)``; ``geo_x`` is
    ``(planes, height, width, pixel_bytes)`` of the stored image.
    """
    for i in nb.prange(len(indices)):
        prm = np.empty(P_SIZE, dtype=np.float64)
        _decode_sample(
            i,
            indices,
            rows,
            ptr_a,
            ptr_b,
            mm,
            out_a,
            out_b,
            geo_a,
            geo_b,
            g,
            clock,
            fill_a,
            fill_b,
            prm,
        )


@nb.njit(cache=True, nogil=True)
def decode_pairs_serial(
    indices, rows, ptr_a, ptr_b, mm, out_a, out_b, geo_a, geo_b, g, clock, fill_a, fill_b
):  # pragma: no cover - JIT
    """:func:`decode_pairs` on one thread: no parallel runtime (about 45 MB a process)."""
    prm = np.empty(P_SIZE, dtype=np.float64)
    for i in range(len(indices)):
        _decode_sample(
            i,
            indices,
            rows,
            ptr_a,
            ptr_b,
            mm,
            out_a,
            out_b,
            geo_a,
            geo_b,
            g,
            clock,
            fill_a,
            fill_b,
            prm,
        )


@nb.njit(cache=True, parallel=True, nogil=True)
def resized_crop(indices, src, dst, pc, g, clock, tag, is_int):  # pragma: no cover - JIT
    """Random resized crop (bilinear, align_corners=False) + flips + rot90 + translate.

    ``src``/``dst``: ``(batch, planes, H, W*pc)`` and ``(batch, planes, oh, ow*pc)``,
    uint8 (``is_int``: rounded half up, clipped) or float32. Samples outside the image take
    the nearest edge pixel.
    """
    seed, epoch = clock[0], clock[1]
    height, width = src.shape[2], src.shape[3] // pc
    oh, ow = dst.shape[2], dst.shape[3] // pc
    for i in nb.prange(len(indices)):
        prm = np.empty(P_SIZE, dtype=np.float64)
        geometry_params(g, seed, epoch, indices[i], tag, height, width, prm)
        fh, fv, rot = prm[P_HFLIP] > 0, prm[P_VFLIP] > 0, np.int64(prm[P_ROT])
        y0, x0, rh, rw = prm[P_Y0], prm[P_X0], prm[P_RH], prm[P_RW]
        for y in range(oh):
            for x in range(ow):
                ry, rx = _inverse(y, x, oh, ow, rot, fv, fh)
                fy = min(max(y0 + (ry + 0.5) * rh / oh - 0.5, 0.0), height - 1.0)
                fx = min(max(x0 + (rx + 0.5) * rw / ow - 0.5, 0.0), width - 1.0)
                iy, ix = np.int64(math.floor(fy)), np.int64(math.floor(fx))
                iy1, ix1 = min(iy + 1, height - 1), min(ix + 1, width - 1)
                wy, wx = fy - iy, fx - ix
                for p in range(src.shape[1]):
                    for c in range(pc):
                        v00 = np.float64(src[i, p, iy, ix * pc + c])
                        v01 = np.float64(src[i, p, iy, ix1 * pc + c])
                        v10 = np.float64(src[i, p, iy1, ix * pc + c])
                        v11 = np.float64(src[i, p, iy1, ix1 * pc + c])
                        v = (1.0 - wy) * ((1.0 - wx) * v00 + wx * v01) + wy * (
                            (1.0 - wx) * v10 + wx * v11
                        )
                        if is_int:
                            v = min(max(math.floor(v + 0.5), 0.0), 255.0)
                        dst[i, p, y, x * pc + c] = v


@nb.njit(cache=True, nogil=True, inline="always")
def _normal(key, k):  # pragma: no cover - JIT
    """A standard normal from two hashed uniforms (Box-Muller)."""
    u1 = uniform(key, 2 * k)
    u2 = uniform(key, 2 * k + 1)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


@nb.njit(cache=True, parallel=True, nogil=True)
def photometric(indices, x, cfg, clock, tag, is_int):  # pragma: no cover - JIT
    """In place: brightness, then contrast, then gaussian noise, per sample.

    ``cfg`` = [brightness, b_paired, contrast, c_paired, noise_std, n_paired].
    ``x``: ``(batch, n)`` uint8 (rounded half up, clipped to [0, 255]) or float32.
    """
    seed, epoch = clock[0], clock[1]
    n = x.shape[1]
    for i in nb.prange(len(indices)):
        sid = indices[i]
        kb = sample_key(seed, epoch, sid, OP_BRIGHTNESS, 0 if cfg[1] else tag)
        kc = sample_key(seed, epoch, sid, OP_CONTRAST, 0 if cfg[3] else tag)
        kn = sample_key(seed, epoch, sid, OP_NOISE, 0 if cfg[5] else tag)
        bright = 1.0 + cfg[0] * (2.0 * uniform(kb, 0) - 1.0) if cfg[0] > 0 else 1.0
        contrast = 1.0 + cfg[2] * (2.0 * uniform(kc, 0) - 1.0) if cfg[2] > 0 else 1.0
        mean = 0.0
        if cfg[2] > 0:
            for j in range(n):
                mean += np.float64(x[i, j])
            mean = mean * bright / n
        for j in range(n):
            v = np.float64(x[i, j]) * bright
            if cfg[2] > 0:
                v = (v - mean) * contrast + mean
            if cfg[4] > 0:
                v += cfg[4] * _normal(kn, j)
            if is_int:
                v = min(max(math.floor(v + 0.5), 0.0), 255.0)
            x[i, j] = v
