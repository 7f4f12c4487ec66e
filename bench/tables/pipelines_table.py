"""Whole augmentation pipelines of the pair repositories: ours against Albumentations and
torchvision v2, each as a user runs it, in pairs/s.

* **Ours**: :func:`~ffcv_pairs.make_loader` (``device="cpu"``, the cores as threads) on a
  ``.beton`` of the pairs (uint8 ``[3, S, S]``).
* **Albumentations 2.0.8** and **torchvision 0.29.1 (v2)**: a ``torch.utils.data.Dataset``
  over the same pairs in memory-mapped ``.npy`` files (HWC for Albumentations, CHW tensors for
  torchvision), in a ``DataLoader`` with as many workers as cores and the same batch size;
  the shared geometry is one call on both images (``additional_targets``, or two
  ``tv_tensors.Image``), a per-image op is one call per image. torchvision runs in
  ``bench/.venv-streaming`` (torch 2.14.1, ``make bench-extras``): its PyPI wheel does not
  import beside this project's torch 2.13.
* Ours is timed on an epoch after its kernels are compiled (parallel ones included), the
  peers' on their second epoch (the first starts the workers). Rounds interleave the
  contestants; a cell is the median (range).

The pipelines (stored side S = out + out / 8, out 64 and 224):

* **open-cd-like**: rotation by up to 180 degrees (bilinear, fill 0), both flips, a random crop
  to ``out``, colour jitter drawn per image (0.2, 0.5, 0.5, 0.05), A and B swapped with p=0.5.
  Albumentations and torchvision have no swap: a coin in ``__getitem__`` does it.
* **TrivialAugmentWide**: a random resized crop to ``out``, a horizontal flip, then
  ``TrivialAugmentWide`` shared by A and B. Albumentations has no such policy: its cell is
  empty. torchvision's policies refuse two images ("only properly defined for a single
  image"), so its pipeline runs on A and B stacked as one ``(2, 3, S, S)`` image, which shares
  every draw.

Run: ``python -m bench --pipelines [--rounds 3] [--n 1024] [--date D]`` (the same as
``python -m bench.tables.pipelines_table``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.tables.photo_table import _ours as ours_rate

__all__ = ["PIPELINES", "main", "measure", "write_report"]

REPO = Path(__file__).resolve().parents[2]
SIDES = {64: 256, 224: 64}  # output side -> batch size
TV_PYTHON = REPO / "bench" / ".venv-streaming" / "bin" / "python"

#: name -> (our PairAugment options, Albumentations shared ops, its per-image ops, torchvision
#: shared ops, its per-image ops, swap); ``{out}`` is the output side; None: no such pipeline.
PIPELINES: dict[str, dict[str, Any]] = {
    "open-cd-like": {
        "ours": {
            "rotate": 180,
            "hflip": 0.5,
            "vflip": 0.5,
            "crop": ("{out}", "{out}"),
            "color_jitter": (0.2, 0.5, 0.5, 0.05),
            "color_jitter_paired": False,
            "swap": 0.5,
        },
        "albu": "[A.Rotate(limit=180, border_mode=cv2.BORDER_CONSTANT, fill=0, p=1), "
        "A.HorizontalFlip(), A.VerticalFlip(), A.RandomCrop({out}, {out})]",
        "albu_each": "[A.ColorJitter(0.2, 0.5, 0.5, 0.05, p=1)]",
        "tv": "[v2.RandomRotation(180, interpolation=v2.InterpolationMode.BILINEAR), "
        "v2.RandomHorizontalFlip(), v2.RandomVerticalFlip(), v2.RandomCrop({out})]",
        "tv_each": "[v2.ColorJitter(0.2, 0.5, 0.5, 0.05)]",
        "swap": True,
    },
    "TrivialAugmentWide": {
        "ours": {
            "resized_crop": ("{out}", "{out}"),
            "hflip": 0.5,
            "policy": "trivial_augment_wide",
        },
        "albu": None,
        "albu_each": None,
        "tv": "[v2.RandomResizedCrop({out}), v2.RandomHorizontalFlip(), v2.TrivialAugmentWide()]",
        "tv_each": "[v2.Identity()]",
        "tv_stack": True,
        "swap": False,
    },
}

_PEER = """
import json, os, sys, time
import numpy as np, torch
spec = json.loads(sys.argv[1])
torch.set_num_threads(1)
if spec["lib"] == "albu":
    import cv2
    import albumentations as A
    cv2.setNumThreads(1)
    shared = A.Compose(eval(spec["shared"]), additional_targets={"image2": "image"})
    each = A.Compose(eval(spec["each"]))
