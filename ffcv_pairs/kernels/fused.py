"""A and B of a batch of uint8 images, every CPU op fused: geometry, photometric, output.

Per sample and field, straight from the mapping (the page cache): the shared
geometry (a plain copy, the crop/flip/turn moves of :mod:`planes`, or the
resized crop of :mod:`resize`, which reads only the region's rows), then the
photometric ops and the output dtype in one vectorised pass
(:func:`~ffcv_pairs.kernels.pixels.finish_image`). Without geometry the pass
reads the stored image in place; otherwise the geometry writes a per-thread
staging image that stays in cache. So each byte is read from memory once and each
output written once. Contrast needs the image's mean first: from the file's stored
statistics when the geometry keeps every pixel (flips and quarter turns) and no value
clamps (:func:`~ffcv_pairs.kernels.photometric.stored_mean`), otherwise from a pass of
its own over the image.
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from .decode import BatchRefs, FieldPair, StoredImage
from .geometry import GeometryConfig, geometry_params, reduction, scaled_size
from .photometric import (
    ChannelPlanes,
    PhotometricConfig,
    PixelDraw,
    draw_pixels,
    image_mean,
    stored_mean,
)
from .pixels import OUT_UINT8, OutputSpec, PixelWork, new_pixel_work
from .pixels import finish_image as finish
from .planes import PlaneMove, move_plane
from .resize import ResizeShape, ResizeWork, new_work, resize_sample

__all__ = ["FusedOps", "fused_pairs", "fused_pairs_serial"]


class FusedOps(NamedTuple):
    """What the ops need besides the geometry and photometric configs: ``photometric`` (any
    photometric op is on), the output ``kind`` (``OUT_*`` of :mod:`pixels`), ``norm`` float32
    ``(2, 2, channels)`` (per field: mean and 1/std), the noise ``table``, ``fills``
    (uint8 ``(2, pixel)``: constant padding of A and of B), the ``clock``
    (``[seed, epoch]``, read by reference: a new epoch needs no recompiling),
    ``stats`` (read-only uint32 ``(samples, 2, 4)``: the file's image statistics, or no
    rows), ``stats_use`` (bool ``(2,)``: field ``t``'s contrast mean may come from
    ``stats[sample, t]``), ``downscale`` (bool ``(2,)``: field ``t`` was decoded at the
    sample's :func:`~ffcv_pairs.kernels.geometry.reduction`, a JPEG under a resized crop)
    and ``threads``: the loader's threads; :func:`fused_pairs`
    splits a batch into ``4 * threads`` parts (each allocates its scratch once; more
    parts than threads keep a thread that another process slows down from holding up
    the batch)."""

    photometric: bool
    kind: int
    norm: np.ndarray
    table: np.ndarray
    fills: np.ndarray
    clock: np.ndarray
    stats: np.ndarray
    stats_use: np.ndarray
    downscale: np.ndarray
    threads: int


class _Job(NamedTuple):
    """One batch: the arguments of :func:`fused_pairs`, regrouped inside its parallel loop."""

    batch: BatchRefs
    mm: np.ndarray
    outs: FieldPair  # of the output arrays, as bytes
    stored: FieldPair  # of StoredImage
    geo: GeometryConfig
    photo: PhotometricConfig
    ops: FusedOps


class _FieldWork(NamedTuple):
    stage: np.ndarray
    resize: ResizeWork
    pixels: PixelWork


@nb.njit(cache=True, nogil=True, inline="always")
def _resize_shape(image, geo):  # pragma: no cover - JIT
    return ResizeShape(
        image.planes, image.height, image.width, image.pixel_bytes, geo.out_h, geo.out_w, True
    )


@nb.njit(cache=True, nogil=True, inline="always")
def _channels(image, geo):  # pragma: no cover - JIT
    return ChannelPlanes(image.planes, image.pixel_bytes, geo.out_h * geo.out_w * image.pixel_bytes)


@nb.njit(cache=True, nogil=True)
def _field_work(image, geo):  # pragma: no cover - JIT
    stage = np.empty(image.planes * geo.out_h * geo.out_w * image.pixel_bytes, np.uint8)
    resize = new_work(_resize_shape(image, geo), stage)
    return _FieldWork(stage, resize, new_pixel_work(_channels(image, geo)))


@nb.njit(cache=True, nogil=True)
def _geometry(job, start, t, image, place, work, denom, resizing):  # pragma: no cover - JIT
    """Field ``t``'s stored ``image`` at ``job.mm[start:]`` -> ``work.stage``, moved by
    ``place`` (``denom``: the image is reduced that many times, see :func:`_source`;
    ``resizing``: see :func:`fused_pairs`)."""
    geo = job.geo
    if resizing is not None and geo.resize:
        rs = _resize_shape(image, geo)
        resize_sample(job.mm, start, work.stage, 0, rs, place, work.resize, denom)
        return
    p = image.pixel_bytes
    mv = PlaneMove(image.height, image.width, geo.out_h, geo.out_w, p, geo.pad_mode)
    plane_in, plane_out = image.height * image.width * p, geo.out_h * geo.out_w * p
    fill = job.ops.fills[t]
    for k in range(image.planes):
        move_plane(job.mm, start + k * plane_in, work.stage, k * plane_out, mv, place, fill)


@nb.njit(cache=True, nogil=True, inline="always")
def _source(job, t, place):  # pragma: no cover - JIT
    """Field ``t``'s stored image as the kernel finds it, and by how much it is reduced: a
    JPEG decoded at the draw's :func:`~ffcv_pairs.kernels.geometry.reduction` is
    ``ceil(size / denom)`` a side."""
    image = job.stored[t]
    if not (job.geo.resize and job.ops.downscale[t]):
        return image, np.int64(1)
    d = reduction(job.geo, place)
    h, w = scaled_size(image.height, image.width, d)
    return StoredImage(image.planes, h, w, image.pixel_bytes), d


@nb.njit(cache=True, nogil=True)
def _fused_sample(i, job, works, float_out, resizing):  # pragma: no cover - JIT
    """Sample ``i`` of the batch: both fields, see :func:`fused_pairs`."""
    batch, geo, ops, clock = job.batch, job.geo, job.ops, job.ops.clock
    sid, row = batch.ids[i], batch.rows[i]
    place = geometry_params(geo, clock, sid, 0, job.stored.a.height, job.stored.a.width)
    for t in range(2):
        stored, work, out = job.stored[t], works[t], job.outs[t][i]
        start = batch.ptr_a[row] if t == 0 else batch.ptr_b[row]
        if t == 1 and not geo.paired:
            place = geometry_params(geo, clock, sid, 1, stored.height, stored.width)
        image, denom = _source(job, t, place)
        chans = _channels(image, geo)
        if resizing is not None and geo.resize and ops.kind == OUT_UINT8 and not ops.photometric:
            rs = _resize_shape(image, geo)
            resize_sample(job.mm, start, out, 0, rs, place, work.resize, denom)
            continue
        if geo.identity:
            x = job.mm[start : start + chans.planes * chans.plane_size]
        else:
            _geometry(job, start, t, image, place, work, denom, resizing)
            x = work.stage[:]
        draw = PixelDraw(1.0, 1.0, 0.0, np.uint64(0))
        if ops.photometric:
            draw = draw_pixels(job.photo, clock, sid, t)
        mean = -1.0 if job.photo.contrast > 0 else 0.0
        if mean < 0.0 and ops.stats_use[t]:
            mean = stored_mean(ops.stats[sid, t], chans, draw.bright)
        if mean < 0.0:
            mean = image_mean(x, chans, draw.bright, True)
        spec = OutputSpec(ops.kind, ops.norm[t], ops.table)
        finish(x, out, chans, draw, mean, spec, work.pixels, float_out)


@nb.njit(cache=True, nogil=True, inline="always")
def _fused_range(job, first, last, float_out, resizing, every_op):  # pragma: no cover - JIT
    """Samples ``first`` to ``last`` of the batch, every op; or, where ``every_op`` is None,
    the resize branch alone (the pipeline is a resized crop to uint8 and nothing else: the
    rest is pruned from the compile). The inner test prunes that branch where ``resizing``
    is None."""
    if every_op is None:
        if resizing is not None:
            _resized_range(job, first, last)
        return
    works = _works(job)
    for i in range(first, last):
        _fused_sample(i, job, works, float_out, resizing)


@nb.njit(cache=True, nogil=True, inline="always")
def _works(job):  # pragma: no cover - JIT
    """A thread's scratch for :func:`_fused_sample`."""
    return FieldPair(_field_work(job.stored.a, job.geo), _field_work(job.stored.b, job.geo))


@nb.njit(cache=True, parallel=True, nogil=True)
def fused_pairs(
    batch, mm, outs, stored_a, stored_b, geo, photo, ops, float_out, resizing, every_op
):  # pragma: no cover - JIT
    """Decode and augment A and B of every sample of ``batch``.

    ``float_out`` (None: the output is uint8), ``resizing`` (None: no resized crop) and
    ``every_op`` (None: a resized crop to uint8 is the only op) prune the ops a pipeline
    does not use before numba types them (``x is None`` branches on a ``None`` argument are
    removed), so such a pipeline's kernel compiles without them: the demo's augmentation
    22 s -> 13 s of one core; a resized crop alone compiles the resize branch only. Any
    other value keeps them.

    Args:
        batch: :class:`~ffcv_pairs.kernels.decode.BatchRefs`.
        mm: The file's bytes (the mapping, or the process cache's slots).
        outs: :class:`~ffcv_pairs.kernels.decode.FieldPair` of ``(batch, output bytes)``
            uint8 arrays: the output's bytes, whatever its dtype (``ops.kind``: uint8, float32,
            or the bits of float16 or bfloat16), so one compiled kernel serves every dtype.
        stored_a, stored_b: :class:`~ffcv_pairs.kernels.decode.StoredImage` of the stored uint8
            images (``pixel_bytes``: channels per pixel).
        geo: :class:`~ffcv_pairs.kernels.geometry.GeometryConfig`, ``out_h``/``out_w`` the
            output size (crop or not).
        photo: :class:`~ffcv_pairs.kernels.photometric.PhotometricConfig`.
        ops: :class:`FusedOps`.
        float_out, resizing, every_op: None where the pipeline has no float output, no
            resized crop, nothing but a resized crop to uint8.
    """
    # numba's parallel loop takes arrays and flat named tuples that are arguments, but
    # not tuples of arrays nor nested named tuples: unpack here, regroup inside the loop.
    ids, rows, ptr_a, ptr_b = batch.ids, batch.rows, batch.ptr_a, batch.ptr_b
    out_a, out_b = outs.a, outs.b
    photometric, kind, norm, table, fills, clock, stats, stats_use, downscale, threads = ops
    n = len(ids)
    chunks = max(1, min(n, 4 * threads))
    for t in nb.prange(chunks):
        job = _Job(
            BatchRefs(ids, rows, ptr_a, ptr_b),
            mm,
            FieldPair(out_a, out_b),
            FieldPair(stored_a, stored_b),
            geo,
            photo,
            FusedOps(
                photometric, kind, norm, table, fills, clock, stats, stats_use, downscale, threads
            ),
        )
        _fused_range(job, t * n // chunks, (t + 1) * n // chunks, float_out, resizing, every_op)


@nb.njit(cache=True, nogil=True)
def fused_pairs_serial(
    batch, mm, outs, stored_a, stored_b, geo, photo, ops, float_out, resizing, every_op
):  # pragma: no cover
    """:func:`fused_pairs` on one thread (no parallel runtime)."""
    job = _Job(batch, mm, outs, FieldPair(stored_a, stored_b), geo, photo, ops)
    _fused_range(job, 0, len(batch.ids), float_out, resizing, every_op)


# A resized crop (and flips or turns) to uint8 with no photometric op, the common training
# pipeline, is one branch of the fused kernel; with ``every_op`` None the kernel holds only
# this, so it compiles in a fraction of the time and gives the same bytes.
@nb.njit(cache=True, nogil=True)
def _resized_range(job, first, last):  # pragma: no cover - JIT
    """Samples ``first`` to ``last`` of the batch, the resized crop alone (see
    :func:`_fused_range`)."""
    batch, geo, clock = job.batch, job.geo, job.ops.clock
    like = np.empty(0, np.uint8)
    works = FieldPair(
        new_work(_resize_shape(job.stored.a, geo), like),
        new_work(_resize_shape(job.stored.b, geo), like),
    )
    for i in range(first, last):
        sid, row = batch.ids[i], batch.rows[i]
        place = geometry_params(geo, clock, sid, 0, job.stored.a.height, job.stored.a.width)
        for t in range(2):
            start = batch.ptr_a[row] if t == 0 else batch.ptr_b[row]
            if t == 1 and not geo.paired:
                stored = job.stored[t]
                place = geometry_params(geo, clock, sid, 1, stored.height, stored.width)
            image, denom = _source(job, t, place)
            rs = _resize_shape(image, geo)
            resize_sample(job.mm, start, job.outs[t][i], 0, rs, place, works[t], denom)
