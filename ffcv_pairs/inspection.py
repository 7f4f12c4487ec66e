"""Human views of a `.beton`: a text summary and a PNG grid of pairs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .augment.config import image_axes
from .format.integrity import load_manifest
from .format.reader import PairReader
from .format.schema import ArraySpec, PairSchema, Quantization
from .format.sidecar import sidecar_to_read
from .write.arguments import check_out_path
from .write.compare import stored_image
from .write.shuffle import Permutation

__all__ = ["NONFINITE_RGB", "Preview", "label_histogram", "preview_png", "summary"]

NONFINITE_RGB = (255, 0, 255)  # magenta: a pixel with a NaN or an infinity in its channels


class Preview(NamedTuple):
    """What :func:`preview_png` drew.

    Attributes:
        path: The PNG written.
        pairs: Pairs drawn: ``min(k, num_samples)``.
        nonfinite: Pixels drawn :data:`NONFINITE_RGB` (a NaN or infinity in a shown channel).
    """

    path: Path
    pairs: int
    nonfinite: int


def label_histogram(reader: PairReader) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, counts)`` over the whole file."""
    labels = np.asarray(reader.metadata[f"f{reader.field_index(PairSchema.LABEL_FIELD)}"])
    return np.unique(labels, return_counts=True)


def _order_line(n: int, seed: int, show: int = 4) -> str:
    """``--shuffle`` files: which source sample each of the first positions holds."""
    head = np.arange(min(n, show))
    pairs = ", ".join(
        f"{j}<-{i}" for j, i in zip(head.tolist(), Permutation(n, seed).source_of(head).tolist())
    )
    more = ", ..." if n > show else ""
    return f"order:        shuffled, seed {seed} (position<-source index: {pairs}{more})"


def _quantized(spec: ArraySpec, q: Quantization) -> str:
    """What a quantized field holds and what the loader hands back (``dequantize=True``)."""
    bound = "" if spec.jpeg is not None else f" (max abs error {q.max_error:.3g})"
    return (
        f"uint8 codes {list(spec.shape)} ({spec.nbytes} bytes), quantized range "
        f"[{q.lo:g}, {q.hi:g}] -> float32 out{bound}"
    )


def summary(reader: PairReader, max_labels: int = 20) -> str:
    """Header, fields, sizes and the label histogram, as printed by ``inspect``."""
    header = reader.header
    manifest = load_manifest(reader)
    lines = [
        f"file:         {reader.path}",
        f"format:       FFCV .beton v{int(header['version'])}, {int(header['num_fields'])} fields",
        f"samples:      {reader.num_samples}",
        f"page size:    {int(reader.page_size)} bytes",
        f"file size:    {reader.file_size} bytes ({reader.file_size / 2**20:.1f} MiB)",
        "fields:",
    ]
    for name, handler in reader.handlers.items():
        if name in PairSchema.IMAGE_FIELDS:
            spec = reader.schema.spec(name)
            detail = f"{spec.dtype} {list(spec.shape)} ({spec.nbytes} bytes)"
            if spec.quantized is not None:
                detail = _quantized(spec, spec.quantized)
            if spec.jpeg is not None:
                mean = float(np.mean(reader.stored_bytes(name)))
                detail += f" as {spec.jpeg.describe()}: {mean:,.0f} bytes on average"
        else:
            field = reader.schema.values[name]
            detail = (
                f"{field.dtype} scalar (in the metadata table)"
                if field.is_scalar
                else f"{field.dtype} {list(field.shape)} ({field.nbytes} bytes)"
            )
        lines.append(f"  {name:<8} {type(handler).__name__:<14} {detail}")
    if manifest is None:
        lines.append(
            f"manifest:     none (no sidecar at {sidecar_to_read(reader.path)}): "
            "checksums unavailable"
        )
    else:
        lines.append(
            f"manifest:     {len(manifest.crcs())} block checksums, {manifest.digest_kind} "
            f"{manifest.digest[:16]}.., written {manifest.created} by ffcv_pairs "
            f"{manifest.writer_version}"
        )
        lines.append(f"source:       {manifest.source}")
        if manifest.shuffle_seed is not None:
            lines.append(_order_line(reader.num_samples, manifest.shuffle_seed))
    if reader.schema.label.dtype != "int64" or not reader.schema.label.is_scalar:
        return "\n".join(lines)  # a histogram only of integer labels
    values, counts = label_histogram(reader)
    lines.append(f"labels:       {len(values)} distinct")
    order = np.argsort(-counts, kind="stable")[:max_labels]
    width = max(len(str(int(v))) for v in values[order])
    for i in order:
        share = counts[i] / reader.num_samples
        bar = "#" * max(1, round(40 * share))
        lines.append(f"  {int(values[i]):>{width}}  {int(counts[i]):>9}  {share:6.1%}  {bar}")
    if len(values) > max_labels:
        lines.append(f"  ... {len(values) - max_labels} more labels")
    return "\n".join(lines)