else:
    from torchvision import tv_tensors
    from torchvision.transforms import v2
    shared, each = v2.Compose(eval(spec["shared"])), v2.Compose(eval(spec["each"]))

class Pairs(torch.utils.data.Dataset):
    def __init__(self):
        self.a = self.b = None
    def __len__(self):
        return spec["n"]
    def __getitem__(self, i):
        if self.a is None:
            self.a = np.load(spec["a"], mmap_mode="r")
            self.b = np.load(spec["b"], mmap_mode="r")
        a, b = np.array(self.a[i]), np.array(self.b[i])
        if spec["lib"] == "albu":
            out = shared(image=a, image2=b)
            a, b = each(image=out["image"])["image"], each(image=out["image2"])["image"]
            a, b = torch.from_numpy(a).permute(2, 0, 1), torch.from_numpy(b).permute(2, 0, 1)
        else:
            a, b = torch.from_numpy(a), torch.from_numpy(b)
            if spec["stack"]:
                a, b = shared(tv_tensors.Image(torch.stack([a, b])))
            else:
                a, b = shared(tv_tensors.Image(a), tv_tensors.Image(b))
            a, b = each(a), each(b)
        if spec["swap"] and torch.rand(()) < 0.5:
            a, b = b, a
        return a.contiguous(), b.contiguous(), i

loader = torch.utils.data.DataLoader(
    Pairs(), batch_size=spec["batch"], shuffle=True, num_workers=spec["workers"],
    persistent_workers=True, drop_last=True,
)
for _ in loader:
    pass
start, count = time.perf_counter(), 0
for a, b, _ in loader:
    count += len(a)
