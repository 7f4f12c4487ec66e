"""The node-order report (``python -m bench --node-order``): ``node-order-<date>.md`` and its
``.json``, from what :func:`bench.tables.node_order_sim.simulate` returns."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any

__all__ = ["TARGET", "node_order_lines", "run_node_order", "write_node_order_report"]

#: With ``partition="node"``, a node reads at most this many times its share an epoch.
TARGET = 1.1
_ORDERS = {"global": "ours, global", "node": "ours, node", "mosaic": "Mosaic relaxed + py1e"}


def _f(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _random_span(kinds: int, batch: int) -> float:
    """Expected distinct kinds in ``batch`` uniform draws from ``kinds`` equal kinds."""
    return kinds * (1 - (1 - 1 / kinds) ** batch)


def _target(res: dict[str, Any]) -> list[str]:
    rows = [r for r in res["rows"] if r["order"] == "node"]
    worst = {
        s: max(r["need_max"] for r in rows if r["shards"] == s) for s in {r["shards"] for r in rows}
    }
    pages = max(r["need_pages_max"] for r in rows)
    lines = ["## Target", ""]
    for shards, need in sorted(worst.items()):
        met = [r["nodes"] for r in rows if r["shards"] == shards and r["need_max"] <= TARGET]
        verdict = "met" if need <= TARGET else f"not met (met at {met or 'no'} nodes)"
        lines.append(
            f'- {shards} shards: with `partition="node"` a node needs at most **{need:.2f}x** '
            f"its share of the dataset an epoch after the first, in whole shards (target "
            f"<= {TARGET}x): {verdict}."
        )
    lines += [
        f"- Read by pages (ranged reads of the pages it uses): at most **{pages:.2f}x** in every "
        f"`node` row.",
        "",
    ]
    return lines


def _reads(res: dict[str, Any], shards: int) -> list[str]:
    cfg = res["config"]
    share_gib = cfg["samples"] * cfg["sample_bytes"] / 2**30
    lines = [
        f"### What a node reads: {shards} shards of {cfg['samples'] // shards:,} samples",
        "",
        "| nodes | order | shards / epoch, max | need / epoch, mean | need, max | GiB, max | "
        "need by pages, max | new vs epoch before, max | held over all epochs, max |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        if r["shards"] != shards:
            continue
        gib = r["need_max"] * share_gib / r["nodes"]
        lines.append(
            f"| {r['nodes']} | {_ORDERS[r['order']]} | {r['shards_max']} | {_f(r['need_mean'])}x "
            f"| **{_f(r['need_max'])}x** | {gib:,.1f} | {_f(r['need_pages_max'])}x | "
            f"{_f(r['new_max'])}x | {_f(r['held_max'])}x |"
        )
    return [*lines, ""]


def _quality(res: dict[str, Any], shards: int) -> list[str]:
    cfg = res["config"]
    batch = cfg["batch_size"]
    lines = [
        f"### Shuffle quality: {shards} shards",
        "",
        "| nodes | order | classes / batch, mean (5th pct) | shards / batch, mean | "
        "position spread | samples read every epoch |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        if r["shards"] != shards:
            continue
        lines.append(
            f"| {r['nodes']} | {_ORDERS[r['order']]} | {_f(r['batch_classes_mean'], 1)} "
            f"({_f(r['batch_classes_p5'], 0)}) | {_f(r['batch_shards_mean'], 1)} | "
            f"{_f(r['position_spread'], 3)} | {r['read_fraction']:.1%} |"
        )
    lines.append(
        f"| any | uniformly random (reference) | {_random_span(cfg['classes'], batch):.1f} | "
        f"{_random_span(shards, batch):.1f} | {math.sqrt(1 / 12):.3f} | 100% |"
    )
    return [*lines, ""]


def node_order_lines(res: dict[str, Any]) -> list[str]:
    """The report's markdown lines."""
    cfg = res["config"]
    m = res["mosaic"]
    mosaic = (
        f"Mosaic Streaming {m['version']} (`get_partitions('relaxed', ...)` then "
        f"`get_shuffle('py1e', shard sizes, ...)`, its default block of {m.get('block_size')} "
        f"samples, {cfg['workers_per_rank']} worker per rank), run by its own code in "
        f"`{m.get('python')}` (bench/extras/mosaic_order.py)"
        if m.get("version")
        else f"Mosaic Streaming did not run: {m['why']}"
    )
    counts = sorted({r["shards"] for r in res["rows"]})
    lines = [
        f"# Node-local order, simulated ({res['date']})",
        "",
        f"`{res['command']}`",
        "",
        f"{cfg['samples']:,} samples in {' or '.join(map(str, counts))} equal shards, pages of "
        f"{cfg['page_samples']} samples (each shard starts a page); {list(cfg['nodes'])} nodes of "
        f"{cfg['ranks_per_node']} ranks, batch {cfg['batch_size']} a rank, drop_last, "
        f"quasi-random window of {cfg['window_pages']} pages, {cfg['canonical_nodes']} canonical "
        f"nodes (ours and Mosaic's), seed {cfg['seed']}, epochs 0-{cfg['epochs'] - 1}. "
        f"{mosaic}.",
        "",
        *_target(res),
        "## What a node reads",
        "",
        "- **share**: the dataset over the nodes (samples / nodes).",
        "- **need / epoch**: the samples of the whole shards a node's ranks read in an epoch "
        "after the first, over its share: what it holds or downloads that epoch when it keeps "
        "nothing from the one before. Mean and max over nodes and epochs 1 on; **GiB**: the max "
        f"at {cfg['sample_bytes'] // 1024} KiB a sample.",
        "- **by pages**: the same counting only the pages it reads (a cache that fetches "
        "pages by ranged reads).",
        "- **new vs epoch before**: shards it reads that it did not read the epoch before "
        "(downloads with a cache that keeps the last epoch's shards). **held over all "
        "epochs**: the union of its shards over the epochs, the cache it fills if it never "
        "evicts.",
        "",
    ]
    for shards in counts:
        lines += _reads(res, shards)
    lines += [
        "## Shuffle quality",
        "",
        f"Labels are shard-correlated: the file is written in class order, sample `i` of "
        f"`N` has class `i * {cfg['classes']} // N` (the worst case for any order that reads "
        f"pages or shards together).",
        "",
        f"- **classes / batch**: distinct classes in a rank's batch of {cfg['batch_size']} "
        "(whole batches, every rank and epoch); **shards / batch** the same for shards. The "
        "reference is the expectation for uniform draws.",
        "- **position spread**: a sample's place in its epoch is its batch step over the "
        "epoch's steps (0 to 1); the spread is the root-mean-square, over samples read in "
        "every epoch, of the standard deviation of that place across the epochs. Independent "
        "uniform places give sqrt(1/12) = 0.289; 0 means a sample comes at the same step "
        "every epoch.",
        "",
    ]
    for shards in counts:
        lines += _quality(res, shards)
    lines += [
        "What the node-local order costs in randomness: a sample only ever shares a rank "
        "batch (and a node) with the samples of its node's stretch, 1/nodes of the dataset, "
        "the same every epoch; the global order lets it meet any sample over the epochs. "
        "Within an epoch the figures above are what a batch and a sample see.",
        "",
        "Why our batches span fewer classes as ranks grow, in either partition: each rank is "
        "dealt a contiguous run of the epoch's (permuted) pages, so a rank reads about "
        "samples / ranks / page size pages an epoch and a batch draws from at most the window "
        "of them; Mosaic deals a node's samples to its ranks in turn, so each rank draws from "
        "all the node's canonical nodes, and its `py1e` mixes a canonical node's shards.",
        "",
        f"Commit {res.get('commit', 'unknown')}, numpy {res.get('numpy', '?')}; the figures are "
        "pure functions of the configuration (no timing).",
        "",
    ]
    return lines


