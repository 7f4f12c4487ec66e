"""The checks of :func:`~ffcv_pairs.write.writer.write_pairs`'s arguments, where they enter.

Each names the argument (the ``write`` command passes its flag's name, ``--workers``),
the value given and what is allowed, and returns the value in its plain form; see
:mod:`ffcv_pairs._checks` for the shared ones.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, cast

from .._checks import integer, number, one_of, optional, sequence_of, shown
from ..format.layout import MAX_PAGE_SIZE, MIN_PAGE_SIZE
from ..format.quantization import check_range
from ..format.schema import Jpeg, PairSchema, Quantization

__all__ = [
    "MAX_WORKERS",
    "SHUFFLE_SEED_LIMIT",
    "STORE_DTYPES",
    "WORKERS_PER_CPU",
    "StoreDtype",
    "check_codec",
    "check_out_path",
    "check_page_size",
    "check_quantize",
    "check_shuffle_seed",
    "check_store_dtype",
    "check_workers",
    "parse_range",
    "worker_limit",
]

StoreDtype = Literal["uint8", "float16"]
STORE_DTYPES: tuple[str, ...] = ("uint8", "float16")
#: Worker processes beyond this many per CPU only add memory and start-up time.
WORKERS_PER_CPU = 4
#: ... and never more than this many, whatever the machine.
MAX_WORKERS = 1024
#: Shuffle seeds key a 64-bit hash: ``0 <= seed < 2**64``.
SHUFFLE_SEED_LIMIT = 2**64


def worker_limit() -> int:
    """The most worker processes accepted on this machine."""
    return min(MAX_WORKERS, WORKERS_PER_CPU * (os.cpu_count() or 1))


def check_workers(name: str, value: Any) -> int | None:
    """None (all cores), or a count from 1 to :func:`worker_limit`."""
    if value is None:
        return None
    workers, most = integer(name, value, least=1), worker_limit()
    if workers > most:
        raise ValueError(
            f"{name} must be at most {most} ({WORKERS_PER_CPU} per CPU of the "
            f"{os.cpu_count()} here, {MAX_WORKERS} at most), got {workers}"
        )
    return workers


def check_page_size(name: str, value: Any) -> int:
    """A power of two from :data:`MIN_PAGE_SIZE` (4 KiB) to :data:`MAX_PAGE_SIZE` (2 GiB)."""
    size = integer(name, value)
    if not MIN_PAGE_SIZE <= size <= MAX_PAGE_SIZE or size & (size - 1):
        raise ValueError(
            f"{name} must be a power of two from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE} bytes "
            f"(4 KiB to 2 GiB), got {size}"
        )
    return size


def check_store_dtype(name: str, value: Any) -> StoreDtype | None:
    """None (the source's dtype), ``"uint8"`` or ``"float16"``."""
    return cast("StoreDtype | None", optional(one_of)(name, value, STORE_DTYPES))


def check_quantize(
    name: str, value: Any, range_name: str, value_range: Any, store_dtype: str | None
) -> Quantization | None:
    """None, or ``"uint8"`` with a range ``(lo, hi)`` of finite numbers, ``lo < hi``, that
    float32 resolves (see :class:`~ffcv_pairs.format.quantization.Quantization`), and no
    store dtype (a quantization is the store dtype)."""
    kind = optional(one_of)(name, value, ["uint8"])
    if kind is None:
        if value_range is not None:
            raise ValueError(f"{range_name} applies to {name} uint8; got {range_name} alone")
        return None
    if value_range is None:
        raise ValueError(f"{name} uint8 needs {range_name} LO,HI: the floats' range, e.g. 0,1")
    if store_dtype is not None:
        raise ValueError(f"{name} uint8 and store dtype {store_dtype!r}: choose one")
    lo, hi = sequence_of(range_name, value_range, number, length=2)
    if not lo < hi:
        raise ValueError(
            f"{range_name} must be two finite numbers LO < HI, got {shown(value_range)}"
        )
    check_range(lo, hi, range_name)
    return Quantization(lo, hi)


def check_codec(name: str, value: Any, quality_name: str, quality: Any) -> dict[str, Jpeg]:
    """The image fields to store as JPEG, with their :class:`Jpeg`: ``codec`` is None or
    ``"raw"`` (none), ``"jpeg"`` (A and B), or per field: ``{A: "jpeg", B: "raw"}``
    or ``"A=jpeg,B=raw"``; ``quality`` 1-100, default 90, only with a JPEG field."""
    fields = PairSchema.IMAGE_FIELDS
    if value is None or (isinstance(value, str) and "=" not in value):
        kind = optional(one_of)(name, value, ["raw", "jpeg"])
        chosen = dict.fromkeys(fields, kind or "raw")
    else:
        if isinstance(value, str):
            given = [part.split("=") for part in value.split(",")]
            if any(len(part) != 2 for part in given):
                wanted = "raw, jpeg or A=jpeg,B=raw"
                raise ValueError(f"{name} must be {wanted}, got {value!r}")
            named = [field for field, _ in given]
            twice = sorted({field for field in named if named.count(field) > 1})
            if twice:
                raise ValueError(
                    f"{name} {value}: gives {' and '.join(twice)} more than once; give each "
                    f"field once"
                )
            value = dict(given)
        if not isinstance(value, dict) or not set(value) <= set(fields):
            raise ValueError(
                f"{name} per field must map {' and/or '.join(fields)} to raw or jpeg, got {value!r}"
            )
        chosen = {f: one_of(f"{name}[{f}]", value.get(f, "raw"), ["raw", "jpeg"]) for f in fields}
    jpeg = [f for f in fields if chosen[f] == "jpeg"]
    if quality is not None and not jpeg:
        raise ValueError(f"{quality_name} applies to {name} jpeg; got {quality_name} alone")
    q = 90 if quality is None else integer(quality_name, quality, 1, 100)
    return {f: Jpeg(q) for f in jpeg}


def parse_range(name: str, value: Any) -> tuple[float, float] | None:
    """``"0,1"`` (a flag) or two numbers (a config file) -> ``(0.0, 1.0)``; None passes."""
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else value
    try:
        lo, hi = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be LO,HI (two numbers, e.g. 0,1), got {value!r}") from None
    return lo, hi


def check_shuffle_seed(name: str, value: Any) -> int | None:
    """None (source order), or an integer in ``[0, 2**64)``."""
    return optional(integer)(name, value, 0, SHUFFLE_SEED_LIMIT - 1)


def check_out_path(name: str, value: Any) -> Path:
    """A ``str`` or ``os.PathLike`` naming a file (not a directory, not empty).

    Raises:
        TypeError: not a path (bytes are refused too). ValueError: empty, holding a NUL
            byte, naming no file (``"."``, ``"/"``) or an existing directory, or inside
            a file (its nearest existing parent is not a directory).
    """
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        raise TypeError(
            f"{name} must be a path (str or os.PathLike), got {value!r} ({type(value).__name__})"
        )
    path = Path(text)
    if not text or "\0" in text or path.name in ("", ".", ".."):
        raise ValueError(f"{name} must name a file, got {text!r}")
    if path.is_dir():
        raise ValueError(f"{name} must name a file, got {text!r}, which is a directory")
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise ValueError(f"{name} {text!r}: {folder} is a file, not a directory")
    return path
