"""The ``write`` command's options: flags over ``--config`` over defaults, each checked
as :func:`~ffcv_pairs.write.writer.write_pairs` checks it, naming its flag or the
config file."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._checks import integer, one_of, optional
from ..format import layout
from . import arguments
from .parts import check_part
from .source_kinds import SOURCE_KINDS, renamed_kind

__all__ = ["WRITE_KEYS", "merge_write_config"]

_WRITE_DEFAULTS: dict[str, object] = {"source_kind": "auto", "page_size": "8MiB"}
WRITE_KEYS = (
    "src_dir",
    "out_dir",
    "split",
    "source_kind",
    "workers",
    "limit",
    "page_size",
    "store_dtype",
    "quantize",
    "range",
    "codec",
    "quality",
    "shuffle",
    "part",
    "append_to",
)


def _directory(name: str, value: Any) -> Path:
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a directory, got {value!r} ({type(value).__name__})")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name} {path}: is a file, not a directory")
    return path


def _manifest_file(name: str, value: Any) -> Path | None:
    """None, or the path of a dataset manifest to append to: ``<name>.json``."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path, got {value!r} ({type(value).__name__})")
    path = Path(value)
    if path.suffix != ".json" or path.name.endswith(".beton.json"):
        raise ValueError(
            f"{name} {path}: a dataset manifest is named <name>.json (not a .beton's sidecar "
            f"<file>.beton.json)"
        )
    if path.is_dir():
        raise ValueError(f"{name} {path}: is a directory, not a dataset manifest")
    return path


def _read_config(path: Path) -> Any:
    """The YAML in ``path``; a missing file or bad YAML is one line naming the file (and
    the line and column of the mistake)."""
    import yaml

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"--config {path}: no such file") from None
    except OSError as e:
        raise ValueError(f"--config {path}: cannot read it ({e.strerror or e})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(f"{where}: not valid YAML: {problem}") from None


def _splits(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise ValueError(f"{name} must be split names (non-empty strings), got {value!r}")
    return value


def _write_option(key: str, name: str, value: Any) -> Any:
    """A ``write`` option from a flag (a string) or ``--config`` (any YAML value), checked
    as :func:`~ffcv_pairs.write.writer.write_pairs` checks it; a refusal is a ValueError
    naming ``name`` (one line, exit status 2)."""
    if isinstance(value, str) and key in ("workers", "limit", "shuffle", "quality"):
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if isinstance(value, str) and key == "page_size":
        try:
            value = layout.parse_size(value)
        except (ValueError, OverflowError) as e:
            raise ValueError(f"{name}: {e}") from None
    checks: dict[str, Callable[[str, Any], Any]] = {
        "src_dir": _directory,
        "out_dir": _directory,
        "split": _splits,
        "source_kind": lambda n, v: one_of(n, v, SOURCE_KINDS),
        "workers": arguments.check_workers,
        "limit": lambda n, v: optional(integer)(n, v, 1),
        "page_size": arguments.check_page_size,
        "store_dtype": arguments.check_store_dtype,
        "quantize": lambda n, v: optional(one_of)(n, v, ("uint8",)),
        "range": arguments.parse_range,
        "codec": lambda n, v: v,  # checked with quality, below
        "quality": lambda n, v: optional(integer)(n, v, 1, 100),
        "shuffle": arguments.check_shuffle_seed,
        "part": check_part,
        "append_to": _manifest_file,
    }
    try:
        return checks[key](name, value)
    except TypeError as e:
        raise ValueError(str(e)) from None


def _check_append(args: argparse.Namespace) -> None:
    """``--append-to`` appends one whole shard of one split."""
    if args.append_to is None:
        return
    if args.part is not None:
        raise ValueError(
            f"--append-to {args.append_to} goes without --part: append one whole shard, or "
            f"write every part and list them with `ffcv-pairs merge`"
        )
    if len(args.split) != 1:
        raise ValueError(
            f"--append-to {args.append_to} appends one split's shard: give one --split, got "
            f"{len(args.split)} ({', '.join(args.split)})"
        )


def merge_write_config(args: argparse.Namespace) -> argparse.Namespace:
    """Command-line flags over ``--config`` over defaults; each checked, naming its flag
    or the config file."""
    file: dict[str, object] = {}
    if args.config is not None:
        loaded = _read_config(args.config) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config}: expected a mapping of write options")
        if "layout" in loaded:  # the old name of source_kind
            old = loaded.pop("layout")
            where = f"layout in {args.config}"
            loaded.setdefault("source_kind", renamed_kind("auto", old, where, "source_kind"))
        unknown = sorted(set(loaded) - set(WRITE_KEYS))
        if unknown:
            raise ValueError(
                f"{args.config}: unknown option(s) {unknown}; known: {list(WRITE_KEYS)}"
            )
        file = loaded
    if args.layout is not None:
        args.source_kind = renamed_kind(args.source_kind, args.layout, "--layout", "--source-kind")
    from_file = {key for key in file if getattr(args, key) is None}
    for key in WRITE_KEYS:
        if getattr(args, key) is None:
            setattr(args, key, file.get(key, _WRITE_DEFAULTS.get(key)))
    if isinstance(args.split, str):
        args.split = [args.split]
    for key in ("src_dir", "out_dir", "split"):
        if not getattr(args, key):
            raise ValueError(f"missing {key} (give it on the command line or in --config)")
    for key in WRITE_KEYS:
        flag = key.upper() if key.endswith("_dir") else f"--{key.replace('_', '-')}"
        name = f"{key} in {args.config}" if key in from_file else flag
        setattr(args, key, _write_option(key, name, getattr(args, key)))
    arguments.check_quantize("--quantize", args.quantize, "--range", args.range, args.store_dtype)
    arguments.check_codec("--codec", args.codec, "--quality", args.quality)
    _check_append(args)
    return args