def write_node_order_report(res: dict[str, Any], out: Path, date: str) -> Path:
    """``node-order-<date>.md`` and ``.json`` in ``out``; returns the markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    res = {**res, "date": date}
    md = out / f"node-order-{date}.md"
    md.write_text("\n".join(node_order_lines(res)))
    (out / f"node-order-{date}.json").write_text(json.dumps(res, indent=1))
    return md


def run_node_order(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``python -m bench --node-order``: simulate, write the report, print its path; 2 on a
    bad size (one line on stderr)."""
    from dataclasses import replace

    from bench.core.machine import describe_machine
    from bench.core.settings import BENCH_DIR
    from bench.tables.node_order_sim import SimConfig, simulate, smoke_sim

    try:
        cfg = smoke_sim() if args.smoke else SimConfig()
        cfg = replace(cfg, **({"samples": args.n} if args.n else {}), seed=args.seed or 0)
    except ValueError as e:
        sys.stderr.write(f"bench: --node-order: {e}\n")
        return 2
    res = simulate(cfg, (args.work or BENCH_DIR / ".work") / "node-order", not args.no_extras)
    res["command"] = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = describe_machine()
    res.update(commit=machine["commit"], numpy=machine["numpy"])
    date = args.date or datetime.date.today().isoformat()
    sys.stdout.write(f"{write_node_order_report(res, args.out or BENCH_DIR / 'results', date)}\n")
    return 0
