"""Table e of the report, and its targets (see :mod:`bench.tables.augops`)."""

from __future__ import annotations

from typing import Any

__all__ = ["augops_section", "augops_targets"]

PASS, MISS, NONE = "PASS", "MISS", "NOT MEASURED"
ANCHOR_TITLES = {
    "resize": "cv2.resize INTER_LINEAR of the crop",
    "bc": "cv2.convertScaleAbs alone (no mean)",
    "bc_mean": "cv2.mean + cv2.convertScaleAbs",
    "noise": "cv2.randn + cv2.add",
    "normalize": "numpy multiply-subtract into float32",
    "pipeline": "cv2 resize, flip, convertScaleAbs, float32 subtract/multiply",
}


def _best(size: dict[str, Any], row: str) -> float | None:
    r = size["rows"].get(row, {})
    return r.get("best") if r.get("status", "ok") == "ok" else None


def _anchor(size: dict[str, Any], name: str | None) -> float | None:
    if name is None:
        return None
    return size["anchors"].get(name, {}).get("pairs_per_s")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _n(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _r(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def augops_section(res: dict[str, Any]) -> list[str]:
    """The markdown of table e (empty without it)."""
    from bench.tables.augops import AUG_ROWS

    aug = res.get("augops")
    if not aug:
        return []
    sizes = aug["sizes"]
    head = " | ".join(f"{s}x{s} pairs/s | x plain | anchor pairs/s | x anchor" for s in sizes)
    data = ", ".join(f"{v['pairs']:,} at {s} with batch {v['batch']}" for s, v in sizes.items())
    out = [
        "## e. Augmentation ops vs plain decoding and vs OpenCV/numpy",
        "",
        'Each row: `make_loader(..., augment=..., device="cpu")` on uint8 [3, S, S] pairs '
        f"({data}), "
        "default threads, best of the interleaved rounds (plain decoding in every round). "
        f"Anchor: the op per image in OpenCV/numpy, `cv2.setNumThreads(1)`, {aug['cores']} "
        "processes (one per core) at once, same images (memory-mapped), each result written "
        "into a batch buffer; its pairs/s = images/s summed over the processes / 2; one "
        "round of every anchor after each round of the rows, best round kept.",
        "",
        f"| op | {head} |",
        "|---|" + "---:|" * (4 * len(sizes)),
    ]
    for row in AUG_ROWS:
        cells = []
        for size in sizes.values():
            best, plain = _best(size, row.key), _best(size, "plain")
            anchor = _anchor(size, row.anchor)
            cells += [_n(best), _r(_ratio(best, plain)), _n(anchor), _r(_ratio(best, anchor))]
        out.append(f"| {row.title} | " + " | ".join(cells) + " |")
    out += ["", "| anchor | " + " | ".join(f"{s}x{s} pairs/s" for s in sizes) + " |"]
    out.append("|---|" + "---:|" * len(sizes))
    for name, title in ANCHOR_TITLES.items():
        out.append(
            f"| `{name}`: {title} | "
            + " | ".join(_n(_anchor(size, name)) for size in sizes.values())
            + " |"
        )
    return [*out, ""]


def _t(name: str, value: float | None, goal: float) -> dict[str, Any]:
    verdict = NONE if value is None else (PASS if value >= goal else MISS)
    return {"target": name, "value": value, "goal": f">= {goal:g}x", "verdict": verdict}


def augops_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 17's targets, from table e."""
    from bench.tables.augops import AUG_ROWS

    sizes = res.get("augops", {}).get("sizes", {})
    if not sizes:
        return [_t("augmentation ops (table e)", None, 1)]
    out = []
    for s, size in sizes.items():
        for row in AUG_ROWS:
            if row.anchor and row.key != "pipeline":
                ratio = _ratio(_best(size, row.key), _anchor(size, row.anchor))
                out.append(_t(f"{row.title} at {s}x{s} vs {ANCHOR_TITLES[row.anchor]}", ratio, 1))
        ratio = _ratio(_best(size, "bc"), _anchor(size, "bc"))
        out.append(_t(f"brightness + contrast at {s}x{s} vs {ANCHOR_TITLES['bc']}", ratio, 1))
        flip = _ratio(_best(size, "flip_crop"), _best(size, "plain"))
        out.append(
            _t(f"hflip + padded crop at {s}x{s} vs plain decode (0.75-0.79 before)", flip, 0.7)
        )
    small = sizes.get("64")
    for key, title in (
        ("resize", "resized crop"),
        ("bc", "brightness + contrast"),
        ("normalize", "normalize -> float32"),
    ):
        out.append(
            _t(
                f"{title} at 64x64 vs plain decode",
                _ratio(_best(small, key), _best(small, "plain")) if small else None,
                0.3,
            )
        )
    big = sizes.get("224")
    pipe = _ratio(_best(big, "pipeline"), _best(big, "plain")) if big else None
    out.append(_t("realistic pipeline at 224x224 vs plain decode", pipe, 0.25))
    return out
