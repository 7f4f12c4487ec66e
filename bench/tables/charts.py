"""PNG charts: samples/s per contestant (log scale) and memory per configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["draw_charts", "pyplot"]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _throughput(res: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = [r for r in res["throughput"].values() if r["status"] == "ok" and r.get("best")]
    rows.sort(key=lambda r: r["best"])
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.5))
    colors = [
        "tab:green" if r["ours"] else "tab:gray" if r["key"] == "memcpy" else "tab:blue"
        for r in rows
    ]
    ax.barh([r["title"] for r in rows], [r["best"] for r in rows], color=colors)
    for i, r in enumerate(rows):
        ax.text(r["best"], i, f" {r['best']:,.0f}", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("samples/s (best of rounds, log scale)")
    ax.set_title(f"Throughput, {res['date']} ({res['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _memory(res: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    configs = [
        (r["title"], r["memory_mb"])
        for r in [*res["throughput"].values(), *res.get("memory", {}).values()]
        if r.get("memory_mb")
    ]
    seen: set[str] = set()
    configs = [c for c in configs if not (c[0] in seen or seen.add(c[0]))]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(configs) + 1.5))
    y = range(len(configs))
    ax.barh([i + 0.2 for i in y], [m["uss"] for _, m in configs], 0.4, label="USS Σ")
    ax.barh([i - 0.2 for i in y], [m["pss"] for _, m in configs], 0.4, label="PSS Σ")
    ax.set_yticks(list(y), [t for t, _ in configs])
    ax.set_xlabel("MiB, peak, summed over the process tree (rank groups: the ranks)")
    ax.set_title("Memory per configuration")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_charts(res: dict[str, Any], out: Path, name: str) -> list[Path]:
    """Write ``<name>-throughput.png`` and ``<name>-memory.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}-throughput.png", out / f"{name}-memory.png"]
    _throughput(res, paths[0])
    _memory(res, paths[1])
    return paths
