"""The user-scale targets (PASS / FAIL, with where the time or memory goes on a miss), and
the projection of a run at 3M pairs from a smaller one."""

from __future__ import annotations

from typing import Any

from bench.tables.targets import target

__all__ = ["FULL", "estimate_full", "find_row", "row_rate", "user_targets"]

FULL = 3_000_000
PASS, FAIL = "PASS", "FAIL"


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


def _startup_target(res: dict[str, Any]) -> dict[str, Any]:
    ranks = find_row(res, "ours").get("ranks", [])
    times = [r.get("startup_s") for r in ranks]
    worst = max(t for t in times if t) if times and all(times) else None
    t = _check("every rank's start-up (make_loader + first batch)", worst, 1.0, " s", False)
    if worst is not None and t["verdict"] == FAIL:
        r = max(ranks, key=lambda r: r["startup_s"])
        cpu = r.get("build_cpu_s", 0) + r.get("first_batch_cpu_s", 0)
        t["note"] = (
            f"{worst:.2f} s, {worst - 1:.2f} s over: rank {r['rank']} built in "
            f"{r['build_s']:.2f} s, first batch {r['first_batch_s']:.2f} s, {cpu:.2f} CPU s in "
            f"all (load average {find_row(res, 'ours').get('load_before', 0):.1f} on "
            f"{res['machine']['cores']} cores: the rest is waiting for a core)"
        )
    return t


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


def user_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The four targets of the user-scale issue, in the report's order."""
    return [_convert_target(res), _startup_target(res), _memory_target(res), _speed_target(res)]


def estimate_full(res: dict[str, Any]) -> dict[str, Any]:
    """Time and disk of a run at 3M pairs, scaled linearly from this run's ``n``."""
    n = res["config"]["n"]
    k = FULL / n
    src, conv, clean = res.get("source", {}), res.get("convert", {}), res.get("cleanup", {})
    rows = [r["wall_s"] for r in res.get("rows", [])]
    out: dict[str, Any] = {"scale": k}
    if src:
        out["source_s"] = src["seconds"] * k
        out["disk_bytes"] = (src["src_bytes"] + src["pack_bytes"]) * k
        out["inodes"] = 3 * FULL + FULL // res["config"]["pack_size"]
    if conv.get("wall_s"):
        out["convert_s"] = conv["wall_s"] * k
        out["disk_bytes"] = out.get("disk_bytes", 0) + (conv.get("beton_bytes") or 0) * k
    if rows:
        out["rows_s"] = sum(rows)  # time-boxed: about the same at 3M, plus building the lists
    if clean:
        out["cleanup_s"] = clean["seconds"] * k
    parts = ("source_s", "convert_s", "rows_s", "cleanup_s")
    out["total_s"] = sum(out.get(p, 0) for p in parts)
    return out
