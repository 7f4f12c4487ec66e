"""The user-scale targets (PASS / FAIL, with where the time or memory goes on a miss), the
size the speed ratio is measured at, and the projection of a run at 3M pairs from a smaller one.

A result holds one entry per size (``res["sizes"]``: ``n``, ``convert``, ``rows``, and at
the largest ``alone``); :func:`size_view` gives one size as a result of its own (``config.n``,
``convert``, ``rows``), which the per-size checks read."""

from __future__ import annotations

import statistics
from typing import Any

from bench.tables.targets import target

__all__ = [
    "FULL",
    "estimate_full",
    "find_row",
    "row_rate",
    "size_view",
    "speed_at",
    "startup_three_ways",
    "user_targets",
]

FULL = 3_000_000
PASS, FAIL = "PASS", "FAIL"


def size_view(res: dict[str, Any], entry: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result of one size (default: the largest run) as a one-size result."""
    sizes = res.get("sizes") or [{}]
    entry = sizes[-1] if entry is None else entry
    config = {**res["config"], "n": entry.get("n", res["config"]["n"])}
    rows, conv = entry.get("rows", []), entry.get("convert", {})
    return {**res, "config": config, "rows": rows, "convert": conv, "alone": entry.get("alone")}


def find_row(res: dict[str, Any], kind: str, workers: int | None = None) -> dict[str, Any]:
    """The row of ``kind`` (and ``workers``); ``{}`` when it did not run."""
    for row in res.get("rows", []):
        if row["kind"] == kind and (workers is None or row["workers"] == workers):
            return row
    return {}


def _check(name: str, value: float | None, goal: float, unit: str, higher: bool) -> dict:
    t = target(name, value, goal, unit, higher=higher)
    t["verdict"] = {"MISS": FAIL}.get(t["verdict"], t["verdict"])
    return t


def _convert_target(res: dict[str, Any]) -> dict[str, Any]:
    n = res["config"]["n"]
    conv = res.get("convert", {})
    done = "inside_s" in conv
    minutes = conv["wall_s"] * FULL / n / 60 if done else None
    t = _check("conversion of 3M pairs (writer wall time)", minutes, 15, " min", higher=False)
    notes = [] if n >= FULL else [f"projected linearly from {n:,} pairs"]
    if not done:
        notes.append(conv.get("stopped") or conv.get("error") or "did not run")
    elif t["verdict"] == FAIL:
        assert minutes is not None
        load = res["source"]["load_per_s"]
        floor_min = 3 * FULL / (load * res["config"]["writer_workers"]) / 60
        listing = conv["listing"]["seconds"] * FULL / n
        notes.append(
            f"{minutes / 15:.1f}x over; at 3M: {conv['inside_s'] * FULL / n / 60:.0f} min in "
            f"write_pairs, {conv['outside_s'] * FULL / n / 60:.1f} min before it (imports "
            f"{conv['import_s']:.0f} s, listing ~{listing:.0f} s); 9M torch.load calls alone "
            f"at {load:,.0f}/s per process on {res['config']['writer_workers']} processes "
            f"take {floor_min:.0f} min"
        )
    t["note"] = "; ".join(notes)
    return t


def _cpu(r: dict[str, Any]) -> float | None:
    parts = (r.get("build_cpu_s"), r.get("first_batch_cpu_s"))
    return None if None in parts else sum(parts)  # type: ignore[arg-type]


def startup_three_ways(res: dict[str, Any]) -> dict[str, Any]:
    """Start-up (make_loader + first batch) of ffcv-pairs at the largest size: the slowest
    rank's wall time with every rank, the most CPU seconds a rank spent, and the median wall
    time of 1 rank alone (``None`` where not measured)."""
    view = size_view(res)
    ranks = find_row(view, "ours").get("ranks", [])
    walls = [r.get("startup_s") for r in ranks]
    cpus = [_cpu(r) for r in ranks]
    alone = [a["ranks"][0] for a in view.get("alone") or [] if a.get("ranks")]
    alone_walls = [r["startup_s"] for r in alone if r.get("startup_s") is not None]
    return {
        "n": view["config"]["n"],
        "ranks": len(ranks),
        "wall_s": max(walls) if walls and None not in walls else None,
        "cpu_s": max(cpus) if cpus and None not in cpus else None,  # type: ignore[type-var]
        "alone_s": statistics.median(alone_walls) if alone_walls else None,
        "alone_walls": alone_walls,
        "alone_cpu": [_cpu(r) for r in alone],
        "alone_asked": len(view.get("alone") or []),
    }


def _at(n: int) -> str:
    return "" if n >= FULL else f"measured at {n:,} pairs, not 3M"


def _startup_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    s = startup_three_ways(res)
    cpu = _check("start-up CPU s per rank (make_loader + first batch, most of any rank)",
                 s["cpu_s"], 1.0, " s", False)  # fmt: skip
    notes = [_at(s["n"])]
    if s["wall_s"] is not None:
        load = find_row(size_view(res), "ours").get("load_before", 0)
        notes.append(
            f"wall time with {s['ranks']} ranks: {s['wall_s']:.2f} s (slowest rank; load average "
            f"{load:.1f} on {res['machine']['cores']} cores: the rest is waiting for a core)"
        )
    cpu["note"] = "; ".join(x for x in notes if x)
    alone = _check("start-up wall time, 1 rank alone (median)", s["alone_s"], 1.0, " s", False)
    notes = [_at(s["n"])]
    if s["alone_walls"]:
        walls = ", ".join(f"{w:.2f}" for w in s["alone_walls"])
        notes.append(f"runs: {walls} s (numba cache warm, nothing else of this run running)")
    elif s["alone_asked"]:
        notes.append("no run of 1 rank alone got its first batch")
    else:
        notes.append("not run (the run stopped before, or --user-scale asked for none)")
    alone["note"] = "; ".join(x for x in notes if x)
    return [cpu, alone]


def _user12(res: dict[str, Any]) -> dict[str, Any]:
    workers = max(res["config"]["workers"])
    return find_row(res, "lists", workers)


def _memory_target(res: dict[str, Any]) -> dict[str, Any]:
    ours, user = find_row(res, "ours"), _user12(res)
    om, um = ours.get("memory", {}).get("peak_mb", {}), user.get("memory", {}).get("peak_mb", {})
    ratio = um["pss"] / om["pss_own"] if om and um else None
    w = max(res["config"]["workers"])
    t = _check(
        f"node memory, ffcv-pairs below 4 ranks x {w} workers (peak PSS sums; ffcv-pairs "
        "without its mapped .beton pages)",
        ratio,
        10,
        "x",
        True,
    )
    notes = []
    if ratio:
        notes.append(f"with the mapped pages counted: {um['pss'] / om['pss']:.2f}x")
    if user.get("stopped") == "memory":
        notes.append("the user's row was stopped by the memory floor: its PSS is a lower bound")
    if ratio and t["verdict"] == FAIL:
        base = sum(r.get("pss_imports_mb", 0) for r in ours["ranks"])
        notes.append(
            f"{10 / ratio:.1f}x short; ffcv-pairs {om['pss_own']:,.0f} MiB over 4 ranks, of "
            f"which {base:,.0f} MiB is torch + ffcv + gloo before any loader; the user's "
            f"{um['pss']:,.0f} MiB over {um['procs']} processes "
            f"({um['pss'] / max(1, um['procs']):,.0f} MiB each)"
        )
    t["note"] = "; ".join(notes)
    return t


def row_rate(row: dict[str, Any]) -> tuple[float | None, bool]:
    """A row's samples/s, and whether it is the rate over its life: a row that some rank
    never got past its first batch (stopped by the memory floor) has no steady rate, so it is
    judged by all it delivered over the seconds from launch until it was stopped."""
    if not row.get("rate") and row.get("life_rate"):
        return row["life_rate"], True
    return row.get("rate"), False


def _speed_target(res: dict[str, Any]) -> dict[str, Any]:
    """ffcv-pairs' samples/s over the user's (:func:`row_rate`)."""
    ours, user = find_row(res, "ours"), _user12(res)
    theirs, life = row_rate(user)
    ratio = ours["rate"] / theirs if ours.get("rate") and theirs else None
    w = max(res["config"]["workers"])
    t = _check(f"loader speed vs 4 ranks x {w} workers (samples/s)", ratio, 100, "x", True)
    notes = []
    if life:
        notes.append(
            f"the user's row gave some rank fewer than 2 batches: its rate is over its life, "
            f"{user['delivered']:,} samples in {user['life_s']:.1f} s from launch until stopped"
        )
    if ratio and t["verdict"] == FAIL:
        notes.append(
            f"{100 / ratio:.1f}x short: ffcv-pairs {ours['rate']:,.0f} samples/s with the paired "
            f"augmentation, the user's {theirs:,.0f} samples/s"
        )
    elif user and user.get("delivered") == 0:
        notes.append(
            f"the user's row delivered no sample in the {user['life_s']:.0f} s from launch until "
            f"it was stopped ({user.get('stopped') or 'time box'}): there is no rate to divide by"
        )
    elif user and not theirs:
        notes.append("the user's row delivered fewer than 2 batches per rank")
    if notes:
        t["note"] = "; ".join(notes)
    return t


def speed_at(res: dict[str, Any]) -> dict[str, Any] | None:
    """The speed ratio, ffcv-pairs' steady samples/s over the user's 4 x 12 row's, at the largest
    size where that row delivered a steady rate (every rank 2 batches or more) and ffcv-pairs
    one; ``None`` at no size."""
    for entry in reversed(res.get("sizes", [])):
        view = size_view(res, entry)
        ours, user = find_row(view, "ours").get("rate"), _user12(view).get("rate")
        if ours and user:
            return {"n": entry["n"], "ratio": ours / user, "ours": ours, "theirs": user}
    return None


def _speed_headline(res: dict[str, Any]) -> dict[str, Any]:
    """:func:`speed_at` judged against 100x; the sizes above it say why they have no ratio."""
    at = speed_at(res)
    w = max(res["config"]["workers"])
    name = f"loader speed vs 4 ranks x {w} workers (samples/s, steady rates)"
    t = _check(name, at["ratio"] if at else None, 100, "x", True)
    notes = []
    if at:
        notes.append(
            f"at {at['n']:,} pairs, the largest size where the user's row delivered a steady "
            f"rate: ffcv-pairs {at['ours']:,.0f}, the user's {at['theirs']:,.0f} samples/s"
        )
    for entry in res.get("sizes", []):
        if at and entry["n"] <= at["n"]:
            continue
        user = _user12(size_view(res, entry))
        if not user:
            continue
        life, over = row_rate(user)
        why = (
            "stopped by the memory floor"
            if user.get("stopped") == "memory"
            else ("stopped at its deadline" if user.get("stopped") == "deadline" else "")
        )
        what = (f"{life:,.0f} samples/s over its life" if over and life
                else "no steady rate")  # fmt: skip
        notes.append(f"at {entry['n']:,}: {', '.join(x for x in (why, what) if x)}")
    t["note"] = "; ".join(notes)
    return t


def user_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of the user-scale issues, in the report's order: conversion (the largest
    size), start-up CPU per rank and 1 rank alone (the largest size), node memory (the largest
    size), speed (at :func:`speed_at`)."""
    view = size_view(res)
    return [
        _convert_target(view),
        *_startup_targets(res),
        _memory_target(view),
        _speed_headline(res),
    ]


def estimate_full(res: dict[str, Any]) -> dict[str, Any]:
    """Time and disk of this command with its largest size at 3M pairs, every size scaled by
    the same factor, from this run (linear in N; the rows are time-boxed)."""
    n = res["config"]["n"]
    k = FULL / n
    src, clean = res.get("source", {}), res.get("cleanup", {})
    sizes = res.get("sizes", [])
    convs = [e["convert"]["wall_s"] for e in sizes if e.get("convert", {}).get("wall_s")]
    rows = [r["wall_s"] for e in sizes for r in [*e.get("rows", []), *(e.get("alone") or [])]]
    out: dict[str, Any] = {"scale": k}
    if src:
        out["source_s"] = src["seconds"] * k
        out["disk_bytes"] = (src["src_bytes"] + src["pack_bytes"]) * k
        out["inodes"] = 3 * FULL + FULL // res["config"]["pack_size"]
    if convs:
        out["convert_s"] = sum(convs) * k
        beton = max((e["convert"].get("beton_bytes") or 0 for e in sizes), default=0)
        out["disk_bytes"] = out.get("disk_bytes", 0) + beton * k  # one .beton at a time
    if rows:
        out["rows_s"] = sum(rows)  # time-boxed: about the same at 3M, plus building the lists
    if clean:
        out["cleanup_s"] = clean["seconds"] * k
    parts = ("source_s", "convert_s", "rows_s", "cleanup_s")
    out["total_s"] = sum(out.get(p, 0) for p in parts)
    return out
