"""The user-scale report's measured sections: every row at every size, the speed ratio per size,
node memory against ``N`` (points, fit, extrapolation), start-up per rank three ways and
ffcv-pairs per rank at the largest size. Each returns markdown lines under its heading."""

from __future__ import annotations

import statistics
from typing import Any

from bench.scale.user_fit import USER_NODE_GB, short_count
from bench.scale.user_targets import find_row, row_rate, size_view, startup_three_ways
from bench.tables.report import number

__all__ = ["memory_section", "per_rank_section", "rows_section", "startup_section"]


def _gap(r: dict[str, Any]) -> str:
    if not r.get("gap_n"):
        return "—"
    return f"{r['gap_first']:.3f} / {r['gap_median']:.3f} / {r['gap_max']:.3f} ({r['gap_n']})"


def _cpu(r: dict[str, Any]) -> float | None:
    parts = (r.get("build_cpu_s"), r.get("first_batch_cpu_s"))
    return None if None in parts else sum(parts)  # type: ignore[arg-type]


def _gap_all(row: dict[str, Any]) -> str:
    gaps = [r["gap_median"] for r in row["ranks"] if r.get("gap_n")]
    if not gaps:
        return "no epoch ended"
    return f"{statistics.median(gaps):.3f}"


def result(row: dict[str, Any]) -> str:
    """How a row ended, in a few words."""
    if row["stopped"] == "memory":
        pss = row["memory"].get("last_pss_mb", 0) / 1024
        avail = row["tripped_gib"]
        return f"stopped by the memory floor at {pss:.1f} GiB PSS (MemAvailable {avail:.1f} GiB)"
    if row["stopped"] == "deadline":
        return f"stopped at its deadline ({row.get('budget_s', 0):.0f} s after launch)"
    errors = {r["error"] for r in row["ranks"] if "error" in r}
    return "; ".join(sorted(errors)) if errors else "ran its time box"


def _start(row: dict[str, Any]) -> str:
    starts = [r for r in row["ranks"] if r.get("startup_s") is not None]
    slow = max(starts, key=lambda r: r["startup_s"], default=None)
    if not slow:
        return "—"
    return f"{slow['startup_s']:.2f} ({slow['build_s']:.2f} + {slow['first_batch_s']:.2f})"


