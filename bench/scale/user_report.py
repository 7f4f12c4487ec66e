"""The user-scale report: ``user-scale-<date>.md``, ``.json`` and ``-chart.png``."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from bench.scale.user_targets import FULL, estimate_full, find_row, row_rate, user_targets
from bench.tables.charts import pyplot
from bench.tables.report import machine_section, number

__all__ = ["SECTIONS", "render_user_report", "write_user_report"]

GIB = 1 << 30
SECTIONS = (
    "## Targets",
    "## 1. Source",
    "## 2. Conversion",
    "## 3. Training like the user",
    "## 4. The user's setups",
    "## 5. Cleanup",
    "## Estimate for 3M pairs",
    "## Machine",
    "## Chart",
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


def _source(res: dict[str, Any]) -> list[str]:
    cfg, src = res["config"], res.get("source")
    out = [SECTIONS[1], ""]
    if not src:
        return [*out, "Not made (the run stopped before).", ""]
    fb = src["file_bytes"]
    return [
        *out,
        f"{cfg['n']:,} pairs as `train_A_images_{{i}}.pt`, `train_B_images_{{i}}.pt`, "
        f"`train_labels_{{i}}.pt` ({3 * cfg['n']:,} `torch.save` archives: uint8"
        f"{list(cfg['shape'])} A and B, int64 scalar label), and the same pairs as "
        f"{src['packs']:,} packs of {cfg['pack_size']} (`torch.save` of a list of (A, B, label) "
        "tensors). The images are tiny so that 3M pairs fit this machine's disk: every file "
        "takes a whole block whatever it holds, so the file count, not the pixels, is what "
        "this run is about. Made by patching the bytes of one `torch.save` archive per kind "
        f"and index width (not timed): {src['seconds']:.1f} s, {src['files_per_s']:,.0f} "
        f"files/s, {cfg['gen_workers']} processes x 8 threads. Checked: "
        f"{src['verified_files']} files loaded with `torch.load` and CRC-checked with "
        "`zipfile`, against the seeded pairs.",
        "",
        f"On disk: {fb['A_images']:,} + {fb['B_images']:,} + {fb['labels']:,} bytes per pair "
        f"(A, B, label; whole blocks), the folder itself {src['dir_bytes'] / 2**20:,.1f} MiB, "
        f"{src['src_bytes'] / GIB:.2f} GiB in all; packs {src['pack_bytes'] / GIB:.2f} GiB. "
        f"`torch.load` of these files in one process (warm cache): {src['load_per_s']:,.0f} "
        "files/s.",
        "",
    ]


def _convert(res: dict[str, Any]) -> list[str]:
    c = res.get("convert")
    out = [SECTIONS[2], ""]
    if not c:
        return [*out, "Not run.", ""]
    tree = c["tree"]
    rows = [
        ("command", f"`{c['command']}`"),
        ("wall time", f"{c['wall_s']:,.1f} s" + (f" ({c['stopped']})" if "stopped" in c else "")),
        ("pairs/s (wall)", number(c["rate"])),
        ("inside write_pairs (its own report)", number(c.get("inside_s"), 1) + " s"),
        ("before write_pairs: interpreter, imports, listing", number(c.get("outside_s"), 1) + " s"),
        ("imports alone (a separate fresh interpreter)", f"{c['import_s']:.1f} s"),
        (
            "`os.scandir` of the source folder (timed separately, before)",
            f"{c['listing']['seconds']:.2f} s for {c['listing']['entries']:,} entries",
        ),
        (
            "peak RSS, writer or its largest worker (`wait4` ru_maxrss)",
            f"{c['maxrss_mb']:,.0f} MiB",
        ),
        (
            "peak RSS Σ / PSS Σ over its process tree (sampled)",
            f"{number(tree['rss'])} / {number(tree['pss'])} MiB",
        ),
        (".beton", f"{(c['beton_bytes'] or 0) / 2**20:,.1f} MiB" if c["beton_bytes"] else "none"),
        ("exit status", str(c["returncode"]) + (f": {c['error']}" if "error" in c else "")),
    ]
    if "progress" in c:
        rows.append(("progress when stopped", c["progress"]))
    if "fallback_s" in c:
        rows.append(
            (
                "the .beton the rows read",
                "the writer did not finish: `write_pairs(ArraySource(A, B, labels))` of the same "
                f"seeded pairs, {c['fallback_s']:.0f} s (not a conversion time)",
            )
        )
    return [*out, "| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows), ""]


def _gap(r: dict[str, Any]) -> str:
    if not r.get("gap_n"):
        return "—"
    return f"{r['gap_first']:.3f} / {r['gap_median']:.3f} / {r['gap_max']:.3f} ({r['gap_n']})"


def _cpu(r: dict[str, Any]) -> float | None:
    parts = (r.get("build_cpu_s"), r.get("first_batch_cpu_s"))
    return None if None in parts else sum(parts)  # type: ignore[arg-type]


def _ours(res: dict[str, Any]) -> list[str]:
    cfg, row = res["config"], find_row(res, "ours")
    out = [
        f"{SECTIONS[3]}: ffcv-pairs on {cfg['world_size']} ranks",
        "",
    ]
    if not row:
        return [*out, "Not run (the run stopped before).", ""]
    m = row["memory"]
    out += [
        f"{cfg['world_size']} spawned ranks joined a gloo process group (as under torchrun); "
        f"each ran `make_loader(train.beton, batch_size={cfg['global_batch'] // cfg['world_size']}"
        f", order='quasi_random', augment=PairAugment(hflip=0.5, crop={list(cfg['shape'][-2:])}, "
        f"crop_padding={cfg['crop_padding']}))` (global batch {cfg['global_batch']}), no model, "
        f"for {cfg['time_box']:g} s after its first batch and past one epoch boundary. The "
        "numba cache was filled first in another process (a user compiles once per machine). "
        "*start-up* = make_loader + first batch; imports and joining the group are listed apart; "
        "*CPU s*: the CPU time the rank's process spent on its start-up (all its threads), "
        "which other jobs on the machine do not inflate. "
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
    pk, mean = m.get("peak_mb", {}), m.get("mean_mb", {})
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


def _gap_all(row: dict[str, Any]) -> str:
    gaps = [r["gap_median"] for r in row["ranks"] if r.get("gap_n")]
    if not gaps:
        return "no epoch ended"
    return f"{statistics.median(gaps):.3f}"


def _result(row: dict[str, Any]) -> str:
    if row["stopped"] == "memory":
        pss = row["memory"].get("last_pss_mb", 0) / 1024
        return f"stopped at {pss:.1f} GiB PSS (MemAvailable {row['tripped_gib']:.1f} GiB)"
    if row["stopped"] == "deadline":
        return "stopped at the deadline"
    errors = {r["error"] for r in row["ranks"] if "error" in r}
    return "; ".join(sorted(errors)) if errors else "ran its time box"


def _user(res: dict[str, Any]) -> list[str]:
    cfg = res["config"]
    out = [
        f"{SECTIONS[4]}, side by side (same files, {cfg['time_box']:g} s each)",
        "",
        f"Each row: {cfg['world_size']} spawned ranks in a gloo group, `DataLoader` with a "
        "`DistributedSampler` (shuffle, drop_last), persistent workers, batch "
        f"{cfg['global_batch'] // cfg['world_size']} per rank, reading for {cfg['time_box']:g} s "
        "after each rank's first batch, then every process killed. *paths in lists*: the "
        "user's `Dataset`, `self.a_paths = [...]` etc. built in `__init__` (3 x N strings per "
        "rank), three `torch.load` per item. *packs*: one item = one pack, `torch.load` once "
        "and collated (a batch of 1000 from one pack: the advice at its best). Memory: sums "
        "over every process of the row (ranks + workers), sampled about twice a second; the "
        "mean is over the time after every rank had its first batch. A row is stopped when "
        f"MemAvailable drops below {cfg['floor_gib']:g} GiB. *over its life*: a row where some "
        "rank had fewer than 2 batches has no steady rate; this is all it delivered over the "
        "seconds from launch until it was stopped.",
        "",
        "| setup | processes | samples/s | slowest start-up s (build + first batch) "
        "| epoch gap s (median over ranks) | PSS Σ peak MiB | PSS Σ mean MiB | USS Σ peak MiB "
        "| MemAvailable min GiB | load avg | result |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in res.get("rows", []):
        pk, mean = row["memory"].get("peak_mb", {}), row["memory"].get("mean_mb", {})
        starts = [r for r in row["ranks"] if r.get("startup_s") is not None]
        slow = max(starts, key=lambda r: r["startup_s"], default=None)
        start = (
            f"{slow['startup_s']:.2f} ({slow['build_s']:.2f} + {slow['first_batch_s']:.2f})"
            if slow
            else "—"
        )
        pss = pk.get("pss_own") if row["kind"] == "ours" else pk.get("pss")
        mpss = mean.get("pss_own") if row["kind"] == "ours" else mean.get("pss")
        title = row["title"] + (" (PSS without mapped .beton)" if row["kind"] == "ours" else "")
        value, over_life = row_rate(row)
        rate = f"— ({number(value)} over its life)" if over_life else number(value)
        out.append(
            f"| {title} | {pk.get('procs', 0)} | {rate} | {start} | {_gap_all(row)} | "
            f"{number(pss)} | "
            f"{number(mpss)} | {number(pk.get('uss'))} | {row['min_available_gib']:.1f} | "
            f"{row['load_before']:.1f} | {_result(row)} |"
        )
    if not res.get("rows"):
        out.append("| not run (the run stopped before) |" + " |" * 10)
    return [*out, ""]


def _cleanup(res: dict[str, Any]) -> list[str]:
    c = res.get("cleanup", {})
    left = c.get("left")
    line = (
        f"Deleted everything it wrote in {c.get('seconds', 0):.1f} s."
        if not left
        else f"Could not delete: {', '.join(left)}."
    )
    return [SECTIONS[5], "", line, ""]


def _estimate(res: dict[str, Any]) -> list[str]:
    e = estimate_full(res)
    n = res["config"]["n"]
    out = [SECTIONS[6], "", f"Scaled linearly from this run's {n:,} pairs (x{e['scale']:.3g})."]
    if n >= FULL:
        out[-1] = "This run was at 3M pairs: the numbers above are the measurement."
    rows = [
        ("making the source", e.get("source_s")),
        ("conversion", e.get("convert_s")),
        (
            "the rows (time-boxed; building 3 x 3M path strings per rank adds seconds)",
            e.get("rows_s"),
        ),
        ("cleanup", e.get("cleanup_s")),
        ("total", e.get("total_s")),
    ]
    out += ["", "| step | minutes at 3M |", "|---|---:|"]
    out += [f"| {a} | {number(b / 60 if b else None, 1)} |" for a, b in rows]
    if "disk_bytes" in e:
        out += [
            "",
            f"Disk: about {e['disk_bytes'] / GIB:.0f} GiB and {e['inodes']:,} inodes "
            f"(this machine had {res['space']['free_gib']:.0f} GiB and "
            f"{res['space']['free_inodes']:,.0f} inodes free).",
        ]
    return [*out, ""]


def render_user_report(res: dict[str, Any]) -> str:
    cfg = res["config"]
    head = [
        f"# The user's day at full scale, {res['date']}",
        "",
        f"Command: `{res['command']}`. Took {res['elapsed_s'] / 60:.1f} min. {cfg['n']:,} pairs "
        f"of uint8{list(cfg['shape'])} (seed {cfg['seed']}). Load average at the start: "
        f"{res['load_start']:.1f} on {res['machine']['cores']} cores (shared machine: other "
        "jobs' load slows every row alike).",
        "",
    ]
    machine = machine_section({**res, "extras": {}})
    machine[0] = SECTIONS[7]
    body = (
        _targets(res)
        + _source(res)
        + _convert(res)
        + _ours(res)
        + _user(res)
        + _cleanup(res)
        + _estimate(res)
        + machine
    )
    return "\n".join(head + body)


def _chart(res: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    from matplotlib.patches import Patch

    rows = [r for r in res.get("rows", []) if r["memory"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 0.7 * len(rows) + 2.2))
    names = [r["title"] for r in rows]
    colors = ["tab:green" if r["kind"] == "ours" else "tab:blue" for r in rows]
    rates = [r["rate"] or 0 for r in rows]
    ax1.barh(names, rates, color=colors)
    for i, rate in enumerate(rates):
        ax1.text(rate, i, f" {rate:,.0f}", va="center", fontsize=8)
    ax1.set_xscale("log")
    ax1.set_xlabel("samples/s of the node (log scale)")
    key = ["pss_own" if r["kind"] == "ours" else "pss" for r in rows]
    pss = [r["memory"]["peak_mb"][k] for r, k in zip(rows, key)]
    mean = [r["memory"]["mean_mb"][k] for r, k in zip(rows, key)]
    y = range(len(rows))
    ax2.barh([i + 0.2 for i in y], pss, 0.4, color=colors)
    ax2.barh([i - 0.2 for i in y], mean, 0.4, color="tab:gray")
    for i, v in enumerate(pss):
        ax2.text(v, i + 0.2, f" {v:,.0f}", va="center", fontsize=8)
    ax2.set_yticks(list(y), [""] * len(rows))
    ax2.set_xlabel("PSS summed over the node's processes, MiB")
    ax2.legend(
        handles=[Patch(color="tab:blue", label="peak"), Patch(color="tab:gray", label="mean")],
        loc="lower right",
    )
    fig.suptitle(
        f"{res['config']['n']:,} pairs, {res['date']} (ffcv-pairs in green; its PSS without "
        "the mapped .beton)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_user_report(res: dict[str, Any], out: Path) -> Path:
    """Targets, markdown, JSON and chart into ``out``; returns the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    res["targets"] = user_targets(res)
    res["estimate"] = estimate_full(res)
    stem = f"user-scale-{res['date']}"
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1, default=str))
    chart = out / f"{stem}-chart.png"
    _chart(res, chart)
    md = out / f"{stem}.md"
    md.write_text(render_user_report(res) + f"\n{SECTIONS[8]}\n\n![{chart.stem}]({chart.name})\n")
    return md
