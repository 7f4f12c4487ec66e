"""The report of ``python -m bench``: ``<name>.md`` (targets, tables, machine) and ``<name>.json``
(everything); the name is ``<kind>-<date>`` (:func:`bench.tables.suite.report_kind`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.tables.augops_report import augops_section

__all__ = ["machine_section", "number", "render_markdown", "write_report"]

MB = 1e6


def number(x: float | None, digits: int = 0) -> str:
    """``x`` with thousands separators and ``digits`` decimals; a dash for None."""
    if x is None:
        return "—"
    return f"{x:,.{digits}f}"


def _ratio(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.3g}x"


def _throughput(res: dict[str, Any]) -> list[str]:
    rows = res["throughput"]
    limit = rows.get("memcpy", {}).get("best")
    ours = rows.get("ours", {}).get("best")
    sb = res["data"]["sample_bytes"]
    cfg = res["config"]
    out = [
        f"## Throughput: best of {cfg['rounds']} interleaved round(s) (median in brackets)",
        "",
        f"{cfg['n']:,} pairs of {cfg['dtype']}{list(cfg['shape'])} + int64 label, batch "
        f"{cfg['batch_size']}, warm page cache. MB/s counts image bytes ({sb:,} per pair; "
        "MB = 10^6 B). Memory columns: MiB, peaks while running; Σ = summed over the "
        "contestant's process tree (DataLoader workers; for simulated ranks: the ranks, not "
        "the process that spawned them); *USS added* = USS Σ minus "
        "the process's USS after imports, before its loader was built.",
        "",
        "| contestant | samples/s | MB/s | x limit | ffcv-pairs is | build s | first batch s "
        "| epoch gap s | peak RSS | USS Σ | PSS Σ | USS added |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows.values():
        title = row["title"] + (" **(this project)**" if row["ours"] else "")
        if row["status"] != "ok":
            out.append(f"| {title} | {row['status']} |" + " |" * 10)
            continue
        best, med = row.get("best"), row.get("median")
        if best is None:
            rate = "no batch inside the time box"
        else:
            rate = f"{number(best)} ({number(med)})"
        mem = row.get("memory_mb", {})
        out.append(
            "| "
            + " | ".join(
                [
                    title,
                    rate,
                    number(best * sb / MB if best else None),
                    _ratio(best / limit if best and limit else None),
                    _ratio(ours / best if best and ours and row["key"] != "ours" else None),
                    number(row.get("build_s"), 3),
                    number(row.get("first_batch_s"), 3),
                    number(row.get("gap_s"), 3),
                    number(mem.get("hwm")),
                    number(mem.get("uss")),
                    number(mem.get("pss")),
                    number(row.get("uss_added_mb")),
                ]
            )
            + " |"
        )
    out += [
        "",
        f"Time-boxed rows ({cfg['time_box']:g} s per round, stopped mid-epoch, rebuilt each "
        f"round) read with batch size {cfg['slow_batch_size']}: every item loads a whole pack, "
        "so a batch of 256 would not arrive inside the box; per-sample cost does not depend on "
        f"the batch size. The LRU row keeps {cfg['lru_packs']} packs per worker. *epoch gap*: "
        "last batch of epoch e to first batch of e+1 (median). *first batch*: from `iter()` "
        "in a fresh process to the first batch. The limit is `np.copyto(dst, mm[data_start:"
        "data_end])` of the whole data region of the `.beton` into one preallocated, "
        "pre-touched array; one copy counts as all samples.",
        "",
    ]
    return out


def _startup(res: dict[str, Any]) -> list[str]:
    st = res.get("startup")
    if not st:
        return []
    from bench.tables.startup import STARTUP_KINDS

    out = [
        "## a. Start-up: loader construction + first batch, memory added",
        "",
        f"Tiny samples (uint8{st['shape']} A and B), batch {res['config']['batch_size']}, each "
        "in a fresh process after imports; this project's numba cache warmed by one run "
        "first (upstream compiles its pipeline in every process). Memory in MiB: *peak RSS "
        "added* = VmHWM - RSS before building; *USS added* after the first batch.",
        "",
        "| samples | loader | build s | first batch s | total s | peak RSS added | USS added |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for size, kinds in st["rows"].items():
        for kind, m in kinds.items():
            if "error" in m:
                out.append(f"| {int(size):,} | {STARTUP_KINDS[kind]} | {m['error']} | | | | |")
                continue
            out.append(
                f"| {int(size):,} | {STARTUP_KINDS[kind]} | {number(m['build_s'], 3)} | "
                f"{number(m['first_batch_s'], 3)} | {number(m['total_s'], 3)} | "
                f"{number(m['peak_rss_added_mb'])} | {number(m['uss_added_mb'])} |"
            )
    return [*out, ""]


def _writer(res: dict[str, Any]) -> list[str]:
    w = res.get("writer")
    if not w:
        return []
    if "rows" not in w:  # a results file from before this table's current form
        return ["## b. Writer", "", "(an older form of this table: see the .json)", ""]
    from bench.tables.writer_table import JOBS

    shape = f"{w['dtype']}{w['shape']}"
    out = [
        "## b. Writer: `write_pairs` vs only reading its per-sample .pt sources",
        "",
        f"Per-sample layout: three files per pair (A and B {shape}, an int64 label). Every "
        f"row is one command in a fresh process with {w['workers']} forked worker processes; "
        f"{w['cache']} page cache (an `open` + `read()` pass over the folder right before "
        "every row). *pairs/s* = pairs / the command's own work time: the writer's is the "
        "rate its summary line reports (`write_pairs`, from the call to the renamed, "
        "checksummed file; after the directory scan), the readers' is from starting their "
        "worker pool to joining it; imports are left out on both sides. *command s*: the "
        "whole command, interpreter start and imports included. Memory in MiB: the peak over "
        "time (sampled every 0.1 s) of the sum over the command's process tree; RSS Σ counts "
        "pages a forked worker shares with its parent in every process, PSS Σ splits them.",
        "",
        "| pairs | job | pairs/s | x torch.load | x read() | work s | command s "
        "| peak RSS Σ | peak PSS Σ | processes |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for n, row in w["rows"].items():
        notes.append(
            f"{int(n):,} pairs generated in {number(row['generate_s'], 1)} s (not timed in the "
            f"rows), {row['checked']} files checked against `torch.load`"
        )
        load, read = (row[k].get("rate") for k in ("load", "read"))
        for job, title in JOBS.items():
            m = row[job]
            if "error" in m:
                out.append(f"| {int(n):,} | {title} | {m['error']} |" + " |" * 7)
                continue
            rate = m["rate"]
            timed = "" if m["timed"] in ("summary line", "pool start to join") else " (wall)"
            out.append(
                f"| {int(n):,} | {title} | {number(rate)}{timed} | "
                f"{_ratio(rate / load if load else None)} | "
                f"{_ratio(rate / read if read else None)} | {number(m['work_s'], 2)} | "
                f"{number(m['wall_s'], 2)} | {number(m['peak_rss_mb'])} | "
                f"{number(m['peak_pss_mb'])} | "
                f"{m['procs']} |"
            )
    return [*out, "", "Files: " + "; ".join(notes) + ".", ""]


def _memory(res: dict[str, Any]) -> list[str]:
    mem = res.get("memory", {})
    cfg = res["config"]
    out = [
        "## c. Total memory of simulated ranks",
        "",
        f"{cfg['world_size']} spawned ranks on the same data; sums over every rank and its "
        "DataLoader workers (not the benchmark process that spawned the ranks: the same for "
        "every row), peaks while reading, MiB. The per-sample .pt "
        f"rows ran at least {cfg['memory_seconds']:g} s and until every rank had "
        f"{cfg.get('memory_min_batches', 0)} batch(es); a row marked *killed* was stopped at "
        "the time box before that (its memory is a lower bound). The ffcv-pairs row is the 4-rank "
        "contestant of the throughput table.",
        "",
        "*PSS Σ own* leaves out mapped dataset pages (the OS page cache: shared by every "
        "process on the node and reclaimable; a loader that `read()`s its files holds the same "
        "pages without them showing in its PSS); the target is judged on it.",
        "",
        "| configuration | processes | USS Σ | PSS Σ | PSS Σ own | RSS Σ | samples/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, row in mem.items():
        if "skipped" in row:
            out.append(f"| {key} | skipped: {row['skipped']} | | | | | |")
            continue
        if row.get("status", "ok") != "ok":
            out.append(f"| {row['title']} | {row['status']} | | | | | |")
            continue
        m = row.get("memory_mb", {})
        killed = " (*killed*)" if row.get("killed") else ""
        out.append(
            f"| {row['title']}{killed} | {m.get('procs', 0)} | {number(m.get('uss'))} | "
            f"{number(m.get('pss'))} | {number(m.get('pss_own'))} | {number(m.get('rss'))} | "
            f"{number(row.get('best'))} |"
        )
    return [*out, ""]


def _cold(res: dict[str, Any]) -> list[str]:
    cold = res.get("cold", {})
    out = ["## d. Cold cache and read amplification", ""]
    if "skipped" in cold:
        out.append(f"Cold-cache rows skipped: {cold['skipped']}.")
    elif "gib" in cold:
        from bench.tables.cold import cold_lines

        out += cold_lines(cold)
    else:
        out += [
            "Page cache dropped (`sync; echo 1 > /proc/sys/vm/drop_caches`) before each row; "
            "one epoch, loader build not timed. This VM's disk is served from host memory, so "
            "cold reads are cheap here; the model below is the better guide to real disks.",
            "",
            "| cold read | samples/s | s |",
            "|---|---:|---:|",
        ]
        for name, m in cold.get("rows", {}).items():
            label = "memcpy limit" if name == "memcpy" else f"ffcv-pairs, order={name}"
            if "error" in m:
                out.append(f"| {label} | {m['error']} | |")
            else:
                out.append(f"| {label} | {number(m['rate'])} | {number(m['seconds'], 3)} |")
    amp = res.get("amplification")
    if amp:
        out += [
            "",
            f"Read-amplification model (readahead window {amp['readahead'] >> 10} KiB): per "
            "chunk of k consecutive batches in loader order, the distinct file pages, 4 KiB OS "
            "pages and readahead windows touched; *read* = windows x window size per chunk, "
            "assuming nothing stays cached between chunks; amplification = bytes read over the "
            "epoch / bytes the samples hold.",
        ]
        for name in ("bench file", "virtual file"):
            part = amp[name]
            meta = part["meta"]
            size = f", {meta['file_gb']:.1f} GiB" if "file_gb" in meta else ""
            out += [
                "",
                f"**{name}**: {meta['samples']:,} samples per epoch{size}, page "
                f"{meta['page_size'] >> 20} MiB, window_bytes {meta['window_bytes'] >> 20} MiB.",
                "",
                "| order | k batches | file pages | 4 KiB pages | RA windows | MiB read/chunk "
                "| amplification |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for r in part["rows"]:
                out.append(
                    f"| {r['order']} | {r['batches']} | {number(r['file_pages'], 1)} | "
                    f"{number(r['os_pages'])} | {number(r['ra_windows'])} | "
                    f"{number(r['mb_read_per_chunk'], 1)} | {r['amplification']:.2f}x |"
                )
    return [*out, ""]


def _targets(res: dict[str, Any]) -> list[str]:
    out = [
        "## Targets",
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


def machine_section(res: dict[str, Any]) -> list[str]:
    """The ``## Machine`` section: ``res["machine"]`` and each extra of ``res["extras"]``."""
    m, ex = res["machine"], res["extras"]
    lines = [
        "## Machine",
        "",
        f"- {m['cores']} cores ({m['cpu']}), {m['ram_gib']:.1f} GiB RAM, Linux {m['kernel']}, "
        f"CUDA: {'yes' if m['cuda'] else 'no'}",
        f"- python {m['python']}, torch {m['torch']}, numpy {m['numpy']}, numba {m['numba']}, "
        f"ffcv {m['ffcv']}, ffcv-pairs {m['ffcv-pairs']} (commit {m.get('commit', 'unknown')})",
    ]
    for name, e in ex.items():
        if e.get("version"):
            lines.append(
                f"- {name} {e['version']} (own venv with torch {e.get('torch')}, "
                f"{number(e.get('venv_mib'))} MiB)"
            )
        else:
            lines.append(f"- {name}: could not run: {e['why']}")
    return [*lines, ""]


def render_markdown(res: dict[str, Any]) -> str:
    cfg = res["config"]
    head = [
        f"# ffcv-pairs benchmark, {res['date']} ({res['label']} run)",
        "",
        f"Command: `{res['command']}`. Took {res['elapsed_s'] / 60:.1f} min. "
        f"Data: {cfg['n']:,} generated pairs (seed {cfg['seed']}).",
        "",
    ]
    body = (
        _targets(res)
        + _throughput(res)
        + _startup(res)
        + _writer(res)
        + _memory(res)
        + _cold(res)
        + augops_section(res)
        + machine_section(res)
    )
    return "\n".join(head + body)


def write_report(res: dict[str, Any], out: Path, name: str, charts: list[Path]) -> Path:
    """Write ``<name>.md`` and ``<name>.json`` into ``out``; returns the md."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{name}.md"
    text = render_markdown(res)
    if charts:
        text += "\n## Charts\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in charts) + "\n"
    md.write_text(text)
    (out / f"{name}.json").write_text(json.dumps(res, indent=1, default=str))
    return md
