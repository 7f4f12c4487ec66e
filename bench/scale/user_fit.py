"""Node memory against ``N``: each row's peak PSS sum at every size, a straight line through
it, and the ``N`` at which that line fills a node.

For each row (ffcv-pairs without its mapped ``.beton`` pages, and with them; the user's
``Dataset`` per worker count; the packs), the points are ``(N, peak PSS summed over the
row's processes)``. The fit is least squares of ``pss = a + b * N`` over the sizes where the
row was not stopped by the memory floor. A stopped row's PSS is a lower bound (it was still
growing when it was killed): when fewer than two sizes ran to their end, the line goes
through every point, lower bounds included, so its ``N`` at a node's RAM is an upper bound
(the row fills that node at that ``N`` or before). ``N`` at a node: where the line reaches
the node's RAM, ``(ram - a) / b``; none when ``b <= 0``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["USER_NODE_GB", "fit_line", "memory_curves", "n_at", "short_count"]

USER_NODE_GB = 200.0  # the user's node: 200 GB of RAM
MIB = 1 << 20


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """``(a, b)`` of the least-squares line ``y = a + b * x``; ``None`` with fewer than two
    distinct ``x``."""
    if len({x for x, _ in points}) < 2:
        return None
    k = len(points)
    mx = sum(x for x, _ in points) / k
    my = sum(y for _, y in points) / k
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    b = sxy / sxx
    return my - b * mx, b


def n_at(fit: tuple[float, float] | None, ram_mib: float) -> float | None:
    """The ``N`` where the line ``fit`` reaches ``ram_mib``; ``None`` when it never grows."""
    if fit is None or fit[1] <= 0:
        return None
    return max(0.0, (ram_mib - fit[0]) / fit[1])


def short_count(n: float | None) -> str:
    """``n`` pairs in few characters: 950, 340k, 12.3M, 4.5 billion; a dash for None."""
    if n is None:
        return "—"
    for scale, suffix in ((1e9, " billion"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            value = n / scale
            return f"{value:,.3g}{suffix}" if value < 1000 else f"{value:,.0f}{suffix}"
    return f"{n:.0f}"


def _series(res: dict[str, Any]) -> list[tuple[tuple[str, int], str, str]]:
    """``((kind, workers), field, label)`` of every curve, in the rows' order."""
    seen: list[tuple[tuple[str, int], str, str]] = []
    for entry in res.get("sizes", []):
        for row in entry.get("rows", []):
            key = (row["kind"], row["workers"])
            if any(k == key for k, _, _ in seen):
                continue
            if row["kind"] == "ours":
                seen.append((key, "pss_own", f"{row['title']} (without its mapped .beton)"))
                seen.append((key, "pss", f"{row['title']} (with its mapped .beton: page cache)"))
            else:
                seen.append((key, "pss", row["title"]))
    return seen


def memory_curves(res: dict[str, Any], user_node_gb: float = USER_NODE_GB) -> list[dict]:
    """Every row's points, fit and ``N`` at the user's node and at this node's RAM.

    Returns:
        One dict per curve: ``kind``, ``workers``, ``field`` (``pss`` or ``pss_own``),
        ``label``, ``points`` (``n``, ``peak_mib``, ``mean_mib``, ``stopped``: by the memory
        floor), ``basis`` (``"measured"``: the fit is over sizes that ran to their end;
        ``"lower bounds"``: it includes stopped sizes; ``None``: no fit), ``fit`` (``[a, b]``,
        MiB and MiB per pair), ``n_user`` and ``n_node`` (``N`` at ``user_node_gb`` and at this
        node's RAM; upper bounds when ``basis`` is ``"lower bounds"``), ``above_fit``: stopped
        sizes whose lower bound already lies above the measured line.
    """
    ram_mib = res["machine"]["ram_gib"] * 1024
    user_mib = user_node_gb * 1e9 / MIB
    out = []
    for (kind, workers), field, label in _series(res):
        points = []
        for entry in res.get("sizes", []):
            row = next(
                (r for r in entry.get("rows", []) if (r["kind"], r["workers"]) == (kind, workers)),
                None,
            )
            memory = (row or {}).get("memory") or {}
            if not memory.get("peak_mb"):
                continue
            points.append(
                {
                    "n": entry["n"],
                    "peak_mib": memory["peak_mb"][field],
                    "mean_mib": memory["mean_mb"][field],
                    "stopped": row.get("stopped") == "memory",  # type: ignore[union-attr]
                }
            )
        ran = [(p["n"], p["peak_mib"]) for p in points if not p["stopped"]]
        fit = fit_line(ran)
        basis: str | None = "measured"
        if fit is None:
            fit, basis = fit_line([(p["n"], p["peak_mib"]) for p in points]), "lower bounds"
        if fit is None:
            basis = None
        line = fit if basis == "measured" else None
        above = [
            p["n"]
            for p in points
            if line and p["stopped"] and p["peak_mib"] > line[0] + line[1] * p["n"]
        ]
        out.append(
            {
                "kind": kind,
                "workers": workers,
                "field": field,
                "label": label,
                "points": points,
                "basis": basis,
                "fit": list(fit) if fit else None,
                "n_user": n_at(fit, user_mib),
                "n_node": n_at(fit, ram_mib),
                "above_fit": above,
            }
        )
    return out