def rows_section(res: dict[str, Any], heading: str) -> list[str]:
    """Every row at every size, then the speed ratio at each size."""
    cfg = res["config"]
    w, per_rank = cfg["world_size"], cfg["global_batch"] // cfg["world_size"]
    out = [
        heading,
        "",
        f"At each size N, ascending, the same rows on the first N pairs of the one source, "
        f"{cfg['time_box']:g} s each. Each row: {w} spawned ranks in a gloo group (as under "
        f"torchrun). *ffcv-pairs*: `make_loader(train.beton, batch_size={per_rank}, "
        f"order='quasi_random', augment=PairAugment(hflip=0.5, crop={list(cfg['shape'][-2:])}, "
        f"crop_padding={cfg['crop_padding']}))` on the size's own .beton, read for the time box "
        "and past one epoch boundary; its PSS without the mapped .beton pages (page cache). "
        "*paths in lists*: the user's `Dataset`, `self.a_paths = [...]` etc. built in "
        "`__init__` (3 x N strings per rank), three `torch.load` per item, under a `DataLoader` "
        f"with a `DistributedSampler` (shuffle, drop_last), persistent workers, batch {per_rank} "
        "per rank. *packs*: the first ceil(N / 1000) packs, one item = one pack, `torch.load` "
        "once and collated. Memory: sums over every process of the row (ranks + workers), "
        "sampled about twice a second; the mean is over the time after every rank had its first "
        f"batch. A row is stopped when MemAvailable drops below {cfg['floor_gib']:g} GiB, and "
        f"ends at the latest {cfg['start_cap']:g} s + its time box + 10 s after launch. "
        "*samples/s* is steady: after each rank's first batch, summed over ranks; a row where "
        "some rank had fewer than 2 batches has none, and shows what it delivered *over its "
        "life* (from launch until stopped).",
        "",
        "| N | setup | processes | samples/s | slowest start-up s (build + first batch) "
        "| epoch gap s (median over ranks) | PSS Σ peak MiB | PSS Σ mean MiB "
        "| MemAvailable min GiB | load avg | wall s | result |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for entry in res.get("sizes", []):
        for row in entry.get("rows", []):
            pk, mean = row["memory"].get("peak_mb", {}), row["memory"].get("mean_mb", {})
            field = "pss_own" if row["kind"] == "ours" else "pss"
            value, over_life = row_rate(row)
            rate = f"— ({number(value)} over its life)" if over_life else number(value)
            out.append(
                f"| {entry['n']:,} | {row['title']} | {pk.get('procs', 0)} | {rate} | "
                f"{_start(row)} | {_gap_all(row)} | {number(pk.get(field))} | "
                f"{number(mean.get(field))} | {row['min_available_gib']:.1f} | "
                f"{row['load_before']:.1f} | {row['wall_s']:.0f} | {result(row)} |"
            )
        if not entry.get("rows"):
            out.append(f"| {entry['n']:,} | not run (the run stopped before) |" + " |" * 10)
    if not res.get("sizes"):
        out.append("| — | not run (the run stopped before) |" + " |" * 10)
    workers = max(cfg["workers"])
    out += [
        "",
        f"Speed ratio at each size, ffcv-pairs over the user's {w} x {workers} row (steady rates "
        "only):",
        "",
        f"| N | ffcv-pairs samples/s | user {w} x {workers} samples/s | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for entry in res.get("sizes", []):
        view = size_view(res, entry)
        mine, user = find_row(view, "ours"), find_row(view, "lists", workers)
        ours, theirs = mine.get("rate"), user.get("rate")
        pairs = (("ffcv-pairs", mine, ours), ("user", user, theirs))
        why = [f"{name}: {result(row)}" for name, row, rate in pairs if row and not rate]
        ratio = (
            f"{ours / theirs:,.0f}x" if ours and theirs else f"— ({'; '.join(why) or 'not run'})"
        )
        out.append(f"| {entry['n']:,} | {number(ours)} | {number(theirs)} | {ratio} |")
    return [*out, ""]


_FAR = ("n_node", "n_user")


def _points(c: dict[str, Any]) -> str:
    return "; ".join(
        f"{short_count(p['n'])}: {p['peak_mib']:,.0f}{'*' if p['stopped'] else ''}"
        for p in c["points"]
    )


def memory_section(res: dict[str, Any], curves: list[dict[str, Any]], heading: str) -> list[str]:
    """The fit table and what it says, under the memory chart."""
    ram = res["machine"]["ram_gib"]
    out = [
        heading,
        "",
        f"![{res['chart_memory']}]({res['chart_memory']})" if res.get("chart_memory") else "",
        "",
        "Each row's peak PSS sum (MiB) at each N, and the least-squares line pss = a + b x N "
        "through the sizes where the row was not stopped by the memory floor. * marks a size "
        "where it was stopped: that PSS is a lower bound (still growing when the row was "
        "killed). A row with fewer than two such sizes is fitted through every point, lower "
        "bounds included: its line is then too low and its N at a node an upper bound (it "
        "fills that node at that N or before). *N at ...*: where the line reaches "
        f"this node's RAM ({ram:.1f} GiB) and the user's node ({USER_NODE_GB:g} GB = "
        f"{USER_NODE_GB * 1e9 / 2**30:.0f} GiB). The user's rows also grow with time (workers "
        "touch more of the lists the longer they read), so a run longer than the time box "
        "fills a node sooner.",
        "",
        "| row | points (N: peak PSS Σ MiB) | fit over | a MiB | b bytes per pair "
        "| N at this node's RAM | N at the user's 200 GB |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for c in curves:
        fit = c["fit"]
        a = number(fit[0]) if fit else "—"
        b = number(fit[1] * (1 << 20), 1) if fit else "—"
        bound = "≤ " if c["basis"] == "lower bounds" else ""
        basis = {
            "measured": "sizes that ran to the end",
            "lower bounds": "every point, lower bounds included",
        }.get(c["basis"], "no fit (one size)")
        if c["above_fit"]:
            basis += "; stopped at " + ", ".join(f"{n:,}" for n in c["above_fit"]) + " above it"
        far = {k: bound + short_count(c[k]) if c[k] is not None else "—" for k in _FAR}
        if fit and fit[1] <= 0:
            far = dict.fromkeys(far, "no growth measured")
        out.append(
            f"| {c['label']} | {_points(c)} | {basis} | {a} | {b} | {far['n_node']} | "
            f"{far['n_user']} |"
        )
    if not curves:
        out.append("| no row ran |" + " |" * 6)
    return [*out, ""]


def _compiled(r: dict[str, Any]) -> str:
    cpu = _cpu(r)
    if cpu is None or cpu <= 3:
        return ""
    return "; over 3 CPU s: numba compiled here (something rewrote its cache since the warm-up)"


def startup_section(res: dict[str, Any], heading: str) -> list[str]:
    """Start-up (make_loader + first batch) per rank three ways, and the runs of 1 rank alone."""
    s = startup_three_ways(res)
    row = find_row(size_view(res), "ours")
    load = row.get("load_before")
    warm = ", ".join(
        f"{e['n']:,}: " + " / ".join(f"{w:.1f}" for w in e["warm_s"])
        for e in res.get("sizes", [])
        if e.get("warm_s")
    )
    out = [
        heading,
        "",
        f"At {s['n']:,} pairs, the largest size. *start-up* = make_loader + first batch, with "
        "numba's one-time set-up in every process (loading the cached kernels: the numba cache "
        "was filled in a fresh process before the rows of each size and again before the runs "
        f"alone, as a user's first run does; seconds it took: {warm or '—'}; a few when the "
        "cache was warm already, tens when it compiled). "
        "*CPU s*: the CPU time of the rank's process over its start-up (all its threads), which "
        "other processes do not inflate. *1 rank alone*: a single rank (world size 1, the same "
        "file and batch size) in a fresh process, after every row had finished: a user's "
        "second run.",
        "",
        "| measure | seconds | target |",
        "|---|---:|---|",
        f"| wall time, slowest of {s['ranks']} ranks started together (load average "
        f"{number(load, 1)} on {res['machine']['cores']} cores) | {number(s['wall_s'], 2)} | — |",
        f"| CPU seconds, most of any rank | {number(s['cpu_s'], 2)} | <= 1.0 |",
        f"| wall time, 1 rank alone (median of {len(s['alone_walls'])}) | "
        f"{number(s['alone_s'], 2)} | <= 1 |",
        "",
    ]
    alone = size_view(res).get("alone") or []
    if alone:
        out += [
            "| run | imports s | gloo init s | make_loader s | first batch s | start-up s "
            "| start-up CPU s | load avg | result |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for k, a in enumerate(alone):
            r = a["ranks"][0] if a.get("ranks") else {}
            out.append(
                f"| {k + 1} | {number(r.get('import_s'), 2)} | {number(r.get('init_s'), 2)} | "
                f"{number(r.get('build_s'), 3)} | {number(r.get('first_batch_s'), 3)} | "
                f"{number(r.get('startup_s'), 3)} | {number(_cpu(r), 3)} | "
                f"{a['load_before']:.1f} | {result(a)}{_compiled(r)} |"
            )
        out.append("")
    return out


def per_rank_section(res: dict[str, Any], heading: str) -> list[str]:
    """ffcv-pairs' ranks at the largest size, one line each."""
    view = size_view(res)
    row = find_row(view, "ours")
    out = [f"{heading} ({view['config']['n']:,} pairs)", ""]
    if not row:
        return [*out, "Not run (the run stopped before).", ""]
    out += [
        "*epoch gap*: last batch of an epoch to the first of the next (first / median / max, "
        "count), s. *PSS after imports*: the rank's own PSS before it built its loader.",
        "",
        "| rank | imports s | gloo init s | make_loader s | first batch s | start-up s "
        "| start-up CPU s | samples/s | epochs | epoch gap s | PSS after imports MiB | error |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in row["ranks"]:
        out.append(
            f"| {r['rank']} | {number(r.get('import_s'), 2)} | {number(r.get('init_s'), 2)} | "
            f"{number(r.get('build_s'), 3)} | {number(r.get('first_batch_s'), 3)} | "
            f"{number(r.get('startup_s'), 3)} | {number(_cpu(r), 3)} | {number(r.get('rate'))} | "
            f"{r.get('epochs_done', 0)} | "
            f"{_gap(r)} | {number(r.get('pss_imports_mb'))} | {r.get('error', '')} |"
        )
    pk, mean = row["memory"].get("peak_mb", {}), row["memory"].get("mean_mb", {})
    out += [
        "",
        f"Node: **{number(row['rate'])} samples/s** (sum over ranks). Summed PSS of the "
        f"{pk.get('procs', 0)} rank processes: peak {number(pk.get('pss'))} MiB with the mapped "
        f".beton pages, {number(pk.get('pss_own'))} MiB without (mean {number(mean.get('pss'))} / "
        f"{number(mean.get('pss_own'))} MiB); USS Σ peak {number(pk.get('uss'))} MiB. Load average "
        f"{row['load_before']:.1f} before, {row['load_after']:.1f} after.",
        "",
    ]
    return out