print(count / (time.perf_counter() - start))
"""


def _fill(value: Any, out: int) -> Any:
    if isinstance(value, str):
        return int(value.format(out=out)) if value == "{out}" else value.format(out=out)
    if isinstance(value, tuple):
        return tuple(_fill(v, out) for v in value)
    return value


def _data(work: Path, out: int, n: int) -> Path:
    """``n`` pairs of photo crops of side ``out + out // 8``: a ``.beton`` (CHW) and
    ``a.npy``/``b.npy`` in HWC (Albumentations) and ``a_chw.npy``/``b_chw.npy`` (torchvision)."""
    from bench.tables.photo_table import _data as photo_data

    folder = photo_data(work, out + out // 8, n)
    for t in "ab":
        if not (folder / f"{t}_chw.npy").exists():
            hwc = np.load(folder / f"{t}.npy")
            np.save(folder / f"{t}_chw.npy", np.ascontiguousarray(hwc.transpose(0, 3, 1, 2)))
    return folder


def _peer(lib: str, folder: Path, pipe: dict[str, Any], out: int, batch: int, n: int) -> float:
    python = sys.executable if lib == "albu" else str(TV_PYTHON)
    chw = "_chw" if lib == "tv" else ""
    spec = {
        "lib": lib,
        "shared": pipe[lib].format(out=out),
        "each": pipe[f"{lib}_each"].format(out=out),
        "swap": pipe["swap"],
        "stack": pipe.get("tv_stack", False),
        "a": str(folder / f"a{chw}.npy"),
        "b": str(folder / f"b{chw}.npy"),
        "n": n,
        "batch": batch,
        "workers": os.cpu_count() or 1,
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(
        [python, "-c", _PEER, json.dumps(spec)], capture_output=True, text=True, env=env
    )
    if res.returncode != 0:
        raise RuntimeError(f"{lib} pipeline failed: {res.stderr.strip().splitlines()[-1:]}")
    return float(res.stdout.strip().splitlines()[-1])


def measure(work: Path, n: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """pairs/s of each contestant per pipeline and side, one value per round."""
    out: dict[str, dict[str, list[float]]] = {}
    for side, batch in SIDES.items():
        count = n if side == 64 else max(256, n // 4)
        folder = _data(work, side, count)
        for _ in range(rounds):
            for name, pipe in PIPELINES.items():
                row = out.setdefault(f"{name}@{side}", {})
                options = {k: _fill(v, side) for k, v in pipe["ours"].items()}
                rate = ours_rate(folder / "pairs.beton", options, batch)
                row.setdefault("ours", []).append(rate)
                for lib in ("albu", "tv"):
                    if pipe[lib] is not None and (lib == "albu" or TV_PYTHON.exists()):
                        rate = _peer(lib, folder, pipe, side, batch, count)
                        row.setdefault(lib, []).append(rate)
    return out


def _cell(runs: list[float] | None) -> str:
    if not runs:
        return "—"
    return f"{np.median(runs):,.0f} ({min(runs):,.0f}-{max(runs):,.0f})"


def write_report(res: dict[str, Any], out: Path, date: str) -> Path:
    """``pipelines-<date>.md`` and ``.json`` in ``out``; returns the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pipelines-{date}.json").write_text(json.dumps(res, indent=1))
    lines = [
        f"# Whole augmentation pipelines, {date}",
        "",
        f"`{res['command']}`",
        "",
        f"{res['machine']['cores']} cores ({res['machine']['cpu']}), load {res['load']}.",
        "",
        "pairs/s, median (range) of the rounds; x: ours over the faster peer (target: 3).",
        "",
        "| pipeline | side | ours | Albumentations | torchvision v2 | x |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, row in res["rates"].items():
        name, side = key.split("@")
        peers = [float(np.median(row[k])) for k in ("albu", "tv") if row.get(k)]
        ratio = f"{np.median(row['ours']) / max(peers):.1f}" if peers else "—"
        cells = " | ".join(_cell(row.get(k)) for k in ("ours", "albu", "tv"))
        lines.append(f"| {name} | {side} | {cells} | {ratio} |")
    lines += ["", "## The pipelines", ""]
    for name, pipe in PIPELINES.items():
        ours = ", ".join(f"{k}={v!r}" for k, v in pipe["ours"].items())
        code = {
            k: str(pipe[k]).replace("{out}", "out") for k in ("albu", "albu_each", "tv", "tv_each")
        }
        albu = f"`{code['albu']}` then per image `{code['albu_each']}`" if pipe["albu"] else "—"
        lines += [
            f"**{name}** (out = the side): ours `PairAugment({ours})`".replace("'{out}'", "out")
            + f"; Albumentations {albu}; torchvision `{code['tv']}` then per image "
            f"`{code['tv_each']}`; swap: {pipe['swap']}.",
            "",
        ]
    lines.append((__doc__ or "").split("\n\n", 1)[1].split("Run:")[0].strip())
    path = out / f"pipelines-{date}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    from bench.core.machine import describe_machine

    p = argparse.ArgumentParser(prog="python -m bench --pipelines", description=__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--date", default=datetime.date.today().isoformat())
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        rates = measure(Path(work), args.n, args.rounds)
    res = {
        "rates": rates,
        "command": "python -m bench --pipelines " + " ".join(argv or []),
        "machine": describe_machine(),
        "load": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    sys.stdout.write(f"{write_report(res, args.out, args.date)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
