"""The ffcv-pairs benchmark: every way to load (A, B, label) pairs, side by side.

Run it (from the repository root, with the project's venv)::

    .venv/bin/python -m bench                 # default run, about 16 minutes with the extras
    .venv/bin/python -m bench --quick         # about 3.5 minutes, small data
    .venv/bin/python bench/run.py --quick     # the same, as a script
    .venv/bin/python -m bench --smoke         # every table at the smallest sizes (the test's)
    make bench / make bench-quick             # the same through make

    .venv/bin/python -m bench --setup-extras  # create the LitData / Streaming venvs
    make bench-extras                         # the same

    .venv/bin/python -m bench --quick --out /tmp/res --work /tmp/work --no-extras
    .venv/bin/python -m bench --n 32768 --shape 3,64,64 --dtype uint8 --rounds 5 --clean
    .venv/bin/python -m bench --only memcpy --tables b --writer-sizes 16384,100000
    .venv/bin/python -m bench --render bench/results/bench-2026-12-01.json --out /tmp/again
    .venv/bin/python -m bench --larger-than-ram       # a file of 1.3x RAM (bench/scale/)
    .venv/bin/python -m bench --larger-than-ram-gib 4 # the same on 4 GiB: a short check
    .venv/bin/python -m bench --jpeg                  # JPEG size, PSNR, speed vs upstream
    .venv/bin/python -m bench --jpeg-larger-than-ram  # raw 1.5x RAM against JPEG (fits)
    .venv/bin/python -m bench --first-batch           # import + first batch, empty/warm cache
    .venv/bin/python -m bench --first-batch --first-batch-tree /tmp/before  # + an older tree
    .venv/bin/python -m bench --shards                # 1, 30, 300 shards vs one file; conversion
    .venv/bin/python -m bench --node-order            # node-local order simulated, vs Mosaic
    .venv/bin/python -m bench --remote                # node caches simulated; S3 vs the peers
    .venv/bin/python -m bench --photo-ops             # photometric ops vs Albumentations
    .venv/bin/python -m bench --pipelines             # whole pipelines vs Albu., torchvision
    .venv/bin/python -m bench --user-scale 200000     # the user's day, about 20 minutes
    .venv/bin/python -m bench --user-scale-sizes 100000,300000,1000000,3000000  # one source

It generates the data (seeded) under ``--work`` (default ``bench/.work/``), runs
the contestants interleaved in rounds, then the start-up, writer, memory,
cold-cache and augmentation-ops tables (:mod:`bench.tables.suite`), and writes
``bench/results/<kind>-<date>.md``, ``.json``, ``-throughput.png`` and ``-memory.png``:
the kind is ``bench``, or the tables' names for a run of ``--only memcpy``
(``augops-<date>.md`` for ``--tables e``). The report states every target and whether it
was met. ``--clean`` removes the generated data afterwards (the extras' venvs stay).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core.settings import BenchConfig, default_config, quick_config, smoke_config
from bench.tables.suite import TABLES, render_again, run_suite

__all__ = ["main", "parse_args"]

log = logging.getLogger("bench")


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape must be like 3,64,64, got {text!r}") from None
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"--shape must be positive integers, got {text!r}")
    return shape


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be like 16384,100000, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"must be positive counts, got {text!r}")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small data, one round (about 3.5 min)")
    size.add_argument(
        "--smoke", action="store_true", help="smallest sizes, about 1 min: figures mean nothing"
    )
    p.add_argument("--out", type=Path, help="results folder (default bench/results)")
    p.add_argument("--work", type=Path, help="data folder (default bench/.work)")
    p.add_argument("--n", type=int, help="pairs in the main data set")
    p.add_argument("--shape", type=_shape, help="image shape, e.g. 3,64,64")
    p.add_argument("--dtype", choices=("uint8", "float16", "float32"))
    p.add_argument("--rounds", type=int, help="interleaved rounds")
    p.add_argument("--writer-sizes", type=_sizes, help="writer table pairs, e.g. 16384,100000")
    p.add_argument("--seed", type=int)
    p.add_argument("--only", help="comma-separated contestant keys (default: all)")
    p.add_argument("--tables", default=TABLES, help="which extra tables: any of 'abcde'")
    p.add_argument("--no-extras", action="store_true", help="skip LitData and Streaming")
    p.add_argument("--no-cold-cache", action="store_true", help="never drop the page cache")
    p.add_argument("--clean", action="store_true", help="remove the generated data afterwards")
    p.add_argument("--date", help="report date or label, in <kind>-<date>.md (default: today)")
    p.add_argument("--setup-extras", action="store_true", help="create the extras' venvs, exit")
    p.add_argument("--larger-than-ram", action="store_true", help="file of 1.3x RAM, 2 epochs")
    p.add_argument("--larger-than-ram-gib", type=float, help="override its size (a short check)")
    p.add_argument("--render", type=Path, help="re-write md/png from a results .json, exit")
    p.add_argument(
        "--jpeg",
        action="store_true",
        help="only the JPEG table: size and PSNR at quality 75/90/95, speed against upstream "
        "FFCV (bench/tables/compression.py); with --smoke, at the smallest sizes",
    )
    p.add_argument(
        "--jpeg-larger-than-ram",
        action="store_true",
        help="photos raw at 1.5x RAM (--larger-than-ram-gib: that size) against the same as "
        "JPEG: cold epochs (bench/scale/jpeg_vs_raw.py)",
    )
    p.add_argument(
        "--first-batch",
        action="store_true",
        help="only the first-batch report: import, loader and first batch in new interpreters, "
        "empty and warm kernel caches, against upstream FFCV (bench/tables/first_batch.py); "
        "with --smoke: the plain row on the caches a user has",
    )
    p.add_argument(
        "--first-batch-tree",
        type=Path,
        metavar="PATH",
        help="with --first-batch: also 'ours (before)' from this source tree (PYTHONPATH=PATH), "
        "e.g. one unpacked by git archive COMMIT | tar -x -C PATH",
    )
    p.add_argument(
        "--shards",
        action="store_true",
        help="only the shards report: start-up and pairs/s of 3M tiny samples as 1, 30 and "
        "300 shards (bench/tables/shard_startup.py), an epoch of 30 shards against one file, "
        "warm and cold (shard_epochs.py), a cold 100k-pair .pt source's conversion against "
        "the storage's random read rate, 4 parts in 4 processes (shard_convert.py); "
        "with --smoke, 30k samples, a 10k-pair source and one round",
    )
    p.add_argument(
        "--node-order",
        action="store_true",
        help="only the node-order report: what each of 8-64 simulated nodes reads an epoch and "
        "the shuffle quality, global and node-local order against Mosaic's py1e, no files "
        "(bench/tables/node_order_sim.py); with --smoke, 200k samples; --no-extras: no Mosaic",
    )
    p.add_argument(
        "--remote",
        choices=("all", "sim", "live"),
        nargs="?",
        const="all",
        help="only the remote report: node caches over 8-64 simulated nodes, and 2 nodes x 2 "
        "ranks on moto's S3 against Mosaic and LitData (bench/tables/remote_report.py)",
    )
    p.add_argument(
        "--user-scale",
        type=int,
        nargs="?",
        const=3_000_000,
        metavar="N",
        help="only the user's day at full scale: N per-sample .pt pairs (default 3,000,000), "
        "convert, train; writes results/user-scale-<date>.md (see bench/scale/user_scale.py)",
    )
    p.add_argument(
        "--user-scale-sizes",
        type=_sizes,
        metavar="N1,N2,...",
        help="the user's day at several sizes on one source made at the largest, e.g. "
        "100000,300000,1000000,3000000 (instead of --user-scale N)",
    )
    p.add_argument(
        "--user-seconds", type=float, default=60.0, help="time box of each --user-scale row"
    )
    return p.parse_args(argv)


def _config(args: argparse.Namespace) -> BenchConfig:
    cfg = smoke_config() if args.smoke else quick_config() if args.quick else default_config()
    changes: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("out", "work", "n", "shape", "dtype", "rounds", "seed", "writer_sizes")
        if getattr(args, k) is not None
    }
    changes["extras"] = not args.no_extras
    changes["cold_cache"] = not args.no_cold_cache
    changes["keep_data"] = not args.clean
    return cfg.replace(**changes)


def _keys(only: str | None) -> list[str]:
    from bench.contest.contestants import CONTESTANTS

    if not only:
        return list(CONTESTANTS)
    keys = [k.strip() for k in only.split(",") if k.strip()]
    bad = [k for k in keys if k not in CONTESTANTS]
    if bad:
        raise ValueError(f"--only: unknown contestant(s) {bad}; must be among {list(CONTESTANTS)}")
    return keys


def _render(path: Path, out: Path | None) -> int:
    """Re-write the report and charts of a finished run from its JSON (no measuring)."""
    sys.stdout.write(f"{render_again(path, out)}\n")
    return 0


def _big(args: argparse.Namespace) -> int:
    from bench.core.fresh_process import forkserver
    from bench.core.settings import BENCH_DIR
    from bench.scale.larger_than_ram import larger_than_ram, write_big_report

    forkserver()
    try:
        res = larger_than_ram(args.work or BENCH_DIR / ".work", args.larger_than_ram_gib)
    except ValueError as e:
        sys.stderr.write(f"bench: {e}\n")
        return 2
    md = write_big_report(res, args.out or BENCH_DIR / "results", args.date)
    sys.stdout.write(f"{md}\n")
    return 0


def _jpeg_big(args: argparse.Namespace) -> int:
    from bench.core.fresh_process import forkserver
    from bench.core.settings import BENCH_DIR
    from bench.scale.jpeg_vs_raw import jpeg_vs_raw, jpeg_vs_raw_lines

    forkserver()
    try:
        res = jpeg_vs_raw(
            (args.work or BENCH_DIR / ".work") / "jpeg-vs-raw", args.larger_than_ram_gib
        )
    except ValueError as e:
        sys.stderr.write(f"bench: {e}\n")
        return 2
    out = args.out or BENCH_DIR / "results"
    out.mkdir(parents=True, exist_ok=True)
    date = args.date or datetime.date.today().isoformat()
    (out / f"jpeg-larger-than-ram-{date}.json").write_text(json.dumps(res, indent=1))
    md = out / f"jpeg-larger-than-ram-{date}.md"
    md.write_text("\n".join(["# JPEG against raw, larger than RAM", "", *jpeg_vs_raw_lines(res)]))
    sys.stdout.write(f"{md}\n")
    return 0


def _jpeg(args: argparse.Namespace) -> int:
    from bench.core.fresh_process import forkserver
    from bench.core.settings import BENCH_DIR
    from bench.tables.compression import measure_compression, write_compression_report

    forkserver()
    work = (args.work or BENCH_DIR / ".work") / "compression"
    if args.smoke:
        res = measure_compression(
            work, rounds=1, seconds=0.2, pairs={64: 256, 224: 64}, startup_samples=30_000
        )
    else:
        res = measure_compression(work, rounds=args.rounds or 3)
    date = args.date or datetime.date.today().isoformat()
    sys.stdout.write(f"{write_compression_report(res, args.out or BENCH_DIR / 'results', date)}\n")
    return 0


def _first_batch(args: argparse.Namespace, argv: list[str] | None) -> int:
    from bench.core.settings import BENCH_DIR
    from bench.tables.first_batch import check_tree, measure_first_batch
    from bench.tables.first_batch_report import write_first_batch_report

    rounds = args.rounds or (1 if args.smoke else 3)
    try:
        before = None if args.first_batch_tree is None else check_tree(args.first_batch_tree)
        if rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {rounds}")
    except ValueError as e:
        sys.stderr.write(f"bench: {e}\n")
        return 2
    work = (args.work or BENCH_DIR / ".work") / "first-batch"
    res = measure_first_batch(work, rounds, before, args.smoke, args.seed or 0)
    res["command"] = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    date = args.date or datetime.date.today().isoformat()
    sys.stdout.write(f"{write_first_batch_report(res, args.out or BENCH_DIR / 'results', date)}\n")
    return 0


def _shards(args: argparse.Namespace, argv: list[str] | None) -> int:
    from bench.core.machine import describe_machine
    from bench.core.settings import BENCH_DIR
    from bench.tables.shard_convert import measure_conversion
    from bench.tables.shard_epochs import measure_epochs
    from bench.tables.shard_startup import measure_shards, write_shards_report

    n = 30_000 if args.smoke else (args.n or 3_000_000)
    rounds = args.rounds or (1 if args.smoke else 3)
    work = (args.work or BENCH_DIR / ".work") / "shards"
    res = measure_shards(work, n, (1, 30, 300), rounds)
    if args.smoke:  # a 10k-pair source, a 256 MiB read-rate file, 1 s a queue depth
        res["conversion"] = measure_conversion(work, 10_000, rounds, 0.25, 1.0)
    else:
        res["conversion"] = measure_conversion(work, 100_000, rounds)
    res["epochs"] = measure_epochs(work, 6_000 if args.smoke else 100_000, rounds)
    res["command"] = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    res["machine"] = describe_machine()
    date = args.date or datetime.date.today().isoformat()
    sys.stdout.write(f"{write_shards_report(res, args.out or BENCH_DIR / 'results', date)}\n")
    return 0


def _user_scale(args: argparse.Namespace, argv: list[str] | None) -> int:
    from bench.scale.user_scale import UserScaleConfig, check_user_scale, run_user_scale

    changes = {k: getattr(args, k) for k in ("out", "work", "seed") if getattr(args, k) is not None}
    date = args.date or datetime.date.today().isoformat()
    try:
        if args.user_scale is not None and args.user_scale_sizes:
            raise ValueError(
                "give --user-scale N (one size) or --user-scale-sizes N1,N2,... (several), not both"
            )
        sizes = args.user_scale_sizes or (args.user_scale,)
        cfg = UserScaleConfig(sizes=sizes, time_box=args.user_seconds, date=date, **changes)
        check_user_scale(cfg)
    except ValueError as e:
        sys.stderr.write(f"bench: {e}\n")
        return 2
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    sys.stdout.write(f"{run_user_scale(cfg, command.strip())}\n")
    return 0


def _single_report(args: argparse.Namespace, argv: list[str] | None) -> int | None:
    """Run the one report a flag asks for (its exit status), or None: the main suite."""
    if args.render:
        return _render(args.render, args.out)
    if args.user_scale is not None or args.user_scale_sizes:
        return _user_scale(args, argv)
    if args.setup_extras:
        from bench.extras.venvs import setup_extras

        status = setup_extras()
        for name, line in status.items():
            sys.stdout.write(f"{name}: {line}\n")
        return 0 if all("MiB" in s for s in status.values()) else 1
    if args.jpeg_larger_than_ram:
        return _jpeg_big(args)
    if args.larger_than_ram or args.larger_than_ram_gib:
        return _big(args)
    if args.jpeg:
        return _jpeg(args)
    if args.first_batch or args.first_batch_tree:
        return _first_batch(args, argv)
    from bench.tables.node_order_report import run_node_order
    from bench.tables.remote_report import run_remote

    reports = {"shards": _shards, "node_order": run_node_order, "remote": run_remote}
    for flag_name, report in reports.items():
        if getattr(args, flag_name):
            return report(args, argv)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so that contestant processes are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr
    )
    single = _single_report(args, argv)
    if single is not None:
        return single
    try:
        cfg = _config(args)
        keys = _keys(args.only)
        if set(args.tables) - set(TABLES):
            raise ValueError(f"--tables must use letters of {TABLES!r}, got {args.tables!r}")
    except ValueError as e:
        sys.stderr.write(f"bench: {e}\n")
        return 2
    date = args.date or datetime.date.today().isoformat()
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    md = run_suite(cfg, keys, args.tables, command.strip(), date)
    sys.stdout.write(f"{md}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
