"""Command-line fronts: write, inspect and verify `.beton` files.

Commands::

    python writers/write_beton.py data/pt out --split train --split val --workers 2
    python -m ffcv_pairs write data/pt out --split train --layout batched --limit 1000
    python -m ffcv_pairs inspect out/train.beton --preview 8 --out preview.png
    python -m ffcv_pairs verify out/train.beton --against data/pt --samples 100

User errors print one line, ``error: <file>: <what is wrong>``, on stderr and
exit with status 2; there is no traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["main", "write_main"]

EXIT_USAGE = 2


def _sigterm_to_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _guard(run: Callable[[], int]) -> int:
    """Run a command; turn user errors into one line and exit status 2."""
    from .sources import SourceError

    signal.signal(signal.SIGTERM, _sigterm_to_exit)
    try:
        return run()
    except (SourceError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def _add_write_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("src_dir", type=Path, help="directory holding the .pt files")
    p.add_argument("out_dir", type=Path, help="directory to write <split>.beton into")
    p.add_argument(
        "--split",
        action="append",
        required=True,
        help="split name (file prefix); repeat for several",
    )
    p.add_argument("--layout", choices=["auto", "per-sample", "batched"], default="auto")
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    p.add_argument("--limit", type=int, default=None, help="write only the first N samples")
    p.add_argument("--page-size", default="8MiB", help="page size, e.g. 8MiB (power of two)")
    p.add_argument(
        "--store-dtype",
        choices=["uint8", "float16"],
        default=None,
        help="store images as this dtype; refuses casts that change a value",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _write(args: argparse.Namespace) -> int:
    from .layout import parse_size
    from .sources import open_source
    from .writer import write_pairs

    page_size = parse_size(args.page_size)
    sources = [(split, open_source(args.src_dir, split, args.layout)) for split in args.split]
    for split, source in sources:
        report = write_pairs(
            source,
            args.out_dir / f"{split}.beton",
            workers=args.workers,
            page_size=page_size,
            store_dtype=args.store_dtype,
            limit=args.limit,
            progress=not args.no_progress,
        )
        print(report.summary())
    return 0


def write_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``writers/write_beton.py``."""
    p = argparse.ArgumentParser(
        prog="write_beton.py", description="Convert .pt pairs into FFCV .beton files."
    )
    _add_write_args(p)
    args = p.parse_args(argv)
    return _guard(lambda: _write(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m ffcv_pairs``."""
    p = argparse.ArgumentParser(prog="python -m ffcv_pairs")
    sub = p.add_subparsers(dest="command", required=True)
    _add_write_args(sub.add_parser("write", help="convert .pt pairs into .beton files"))
    args = p.parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {"write": _write}
    return _guard(lambda: commands[args.command](args))
