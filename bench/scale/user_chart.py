"""The user-scale charts: ``-chart.png`` (samples/s and node memory of every row at the largest
size) and ``-memory.png`` (node memory against ``N`` per row, its fitted line, this node's RAM
and the user's 200 GB node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.scale.user_fit import USER_NODE_GB, short_count
from bench.tables.charts import pyplot

__all__ = ["memory_chart", "rows_chart"]

GIB_PER_MIB = 1 / 1024


def rows_chart(view: dict[str, Any], path: Path) -> None:
    """Samples/s and peak/mean PSS sums of the rows of one size (``view``: a one-size result)."""
    plt = pyplot()
    from matplotlib.patches import Patch

    rows = [r for r in view.get("rows", []) if r["memory"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 0.7 * len(rows) + 2.2))
    names = [r["title"] for r in rows]
    colors = ["tab:green" if r["kind"] == "ours" else "tab:blue" for r in rows]
    rates = [r["rate"] or 0 for r in rows]
    ax1.barh(names, rates, color=colors)
    for i, rate in enumerate(rates):
        ax1.text(rate, i, f" {rate:,.0f}", va="center", fontsize=8)
    if any(rates):
        ax1.set_xscale("log")
    ax1.set_xlabel("steady samples/s of the node (log scale; 0: none)")
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
        f"{view['config']['n']:,} pairs, {view['date']} (ffcv-pairs in green; its PSS without "
        "the mapped .beton)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_COLORS = ("tab:green", "tab:olive", "tab:red", "tab:orange", "tab:purple", "tab:brown")


def memory_chart(res: dict[str, Any], curves: list[dict[str, Any]], path: Path) -> None:
    """Peak PSS sum (GiB, log) against N (log) per curve: measured points filled, points of a
    row stopped by the memory floor hollow (lower bounds), the fitted line dashed up to where
    it meets the user's node, and the two RAM lines."""
    import numpy as np

    plt = pyplot()
    ram = res["machine"]["ram_gib"]
    user = USER_NODE_GB * 1e9 / (1 << 30)
    sizes = [e["n"] for e in res.get("sizes", [])] or [res["config"]["n"]]
    reach = [c["n_user"] for c in curves if c["kind"] != "ours" and c["n_user"]]
    x_hi = min(1e10, max([3 * max(sizes), *(1.5 * n for n in reach)]))
    x_lo = min(sizes) / 2
    fig, ax = plt.subplots(figsize=(10, 6.5))
    for i, c in enumerate(curves):
        color = _COLORS[i % len(_COLORS)]
        faint = c["kind"] == "ours" and c["field"] == "pss"
        ran = [p for p in c["points"] if not p["stopped"]]
        low = [p for p in c["points"] if p["stopped"]]
        style = {"color": color, "alpha": 0.45 if faint else 1.0}
        ax.plot([p["n"] for p in ran], [p["peak_mib"] * GIB_PER_MIB for p in ran], "o-",
                label=c["label"], **style)  # fmt: skip
        if low:
            ax.plot([p["n"] for p in low], [p["peak_mib"] * GIB_PER_MIB for p in low], "^",
                    mfc="none", ms=9, label=f"{c['label']}: stopped by the floor (lower bound)",
                    **style)  # fmt: skip
        if c["fit"]:
            a, b = c["fit"]
            xs = np.geomspace(x_lo, x_hi, 200)
            ys = (a + b * xs) * GIB_PER_MIB
            keep = ys > 0
            ax.plot(xs[keep], ys[keep], "--", lw=1, **style)
            if c["n_user"] and c["n_user"] <= x_hi:
                ax.plot([c["n_user"]], [user], "x", ms=8, **style)
                ax.annotate(
                    f"N ≈ {short_count(c['n_user'])}",
                    (c["n_user"], user),
                    textcoords="offset points",
                    xytext=(-10, 8 + 12 * (i % 3)),
                    fontsize=8,
                    color=color,
                )
    ax.axhline(ram, color="black", lw=1)
    ax.text(x_lo, ram * 1.05, f"this node's RAM, {ram:.1f} GiB", fontsize=8)
    ax.axhline(user, color="black", lw=1, ls=":")
    ax.text(x_lo, user * 1.05, f"the user's node, {USER_NODE_GB:g} GB", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("N, pairs (log scale)")
    ax.set_ylabel("peak PSS summed over the row's processes, GiB (log scale)")
    ax.set_title(
        f"Node memory against N, {res['date']} (dashed: least-squares line a + b·N, "
        "extended to the user's node)",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
