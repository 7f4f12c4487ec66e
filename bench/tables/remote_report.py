"""The remote report (``python -m bench --remote``): ``remote-<date>.md`` and its ``.json``,
from :func:`bench.tables.remote_sim.simulate_caches` (``res["sim"]``) and
:func:`bench.tables.remote_run.run_live` (``res["live"]``); either may be absent."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

__all__ = ["TARGET", "live_rates", "remote_lines", "run_remote", "write_remote_report"]

#: With ``partition="node"``, a node downloads at most this many times its share an epoch
#: after the first.
TARGET = 1.1
_MB = 1e6


def _f(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _limit(fraction: float | None) -> str:
    return "none" if fraction is None else f"{fraction:g}x share"


def _cell(c: dict[str, Any]) -> str:
    if c["refused"]:
        return f"refused (needs {_f(c['needed'])}x)"
    return f"{_f(c['first_max'])} / **{_f(c['later_max'])}** / {_f(c['peak_max'])}"


def _sim_target(sim: dict[str, Any]) -> list[str]:
    lines = []
    for order in ("node", "node_window"):
        lines += _order_target(sim, order)
    return lines


def _order_target(sim: dict[str, Any], order: str) -> list[str]:
    rows = [r for r in sim["rows"] if r["order"] == order]
    what = 'partition="node"' + (", node_window=True" if order == "node_window" else "")
    lines = []
    for window in sorted({r["window"] for r in rows}, reverse=True):
        for fraction in sim["config"]["limits"]:
            cells = [
                (r["shards"], r["nodes"], c)
                for r in rows
                if r["window"] == window
                for c in r["cache"]
                if c["limit"] == fraction
            ]
            ran = [(n, c["later_max"]) for _, n, c in cells if not c["refused"]]
            refused = [n for _, n, c in cells if c["refused"]]
            worst = max((x for _, x in ran if x is not None), default=None)
            verdict = (
                "NOT MEASURED (every node count refused)"
                if not ran
                else "PASS"
                if worst is not None and worst <= TARGET and not refused
                else "MISS"
            )
            measured = [f"{_f(worst)}x at {[n for n, _ in ran]} nodes"] if ran else []
            measured += [f"refused at {refused} nodes"] if refused else []
            lines.append(
                f"| `{what}`, window {window} pages, cache limit {_limit(fraction)} | "
                f"<= {TARGET}x share / epoch after the first | {'; '.join(measured)} | {verdict} |"
            )
    return lines


def _median_range(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    if not values:
        return "—"
    v = [x / scale for x in values]
    return f"{statistics.median(v):,.{digits}f} ({min(v):,.{digits}f}-{max(v):,.{digits}f})"


def live_rates(answers: list[dict[str, Any]], epochs: int) -> dict[str, Any]:
    """Aggregate pairs/s of each epoch (all ranks' samples over first start to last end),
    and of the whole run from the first rank's construction on."""
    out: dict[str, Any] = {"epochs": []}
    for e in range(epochs):
        got = [a["epochs"][e] for a in answers]
        wall = max(g["end"] for g in got) - min(g["start"] for g in got)
        out["epochs"].append(sum(g["samples"] for g in got) / max(wall, 1e-9))
    total = sum(g["samples"] for a in answers for g in a["epochs"])
    wall = max(a["epochs"][-1]["end"] for a in answers) - min(a["built"] for a in answers)
    out["total"] = total / max(wall, 1e-9)
    out["samples"] = total
    return out


def _live_stats(live: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for run in live["runs"]:
        s = out.setdefault(run["peer"], {"total": [], "e0": [], "e1": [], "fetched": [],
                                         "peak": [], "final": [], "failed": []})  # fmt: skip
        if not run["complete"]:
            s["failed"].append(1)
            continue
        rates = live_rates(run["answers"], live["config"]["epochs"])
        s["total"].append(rates["total"])
        s["e0"].append(rates["epochs"][0])
        s["e1"].append(rates["epochs"][-1])
        s["fetched"].append(sum(run["fetched"]))
        s["peak"].append(max(run["cache_peak"]))
        s["final"].append(max(run["cache_final"]))
    return out


def _live_target(live: dict[str, Any]) -> list[str]:
    st = _live_stats(live)
    ours = st.get("ffcv-pairs", {}).get("total", [])
    lines = []
    for peer in ("mosaic", "litdata"):
        theirs = st.get(peer, {}).get("total", [])
        if not ours or not theirs:
            lines.append(f"| pairs/s vs {peer} | ahead | — | NOT MEASURED |")
            continue
        ratio = statistics.median(ours) / statistics.median(theirs)
        lines.append(
            f"| pairs/s vs {peer} (whole run, median of rounds) | ahead (> 1x) | {ratio:.2f}x "
            f"| {'PASS' if ratio > 1 else 'MISS'} |"
        )
    mine, mosaic = st.get("ffcv-pairs", {}).get("fetched"), st.get("mosaic", {}).get("fetched")
    if mine and mosaic:
        ratio = statistics.median(mine) / statistics.median(mosaic)
        lines.append(
            f"| bytes fetched vs Mosaic (both nodes, median) | <= 1x | {ratio:.2f}x | "
            f"{'PASS' if ratio <= 1 else 'MISS'} |"
        )
    else:
        lines.append("| bytes fetched vs Mosaic | <= 1x | — | NOT MEASURED |")
    return lines


def _sim_lines(sim: dict[str, Any]) -> list[str]:
    cfg = sim["config"]
    m = sim["mosaic"]
    share = cfg["samples"] * cfg["sample_bytes"]
    lines = [
        "## 1. Simulated nodes",
        "",
        f"{cfg['samples']:,} samples of {cfg['sample_bytes'] // 1024} KiB "
        f"({share / 1e9:,.0f} GB) in {' or '.join(map(str, cfg['shard_counts']))} equal shards "
        f"(~{share / cfg['shard_counts'][0] / 1e6:,.0f} MB), pages of {cfg['page_samples']} "
        f"samples; nodes of {cfg['ranks_per_node']} ranks, batch {cfg['batch_size']} a rank, "
        f"{cfg['canonical_nodes']} canonical nodes, seed {cfg['seed']}, epochs "
        f"0-{cfg['epochs'] - 1}. Ours: the loader's `rank_order`, `plan_of`/`merge_plans` per "
        "node, Belady eviction by `choose_victims` over `next_uses`, step by step (a step's "
        "shards pinned), refused where the loader refuses (`needed_bytes`, two steps). "
        + (
            f"Mosaic Streaming {m['version']}: its `relaxed` partition and `py1e` shuffle from "
            f"its own code (block {m.get('block_size')}, 1 worker a rank), its cache simulated "
            "here: least recently used first, sample by sample (only the shard being read held)."
            if m.get("version")
            else f"Mosaic did not run: {m['why']}."
        ),
        "",
        "Each cell: **first epoch / later epochs (max) / peak cache**, in the node's share of "
        "the dataset (dataset / nodes), max over nodes. *refused*: the loader refuses the "
        "limit at start-up, below what two steps read (the figure needed shown). Our bytes "
        "are the loader's: a download reads a shard's samples (its pages but the last padded "
        "to 8 MiB) and its allocation table (48 bytes a pair); the cache counts that and the "
        "shard's header and metadata. **opening**: what our opening reads on every node "
        "besides, in the same unit: each shard's header and metadata (24 bytes a pair), for "
        "every shard of the dataset, once per node (they stay in the cache).",
        "",
    ]
    limits = cfg["limits"]
    names = {
        "global": "ours, global",
        "node": "ours, node",
        "node_window": "ours, node, one window a node",
        "mosaic": "Mosaic py1e + LRU",
    }
    for shards in cfg["shard_counts"]:
        lines += [
            f"### {shards} shards",
            "",
            "| nodes | order | window | " + " | ".join(f"limit {_limit(x)}" for x in limits)
            + " | opening, every shard's skeleton | classes / batch | position spread |",
            "|---:|---|---:|" + "---|" * len(limits) + "---:|---:|---:|",
        ]  # fmt: skip
        for r in sim["rows"]:
            if r["shards"] != shards:
                continue
            cells = " | ".join(_cell(c) for c in r["cache"])
            lines.append(
                f"| {r['nodes']} | {names[r['order']]} | {r['window'] or '—'} | {cells} | "
                f"{_f(r['opening']) + 'x' if r['order'] != 'mosaic' else '—'} | "
                f"{_f(r['batch_classes_mean'], 1)} | {_f(r['position_spread'], 3)} |"
            )
        lines.append("")
    return lines


def _live_lines(live: dict[str, Any]) -> list[str]:
    cfg = live["config"]
    st = _live_stats(live)
    pair = 2 * math.prod(cfg["shape"])
    lines = [
        "## 2. A run on this machine",
        "",
        f"{cfg['pairs']:,} pairs of uint8{list(cfg['shape'])} ({cfg['pairs'] * pair / _MB:,.0f} "
        f"MB of images), {cfg['shards']} ffcv-pairs shards of {live['shard_bytes'] / _MB:.1f} MB "
        f"(pages of {cfg['page_bytes'] // 1024} KiB; the peers' writers cap their shards at "
        f"that size), on "
        f"moto's S3 server on 127.0.0.1; {cfg['nodes']} nodes x {cfg['ranks_per_node']} ranks, "
        f"batch {cfg['batch_size']}, {cfg['epochs']} epochs from empty caches, no cache limit, "
        f"{cfg['rounds']} interleaved rounds. ffcv-pairs: `make_loader(s3 URL, "
        'partition="node", cache_dir=...)`; Mosaic: `StreamingDataset(remote=..., local=..., '
        "shuffle=True, num_canonical_nodes=2)`; LitData: `StreamingDataset(Dir(path, url), "
        "shuffle=True)`; each under a `DataLoader` with no workers (the peers) or as it is "
        "(ours). Stored (object bytes): "
        + ", ".join(f"{k} {v / _MB:.1f} MB" for k, v in live["stored"].items())
        + ".",
        "",
        "| reader | pairs/s, whole run | epoch 1 (cold) | epoch 2 (cached) | fetched, both nodes, "
        "MB | cache per node, peak MB | failed runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for peer, s in st.items():
        lines.append(
            f"| {peer} | {_median_range(s['total'])} | {_median_range(s['e0'])} | "
            f"{_median_range(s['e1'])} | {_median_range(s['fetched'], _MB, 1)} | "
            f"{_median_range(s['peak'], _MB, 1)} | {len(s['failed'])} |"
        )
    lines += ["", "Median (range) over rounds. Per node, each run:", ""]
    lines += ["| round | reader | fetched MB, node 0 / 1 | GETs | cache peak MB | errors |",
              "|---:|---|---|---|---|---|"]  # fmt: skip
    for run in live["runs"]:
        lines.append(
            f"| {run['round']} | {run['peer']} | "
            + " / ".join(f"{b / _MB:.1f}" for b in run["fetched"])
            + f" | {' / '.join(map(str, run['gets']))} | "
            + " / ".join(f"{b / _MB:.1f}" for b in run["cache_peak"])
            + f" | {'; '.join(run['errors'])[:200] or '—'} |"
        )
    parts = [r["ours_cache"] for r in live["runs"] if r.get("ours_cache")]
    if parts:
        data = max(p["data"] for r in parts for p in r) / _MB
        meta = max(p["meta"] for r in parts for p in r) / _MB
        lines.append(
            f"\nffcv-pairs' cache on a node: {data:.1f} MB of its shards (`data/`) and {meta:.1f} "
            "MB of skeletons (`meta/`: each shard's header, field table and metadata, and its "
            "sidecar, for every shard of the dataset), max over nodes and rounds; on disk (the "
            "padding of a shard's file is a hole)."
        )
    for key, note in live["notes"].items():
        lines.append(f"\n*{key}*: {note}")
    return [*lines, ""]


def remote_lines(res: dict[str, Any]) -> list[str]:
    """The report's markdown lines."""
    lines = [
        f"# Remote datasets: simulated nodes and a run on moto's S3 ({res['date']})",
        "",
        f"`{res['command']}`",
        "",
        "## Targets",
        "",
        "| target | goal | measured | verdict |",
        "|---|---|---|---|",
    ]
    if res.get("sim"):
        lines += _sim_target(res["sim"])
    if res.get("live"):
        lines += _live_target(res["live"])
    lines.append("")
    lines += res.get("findings", [])
    if res.get("sim"):
        lines += _sim_lines(res["sim"])
    if res.get("live"):
        lines += _live_lines(res["live"])
    lines += [
        f"Commit {res.get('commit', 'unknown')}; {res.get('machine', '')}. Other work shared "
        "the 2 cores during the run: rates are for comparison within a round.",
        "",
    ]
    return lines


def write_remote_report(res: dict[str, Any], out: Path, date: str) -> Path:
    """``remote-<date>.md`` and ``.json`` in ``out``; returns the markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    res = {**res, "date": date}
    md = out / f"remote-{date}.md"
    md.write_text("\n".join(remote_lines(res)))
    (out / f"remote-{date}.json").write_text(json.dumps(res, indent=1))
    return md


def run_remote(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``python -m bench --remote [all|sim|live]``: the parts asked for (``--smoke``: small
    sizes; ``--no-extras``: ours alone), then the report; prints its path."""
    from bench.core.machine import describe_machine
    from bench.core.settings import BENCH_DIR
    from bench.tables.remote_run import LiveConfig, run_live, smoke_live
    from bench.tables.remote_sim import CacheSimConfig, simulate_caches, smoke_cache_sim

    work = args.work or BENCH_DIR / ".work"
    res: dict[str, Any] = {}
    res["command"] = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.remote in ("all", "sim"):
        cfg = smoke_cache_sim() if args.smoke else CacheSimConfig()
        res["sim"] = simulate_caches(cfg, work / "remote-sim", not args.no_extras)
    if args.remote in ("all", "live"):
        live = smoke_live() if args.smoke else LiveConfig()
        res["live"] = run_live(live, work / "remote", not args.no_extras)
    machine = describe_machine()
    res["commit"] = machine["commit"]
    res["machine"] = f"{machine['cpu']}, {machine['cores']} cores, numpy {machine['numpy']}"
    date = args.date or datetime.date.today().isoformat()
    sys.stdout.write(f"{write_remote_report(res, args.out or BENCH_DIR / 'results', date)}\n")
    return 0
