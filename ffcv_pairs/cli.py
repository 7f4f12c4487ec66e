"""Command-line fronts: write, inspect and verify `.beton` files.

Commands (``ffcv-pairs`` is installed by ``pip install``; ``python -m ffcv_pairs`` is the
same)::

    ffcv-pairs write data/pt out --split train --split val --workers 2
    ffcv-pairs inspect out/train.beton --preview 8 --out preview.png
    ffcv-pairs verify out/train.beton --against data/pt --samples 100
    ffcv-pairs warmup --augment configs/ddp_4gpu.yaml --codec jpeg
    python writers/write_beton.py data/pt out --split train --split val --workers 2
    python writers/write_beton.py --config configs/write.yaml --limit 1000
    python -m ffcv_pairs write data/pt out --split train --source-kind batched --limit 1000
    python -m ffcv_pairs write data/pt out --split train --shuffle 1 --resume
    python -m ffcv_pairs inspect out/train.beton --preview 8 --out preview.png
    python -m ffcv_pairs verify out/train.beton --against data/pt --samples 100
    ffcv-pairs merge out/train.part-*.beton -o out/train.json  # after write --part K/N
    ffcv-pairs write data/new out --split train --append-to out/train.json
    ffcv-pairs write data/pt out --split train --to s3://bucket/pairs  # s3://bucket/pairs/train.json

User errors print one line, ``error: <file>: <what is wrong>``, on stderr and
exit with status 2; there is no traceback. So does a writer whose worker died;
SIGTERM and Ctrl-C exit with 128 + the signal. Either way the message says when
``--resume`` can continue from the kept ``.partial``.

``verify`` exits 0 when everything it checked matches, 1 at the first bad block or
sample (which it names), 2 on misuse (a path that is missing or a directory, a bad
flag) and 3 when it could check nothing: the file has no sidecar ``<file>.json`` and
no ``--against`` was given.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from .format.objectstore import path_or_url

__all__ = ["main", "write_main"]

EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_UNCHECKED = 3  # verify: no sidecar and no --against, so nothing was checked

_VERIFY_HELP = (
    "Check a .beton against the checksums in its sidecar <file>.json and, with --against, "
    "compare samples with their sources. Exit status: 0 everything checked matches; "
    "1 a mismatch (named); 2 misuse (missing path, directory, bad flag); "
    "3 nothing could be checked (no sidecar and no --against)."
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line, ``error: ...``, and exit status 2 (no usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message}\n")


def _sigterm_to_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _guard(run: Callable[[], int]) -> int:
    """Run a command; turn user errors into one line and exit status 2."""
    from .errors import FfcvPairsError
    from .write.pool import WriteInterrupted

    signal.signal(signal.SIGTERM, _sigterm_to_exit)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line
            return run()
    except WriteInterrupted as e:
        print(f"error: {e}", file=sys.stderr)
        return 128 + e.signum
    except (FfcvPairsError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        print(f"error: {str(e) or 'interrupted by Ctrl-C'}", file=sys.stderr)
        return 128 + signal.SIGINT


def _warning_line(message: Warning | str, *_: object, **__: object) -> None:
    """A warning as one line on stderr (an old option name, say)."""
    print(f"warning: {message}", file=sys.stderr)


def _add_kind_args(p: argparse.ArgumentParser, default: str | None) -> None:
    """``--source-kind``, and its old name ``--layout`` (hidden; warns where it is read)."""
    kinds = ["auto", "per-sample", "batched"]
    p.add_argument("--source-kind", choices=kinds, default=default, help="which .pt files")
    p.add_argument("--layout", choices=kinds, default=None, help=argparse.SUPPRESS)


def _add_write_args(p: argparse.ArgumentParser) -> None:
    # Values stay strings here: merge_write_config checks flags and --config alike.
    p.add_argument("src_dir", nargs="?", help="directory holding the .pt files")
    p.add_argument("out_dir", nargs="?", help="directory to write <split>.beton into")
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML with these options (see configs/write.yaml); flags win",
    )
    p.add_argument(
        "--split",
        action="append",
        default=None,
        help="split name (file prefix); repeat for several",
    )
    _add_kind_args(p, default=None)
    p.add_argument(
        "--workers",
        default=None,
        metavar="N",
        help="processes (default: all cores; at most 4 per CPU)",
    )
    p.add_argument("--limit", default=None, metavar="N", help="write only the first N samples")
    p.add_argument("--page-size", default=None, help="page size, e.g. 8MiB (power of two)")
    p.add_argument(
        "--store-dtype",
        choices=["uint8", "float16"],
        default=None,
        help="store images as this dtype; refuses casts that change a value",
    )
    p.add_argument(
        "--quantize",
        choices=["uint8"],
        default=None,
        help="store float images of --range as uint8 (lossy: at most (HI-LO)/510 off; values "
        "outside the range are refused); the loader hands back floats in the range",
    )
    p.add_argument(
        "--range",
        default=None,
        metavar="LO,HI",
        help="the floats' range, with --quantize (a negative LO: --range=-1,1)",
    )
    p.add_argument(
        "--codec",
        default=None,
        metavar="CODEC",
        help="raw (default: exact), jpeg (A and B: lossy, 5-15x smaller for photos), or per "
        "field: A=jpeg,B=raw. JPEG takes uint8 images of 1 or 3 channels",
    )
    p.add_argument("--quality", default=None, metavar="Q", help="JPEG quality 1-100 (90)")
    p.add_argument(
        "--shuffle",
        default=None,
        metavar="SEED",
        help="write the samples in a seeded random order (recorded in the sidecar)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted conversion, keeping its finished pages",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--part", default=None, metavar="K/N", help="write part K of N (from 0)")
    p.add_argument("--append-to", default=None, metavar="M.json", help="add to this dataset")
    p.add_argument("--to", default=None, metavar="URL", help="then upload, manifest last")


def _write(args: argparse.Namespace) -> int:
    from .dataset_commands import after_write, shard_path
    from .write.flags import merge_write_config
    from .write.source_kinds import open_sources
    from .write.writer import write_pairs

    args = merge_write_config(args)
    sources = open_sources(args.src_dir, args.split, args.source_kind)  # one directory scan
    for split, source in zip(args.split, sources):
        with shard_path(args, split) as out:
            report = write_pairs(
                source,
                out,
                workers=args.workers,
                page_size=args.page_size,
                store_dtype=args.store_dtype,
                quantize=args.quantize,
                quantize_range=args.range,
                codec=args.codec,
                quality=args.quality,
                limit=args.limit,
                progress=not args.no_progress,
                resume=args.resume,
                shuffle_seed=args.shuffle,
                part=args.part,
            )
        print(report.summary())
        for line in after_write(args, out):  # --append-to, --to
            print(line)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from .dataset_commands import inspect_dataset, is_dataset_manifest
    from .format.integrity import open_beton
    from .inspection import preview_png, summary
    from .write.arguments import check_out_path

    if args.preview is None and args.out is not None:
        raise ValueError(f"--out {args.out} goes with --preview K (how many pairs to draw)")
    if args.preview is not None and args.preview < 1:
        raise ValueError(f"--preview K must be at least 1 (pairs to draw), got {args.preview}")
    if args.out is not None:
        check_out_path("--out", args.out)  # before the summary: a directory is misuse
    if is_dataset_manifest(args.file):
        return inspect_dataset(args.file, args.preview)
    reader = open_beton(args.file)
    print(summary(reader))
    if args.preview is not None:
        drawn = preview_png(reader, args.preview, args.out or Path("preview.png"))
        fewer = marked = ""
        if drawn.pairs < args.preview:
            fewer = f", all the file has ({args.preview} asked for)"
        if drawn.nonfinite:
            marked = f"; {drawn.nonfinite} pixels holding NaN or inf drawn magenta"
        print(f"preview:      {drawn.pairs} pairs (A | B{fewer}) in {drawn.path}{marked}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    """Exit 0 when everything checked matches, 1 at the first mismatch (named), 2 on
    misuse, 3 when nothing could be checked (no sidecar, no ``--against``)."""
    from .dataset_commands import part_record
    from .format.integrity import load_manifest, verify_checksums
    from .format.reader import BetonError, PairReader, require_file
    from .format.sidecar import sidecar_to_read
    from .format.stats import STATS_SUFFIX
    from .write.compare import compare_with_source
    from .write.parts import split_of_shard
    from .write.source_kinds import open_source, renamed_kind

    try:
        samples = None if args.samples == "all" else int(args.samples)
    except ValueError:
        samples = 0
    if samples is not None and samples < 1:
        raise ValueError(f"--samples must be a positive number or 'all', got {args.samples!r}")
    if args.seed < 0:
        raise ValueError(f"--seed must be a non-negative integer, got {args.seed}")
    require_file(args.file)  # missing or a directory: misuse (2), not a bad file (1)
    source = None
    if args.against is not None:
        kind = renamed_kind(args.source_kind, args.layout, "--layout", "--source-kind")
        source = open_source(args.against, args.split or split_of_shard(args.file), kind)
    try:
        reader = PairReader(args.file)
        manifest = load_manifest(reader)
    except BetonError as e:
        print(f"FAIL: {e}")
        return EXIT_MISMATCH
    if manifest is None:
        unchecked = f"no sidecar at {sidecar_to_read(args.file)}, so no checksums to check"
        if source is None:
            print(f"NOT CHECKED: {args.file}: {unchecked}; --against SRC_DIR compares samples")
            return EXIT_UNCHECKED
        print(f"checksums: NOT CHECKED: {unchecked}")
    else:
        bad = verify_checksums(reader, manifest)
        if bad is not None:
            print(f"FAIL: {args.file}: {bad.message}")
            return EXIT_MISMATCH
        stats = ""
        if manifest.stats is not None:
            found = sidecar_to_read(args.file, STATS_SUFFIX).exists()
            stats = "; image statistics " + ("OK" if found else "missing (optional)")
        print(f"checksums: OK ({len(manifest.crcs())} blocks, {reader.file_size} bytes{stats})")
    if source is not None:
        store = manifest.store_dtype if manifest is not None else None
        shuffle = manifest.shuffle_seed if manifest is not None else None
        count = (manifest.fingerprint or {}).get("count") if manifest is not None else None
        bad = compare_with_source(
            reader,
            source,
            samples,
            seed=args.seed,
            store_dtype=store,
            shuffle_seed=shuffle,
            source_count=count if isinstance(count, int) else None,
            part=part_record(manifest),
        )
        if bad is not None:
            print(f"FAIL: {args.file}: {bad.message}")
            return EXIT_MISMATCH
        checked = reader.num_samples if samples is None else min(samples, reader.num_samples)
        print(f"samples: OK ({checked} of {reader.num_samples} match {source.describe()})")
    print(f"OK: {args.file}" + ("" if manifest is not None else " (samples only)"))
    return 0


def _add_inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=path_or_url, help="a .beton, a dataset manifest, or its URL")
    p.add_argument(
        "--preview",
        type=int,
        default=None,
        metavar="K",
        help="PNG grid of K random pairs (K >= 1; all of them when the file has fewer)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="where to write the preview PNG (preview.png)"
    )


def _add_verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=path_or_url, help="a .beton, a dataset manifest, or its URL")
    p.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="SRC_DIR",
        help="compare samples bit-exactly with the source .pt files",
    )
    p.add_argument("--samples", default="100", help="how many random samples, or 'all'")
    p.add_argument("--split", default=None, help="source split (default: the file's stem)")
    _add_kind_args(p, default="auto")
    p.add_argument("--seed", type=int, default=0, help="seed for picking samples")


def _warmup(args: argparse.Namespace) -> int:
    from .warmup import augment_from_config, warmup

    augment = augment_from_config(args.augment) if args.augment is not None else None
    threads = None if args.threads is None else tuple(args.threads)
    report = warmup(augment, codec=args.codec, shape=args.shape, dtype=args.dtype, threads=threads)
    print(report.summary())
    return 0


def _shape_arg(text: str) -> tuple[int, ...]:
    """``3,224,224`` -> ``(3, 224, 224)``; anything else is a one-line argparse error."""
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected sizes like 3,224,224, got {text!r}")
    return shape


def _add_warmup_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--augment",
        type=Path,
        help="YAML of augment options (or a training config with a data.augment block)",
    )
    p.add_argument("--codec", choices=("jpeg",), help="the files' codec (default: raw arrays)")
    p.add_argument(
        "--shape", type=_shape_arg, default=(3, 48, 48), help="one stored image, e.g. 3,224,224"
    )
    p.add_argument("--dtype", default="uint8", choices=("uint8", "float16", "float32"))
    p.add_argument(
        "--threads", type=int, nargs="+", help="loader thread counts (default: 1 and all cores)"
    )


def write_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``writers/write_beton.py``."""
    p = _Parser(prog="write_beton.py", description="Convert .pt pairs into FFCV .beton files.")
    _add_write_args(p)
    args = p.parse_args(argv)
    return _guard(lambda: _write(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ffcv-pairs`` (installed by pip) and ``python -m ffcv_pairs``."""
    from .dataset_commands import add_merge_args, merge, remote_or, verify_dataset

    named = os.path.basename(sys.argv[0]) == "ffcv-pairs"
    p = _Parser(prog="ffcv-pairs" if named else "python -m ffcv_pairs")
    sub = p.add_subparsers(dest="command", required=True)
    _add_write_args(sub.add_parser("write", help="convert .pt pairs into .beton files"))
    _add_inspect_args(sub.add_parser("inspect", help="header, fields, labels, preview"))
    _add_verify_args(
        sub.add_parser(
            "verify", help="checksums and samples vs the sources", description=_VERIFY_HELP
        )
    )
    _add_warmup_args(
        sub.add_parser("warmup", help="compile the kernels a configuration needs, ahead")
    )
    add_merge_args(sub.add_parser("merge", help="list finished .beton shards in a dataset"))
    args = p.parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "write": _write,
        "inspect": remote_or(_inspect),
        "verify": remote_or(_verify, verify_dataset),
        "warmup": _warmup,
        "merge": merge,
    }
    return _guard(lambda: commands[args.command](args))