def _to_rgb(img: np.ndarray, channels: str) -> tuple[np.ndarray, int]:
    """Any stored image -> (uint8 HxWx3 for display, pixels drawn :data:`NONFINITE_RGB`).

    The first 3 channels are shown; values outside [0, 255] (or all within [0, 1]) are
    min-max scaled over the finite values only, so one NaN or infinity cannot turn the
    whole image black: a pixel with one in any shown channel is drawn magenta.
    """
    if channels == "first":
        img = np.moveaxis(img, 0, -1)
    elif channels == "none":
        img = img[..., None]
    img = img[..., :3].astype(np.float64)
    if img.shape[-1] == 2:
        img = np.concatenate([img, img[..., :1]], axis=-1)
    if img.shape[-1] == 1:
        img = np.repeat(img, 3, axis=-1)
    finite = np.isfinite(img)
    bad = ~finite.all(axis=-1)
    values = img[finite]
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    img = np.where(finite, img, lo)
    if not (lo >= 0 and hi <= 255 and hi > 1):
        img = (img - lo) / (hi - lo if hi > lo else 1.0) * 255
    rgb = img.clip(0, 255).astype(np.uint8)
    rgb[bad] = NONFINITE_RGB
    return rgb, int(bad.sum())


def preview_png(reader: PairReader, k: int, out: str | os.PathLike[str], seed: int = 0) -> Preview:
    """Write a grid of ``min(k, num_samples)`` random pairs (A | B per row, in file order)
    as a PNG; NaN and infinities are drawn :data:`NONFINITE_RGB`.

    Raises:
        ValueError: ``k`` is below 1, or ``out`` is a directory (or inside a file).
    """
    from PIL import Image

    if k < 1:
        raise ValueError(f"preview_png: k must be at least 1 (pairs to draw), got {k}")
    out = check_out_path("preview_png: out", out)
    n = reader.num_samples
    ids = np.sort(np.random.default_rng(seed).choice(n, size=min(k, n), replace=False))
    rows = []
    nonfinite = 0
    for sid in ids.tolist():
        pair = []
        for name in PairSchema.IMAGE_FIELDS:
            spec = reader.schema.spec(name)
            img = stored_image(reader, name, sid)
            try:
                channels = image_axes(spec).channels
            except ValueError:
                channels = "first"
            rgb, marked = _to_rgb(np.asarray(img), channels)
            pair.append(rgb)
            nonfinite += marked
        h = max(p.shape[0] for p in pair)
        pad = [np.pad(p, ((0, h - p.shape[0]), (0, 4), (0, 0)), constant_values=255) for p in pair]
        rows.append(np.concatenate(pad, axis=1))
    w = max(r.shape[1] for r in rows)
    grid = np.concatenate(
        [np.pad(r, ((0, 4), (0, w - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    )
    scale = max(1, 96 // max(1, max(r.shape[0] for r in rows)))
    image = Image.fromarray(grid)
    if scale > 1:
        image = image.resize(
            (grid.shape[1] * scale, grid.shape[0] * scale), Image.Resampling.NEAREST
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG")  # whatever the name's suffix
    return Preview(out, len(ids), nonfinite)
