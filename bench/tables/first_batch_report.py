"""The first-batch report (``python -m bench --first-batch``): ``first-batch-<date>.md`` and
its ``.json``, from what :func:`bench.tables.first_batch.measure_first_batch` returns."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from bench.tables.report import machine_section

__all__ = ["first_batch_lines", "write_first_batch_report"]

#: A warm run of this project that compiled this many CPU seconds is marked in its cell.
COMPILED_S = 1.0
#: The tables: a title and the measurement each cell gives.
TABLES = (
    ("Loader built + first batch, s (imports not included)", "loader_s"),
    ("numba compiling, CPU s (the whole process)", "compile_cpu_s"),
    ("The whole process, wall s (start to first batch, imports included)", "wall_s"),
    ("The whole process, CPU s (all its threads)", "cpu_s"),
)


def _cell(runs: list[dict[str, Any]], key: str) -> str:
    """Median (min-max) of ``key`` over ``runs``; how many failed, when some did."""
    xs = [r[key] for r in runs if "error" not in r]
    failed = len(runs) - len(xs)
    if not xs:
        return f"failed ({failed})" if failed else "—"
    digits = 2 if max(xs) < 10 else 1
    text = f"{statistics.median(xs):.{digits}f}"
    if len(xs) > 1:
        text += f" ({min(xs):.{digits}f}-{max(xs):.{digits}f})"
    return text + (f", {failed} failed" if failed else "")


def _columns(res: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(contestant, cache, header) of every column with measurements."""
    first = res["runs"][res["pipelines"][0]["key"]]
    return [
        (c["key"], cache, f"{c['title']}, {cache}{' (default caches)' if res['smoke'] else ''}")
        for c in res["contestants"]
        for cache in ("empty", "warm")
        if first[c["key"]][cache]
    ]


def _tables(res: dict[str, Any]) -> list[str]:
    cols = _columns(res)
    out = []
    for title, key in TABLES:
        out += [
            f"## {title}, median (range) of {res['rounds']}",
            "",
            "| pipeline | " + " | ".join(h for _, _, h in cols) + " |",
            "|---|" + "---|" * len(cols),
        ]
        for p in res["pipelines"]:
            runs = res["runs"][p["key"]]
            cells = [
                _cell(runs[c][cache], key) + _compiled(res, runs, c, cache) for c, cache, _ in cols
            ]
            out.append(f"| {p['title']} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _compiled(res: dict[str, Any], runs: dict[str, Any], c: str, cache: str) -> str:
    """``, N compiled``: warm runs of this project that still compiled for a second or more
    (the kernel sources changed since the warm-up, or the cache missed)."""
    ours = {x["key"] for x in res["contestants"] if x["tree"]}
    if cache != "warm" or c not in ours:
        return ""
    n = sum(r.get("compile_cpu_s", 0.0) >= COMPILED_S for r in runs[c][cache])
    return f", {n} compiled" if n else ""


def _imports(res: dict[str, Any]) -> list[str]:
    imp = res["imports"]
    titles = {c["key"]: c["title"] for c in res["contestants"]}
    n = len(next(iter(imp["seconds"].values())))
    out = [
        f"## Import, s over `python -c pass` ({imp['pass_s']:.2f} s), median (range) of {n}",
        "",
        "| who | command | s |",
        "|---|---|---|",
    ]
    for key, xs in imp["seconds"].items():
        cell = _cell([{"s": x} for x in xs], "s")
        out.append(f'| {titles[key]} | `python -c "{imp["commands"][key]}"` | {cell} |')
    return [*out, ""]


def _errors(res: dict[str, Any]) -> list[str]:
    found = sorted(
        {
            f"- {p}, {c}, {cache}: {r['error']}"
            for p, by_c in res["runs"].items()
            for c, by_cache in by_c.items()
            for cache, runs in by_cache.items()
            for r in runs
            if "error" in r
        }
    )
    return ["## Failures", "", *found, ""] if found else []


def _how(res: dict[str, Any]) -> list[str]:
    trees = [f"`{c['title']}`: `{c['tree']}`" for c in res["contestants"] if c["tree"]]
    caches = (
        "Smoke run: only the warm caches a user has by default (nothing compiled from an empty "
        "cache); the figures mean nothing."
        if res["smoke"]
        else "*Empty*: `FFCV_PAIRS_CACHE_DIR`, `NUMBA_CACHE_DIR` and `XDG_CACHE_HOME` point at a "
        "new empty folder. *Warm*: at the folder the first round's empty run of the same row "
        "filled, after an unmeasured run in it that went on until the kernels compiling in "
        "the background (while numpy stand-ins or serial twins served) were cached. Upstream "
        "FFCV keeps no cache of its pipeline: its warm run is a second start."
    )
    return [
        "## How measured",
        "",
        f"Each cell is a new interpreter (`python -P bench/tables/first_batch_probe.py`), "
        f"started with `subprocess`, not forked from a preloaded server: it imports the "
        f"library, builds the loader and takes one batch of {res['batch_size']} from a file of "
        f"{res['pairs']:,} pairs, then exits. {caches} The rounds interleave the columns (row by "
        f"row, each column's empty run, then its warm run). *Compiling* sums the thread CPU "
        f"seconds inside numba's outermost `numba:compile` events; *the whole process* is "
        f"measured from outside (wall from start to exit, CPU from `getrusage` of the "
        f"children). No thread count is pinned: each library runs as a user gets it (upstream's "
        f"import sets torch's and numba's threads to 1). `PYTHONPATH` is the source tree: "
        + ", ".join(trees)
        + ". Files (MB): "
        + ", ".join(f"{k} {v:.1f}" for k, v in res["file_mb"].items())
        + ": random uint8 pairs 3x48x48 (raw, and raw_hwc: the same pairs 48x48x3), and crops "
        "of scikit-image's photos 48x48x3 as JPEG quality 90 (random noise makes huge JPEGs).",
        "",
        f"Load average (1, 5, 15 min) at the start {_load(res['load']['start'])}, at the end "
        f"{_load(res['load']['end'])}; each run's 1-minute load is in the JSON (`load`). "
        f"{res['machine']['cores']} cores: other work on the machine moves these figures.",
        "",
    ]


def _load(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def _pipelines(res: dict[str, Any]) -> list[str]:
    out = ["## The pipelines", "", "| pipeline | ours | upstream FFCV 1.0.2 |", "|---|---|---|"]
    out += [f"| {p['title']} | {p['ours']} | {p['upstream']} |" for p in res["pipelines"]]
    return [*out, ""]


def first_batch_lines(res: dict[str, Any]) -> list[str]:
    """The report's markdown, line by line."""
    head = [
        "# First batch on a fresh machine",
        "",
        f"Command: `{res.get('command', 'python -m bench --first-batch')}`. Took "
        f"{res['elapsed_s'] / 60:.1f} min.",
        "",
    ]
    body = _tables(res) + _imports(res) + _errors(res) + _pipelines(res) + _how(res)
    return head + body + machine_section({"machine": res["machine"], "extras": {}})


def write_first_batch_report(res: dict[str, Any], out: Path, date: str) -> Path:
    """Write ``first-batch-<date>.md`` and ``.json`` into ``out``; returns the md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"first-batch-{date}.json").write_text(json.dumps(res, indent=1))
    md = out / f"first-batch-{date}.md"
    md.write_text("\n".join(first_batch_lines(res)))
    return md
