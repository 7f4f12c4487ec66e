"""The user-scale report: ``user-scale-<date>.md``, ``.json``, ``-chart.png`` (the rows at the
largest size) and ``-memory.png`` (node memory against N).

Sections: the targets; the headline (the speed ratio and the size it was measured at, memory
against N extrapolated to the user's 200 GB node, start-up three ways); the source; the
conversion at each size; every row at every size (:mod:`bench.scale.user_sections`); node
memory against N (:mod:`bench.scale.user_fit`); start-up per rank; ffcv-pairs per rank; the
cleanup; the estimate for 3M pairs; the machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.scale.user_chart import memory_chart, rows_chart
from bench.scale.user_fit import memory_curves, short_count
from bench.scale.user_sections import (
    memory_section,
    per_rank_section,
    rows_section,
    startup_section,
)
from bench.scale.user_targets import (
    FULL,
    estimate_full,
    size_view,
    speed_at,
    startup_three_ways,
    user_targets,
)
from bench.tables.report import machine_section, number

__all__ = ["SECTIONS", "render_user_report", "write_user_report"]

GIB = 1 << 30
SECTIONS = (
    "## Targets",
    "## The headline",
    "## 1. Source",
    "## 2. Conversion at each size",
    "## 3. Every row at every size",
    "## 4. Node memory against N",
    "## 5. Start-up per rank, three ways",
    "## 6. ffcv-pairs per rank at the largest size",
    "## 7. Cleanup",
    "## Estimate for 3M pairs",
    "## Machine",
    "## Chart of the largest size",
)


def _targets(res: dict[str, Any]) -> list[str]:
    out = [
        SECTIONS[0],
        "",
        "| target | goal | measured | verdict | note |",
        "|---|---|---:|---|---|",
    ]
    for t in res["targets"]:
        val = "—" if t["value"] is None else f"{t['value']:.3g}"
        out.append(
            f"| {t['target']} | {t['goal']} | {val} | **{t['verdict']}** | {t.get('note', '')} |"
        )
    return [*out, ""]


def _curve(curves: list[dict[str, Any]], kind: str, workers: int, field: str) -> dict[str, Any]:
    for c in curves:
        if (c["kind"], c["workers"], c["field"]) == (kind, workers, field):
            return c
    return {}


def _reach(c: dict[str, Any]) -> str:
    if not c.get("fit"):
        return "no fit (fewer than two sizes)"
    a, b = c["fit"]
    if b <= 0:
        return "no growth measured"
    bound = "at most " if c["basis"] == "lower bounds" else ""
    return (
        f"{b * (1 << 20):,.0f} bytes per pair over a base of {a:,.0f} MiB: the user's 200 GB "
        f"node is full at {bound}N ≈ {short_count(c['n_user'])}"
    )


def _headline(res: dict[str, Any], curves: list[dict[str, Any]]) -> list[str]:
    cfg = res["config"]
    w, k = cfg["world_size"], max(cfg["workers"])
    at = speed_at(res)
    if at:
        speed = (
            f"**Speed**: ffcv-pairs delivers **{at['ratio']:,.0f}x** the samples/s of the user's "
            f"{w} x {k} setup at **{at['n']:,} pairs**, the largest size where that setup "
            f"delivered a steady rate ({at['ours']:,.0f} against {at['theirs']:,.0f})."
        )
    else:
        speed = (
            f"**Speed**: not measured: the user's {w} x {k} setup delivered no steady rate at any "
            "size."
        )
    user, ours = _curve(curves, "lists", k, "pss"), _curve(curves, "ours", 0, "pss_own")
    memory = (
        f"**Memory** (peak PSS summed over the node): the user's {w} x {k} setup grows by "
        f"{_reach(user)}; ffcv-pairs (without its mapped .beton) by {_reach(ours)}."
    )
    s = startup_three_ways(res)
    startup = (
        f"**Start-up** per rank (make_loader + first batch) at {s['n']:,} pairs: "
        f"{number(s['cpu_s'], 2)} CPU s (most of any rank), {number(s['wall_s'], 2)} s wall "
        f"with {s['ranks']} ranks on {res['machine']['cores']} cores, {number(s['alone_s'], 2)} "
        "s wall for 1 rank alone."
    )
    return [SECTIONS[1], "", f"- {speed}", f"- {memory}", f"- {startup}", ""]


def _source(res: dict[str, Any]) -> list[str]:
    cfg, src = res["config"], res.get("source")
    out = [SECTIONS[2], ""]
    if not src:
        return [*out, "Not made (the run stopped before).", ""]
    fb = src["file_bytes"]
    return [
        *out,
        f"{cfg['n']:,} pairs as `train_A_images_{{i}}.pt`, `train_B_images_{{i}}.pt`, "
        f"`train_labels_{{i}}.pt` ({3 * cfg['n']:,} `torch.save` archives: uint8"
        f"{list(cfg['shape'])} A and B, int64 scalar label), and the same pairs as "
        f"{src['packs']:,} packs of {cfg['pack_size']} (`torch.save` of a list of (A, B, label) "
        "tensors), made once at the largest size: size N reads the first N files of each kind "
        f"and the first ceil(N / {cfg['pack_size']}) packs. The images are tiny so that 3M "
        "pairs fit this machine's disk: every file takes a whole block whatever it holds, so "
        "the file count, not the pixels, is what this run is about. Made by patching the bytes "
        "of one `torch.save` archive per kind and index width (not timed): "
        f"{src['seconds']:.1f} s, {src['files_per_s']:,.0f} files/s, {cfg['gen_workers']} "
        f"processes x 8 threads. Checked: {src['verified_files']} files loaded with "
        "`torch.load` and CRC-checked with `zipfile`, against the seeded pairs.",
        "",
        f"On disk: {fb['A_images']:,} + {fb['B_images']:,} + {fb['labels']:,} bytes per pair "
        f"(A, B, label; whole blocks), the folder itself {src['dir_bytes'] / 2**20:,.1f} MiB, "
        f"{src['src_bytes'] / GIB:.2f} GiB in all; packs {src['pack_bytes'] / GIB:.2f} GiB. "
        f"`torch.load` of these files in one process (warm cache): {src['load_per_s']:,.0f} "
        "files/s.",
        "",
    ]


def _convert(res: dict[str, Any]) -> list[str]:
    out = [
        SECTIONS[3],
        "",
        "`writers/write_beton.py SRC OUT --split train --workers "
        f"{res['config']['writer_workers']} --limit N` as a subprocess, one .beton per size "
        "(the largest without `--limit`); the folder it lists holds the files of the largest "
        "size at every size. *before write_pairs*: interpreter, imports, listing the folder. "
        "Peak RSS: the writer or its largest worker (`wait4` ru_maxrss); RSS Σ / PSS Σ: its "
        "process tree, sampled.",
        "",
        "| N | wall s | pairs/s | inside write_pairs s | before it s | peak RSS MiB "
        "| RSS Σ / PSS Σ MiB | .beton MiB | exit |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    notes = []
    for entry in res.get("sizes", []):
        c = entry.get("convert")
        if not c:
            out.append(f"| {entry['n']:,} | not run |" + " |" * 7)
            continue
        tree, size = c["tree"], c.get("beton_bytes")
        exit_ = str(c["returncode"]) + (f": {c['error']}" if "error" in c else "")
        out.append(
            f"| {entry['n']:,} | {c['wall_s']:,.1f} | {number(c['rate'])} | "
            f"{number(c.get('inside_s'), 1)} | {number(c.get('outside_s'), 1)} | "
            f"{c['maxrss_mb']:,.0f} | {number(tree['rss'])} / {number(tree['pss'])} | "
            f"{number(size / 2**20 if size else None, 1)} | {exit_} |"
        )
        if "stopped" in c:
            notes.append(f"{entry['n']:,}: {c['stopped']}, {c.get('progress', '')}")
        if "fallback_s" in c:
            notes.append(
                f"{entry['n']:,}: the writer did not finish; the rows read "
                "`write_pairs(ArraySource(A, B, labels))` of the same seeded pairs, written in "
                f"{c['fallback_s']:.0f} s (not a conversion time)"
            )
        if "listing" in c:
            notes.append(
                f"{entry['n']:,}: `{c['command']}`; imports alone (a fresh interpreter) "
                f"{c['import_s']:.1f} s; `os.scandir` of the folder (timed apart, before) "
                f"{c['listing']['seconds']:.2f} s for {c['listing']['entries']:,} entries"
            )
    if not res.get("sizes"):
        out.append("| — | not run |" + " |" * 7)
    return [*out, "", *(f"- {n}" for n in notes), ""]


def _cleanup(res: dict[str, Any]) -> list[str]:
    c = res.get("cleanup", {})
    left = c.get("left")
    line = (
        f"Deleted everything it wrote in {c.get('seconds', 0):.1f} s."
        if not left
        else f"Could not delete: {', '.join(left)}."
    )
    return [SECTIONS[8], "", line, ""]


def _estimate(res: dict[str, Any]) -> list[str]:
    e = estimate_full(res)
    n = res["config"]["n"]
    sizes = ", ".join(f"{x * e['scale']:,.0f}" for x in res["config"]["sizes"])
    out = [
        SECTIONS[9],
        "",
        f"This command with every size scaled by x{e['scale']:.3g} (sizes {sizes}), linearly "
        f"from this run's largest size, {n:,} pairs.",
    ]
    if n >= FULL:
        out[-1] = "This run's largest size was 3M pairs: the numbers above are the measurement."
    rows = [
        ("making the source", e.get("source_s")),
        ("conversions, every size", e.get("convert_s")),
        ("the rows at every size and the runs alone (time-boxed; not scaled)", e.get("rows_s")),
        ("cleanup", e.get("cleanup_s")),
        ("total", e.get("total_s")),
    ]
    out += ["", "| step | minutes |", "|---|---:|"]
    out += [f"| {a} | {number(b / 60 if b else None, 1)} |" for a, b in rows]
    if "disk_bytes" in e:
        out += [
            "",
            f"Disk: about {e['disk_bytes'] / GIB:.0f} GiB (the source and one .beton at a time) "
            f"and {e['inodes']:,} inodes (this machine had {res['space']['free_gib']:.0f} GiB "
            f"and {res['space']['free_inodes']:,.0f} inodes free).",
        ]
    return [*out, ""]


def render_user_report(res: dict[str, Any], curves: list[dict[str, Any]] | None = None) -> str:
    """The markdown of a result (``res["targets"]`` set; ``curves`` of
    :func:`bench.scale.user_fit.memory_curves`, made here when not given)."""
    cfg = res["config"]
    curves = memory_curves(res) if curves is None else curves
    sizes = ", ".join(f"{n:,}" for n in cfg["sizes"])
    head = [
        f"# The user's day at full scale, {res['date']}",
        "",
        f"Command: `{res['command']}`. Took {res['elapsed_s'] / 60:.1f} min. Sizes: {sizes} "
        f"pairs of uint8{list(cfg['shape'])} (seed {cfg['seed']}), one source made at the "
        f"largest. Load average at the start: {res['load_start']:.1f} on "
        f"{res['machine']['cores']} cores (shared machine: other jobs' load slows every row "
        "alike).",
        "",
    ]
    if res.get("error"):
        head += [f"**The run failed**: {res['error']}. What it measured before is below.", ""]
    machine = machine_section({**res, "extras": {}})
    machine[0] = SECTIONS[10]
    body = (
        _targets(res)
        + _headline(res, curves)
        + _source(res)
        + _convert(res)
        + rows_section(res, SECTIONS[4])
        + memory_section(res, curves, SECTIONS[5])
        + startup_section(res, SECTIONS[6])
        + per_rank_section(res, SECTIONS[7])
        + _cleanup(res)
        + _estimate(res)
        + machine
    )
    return "\n".join(head + body)


def write_user_report(res: dict[str, Any], out: Path) -> Path:
    """Targets, curves, markdown, JSON and charts into ``out``; returns the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"user-scale-{res['date']}"
    res["targets"] = user_targets(res)
    res["curves"] = memory_curves(res)
    res["speed_at"] = speed_at(res)
    res["startup"] = startup_three_ways(res)
    res["estimate"] = estimate_full(res)
    res["chart_memory"] = f"{stem}-memory.png"
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1, default=str))
    memory_chart(res, res["curves"], out / res["chart_memory"])
    chart = out / f"{stem}-chart.png"
    rows_chart(size_view(res), chart)
    md = out / f"{stem}.md"
    text = render_user_report(res, res["curves"])
    md.write_text(f"{text}\n{SECTIONS[11]}\n\n![{chart.stem}]({chart.name})\n")
    return md
