"""The per-sample photometric ops (``augment/photo_ops``) and the matrix geometry's ops
(``augment/warp_options``): each op's pairs/s against Albumentations with
``additional_targets``, and the compile seconds each op adds on an empty kernel cache.

* **Throughput**: each op alone (probability 1) in this project's loader (``device="cpu"``,
  the cores as threads) on uint8 ``[3, S, S]`` crops of the demo's photographs, S = 64 and
  224, against ``A.Compose([op], additional_targets={"image2": "image"})`` on the same pairs
  (HWC), one single-threaded process per core (``cv2.setNumThreads(1)``), pairs/s summed over
  the processes. Interleaved rounds; each keeps its best. Albumentations is measured twice:
  the transform alone on arrays in memory (its own benchmark's way), and *into a batch*: the
  transform, ``ToTensorV2`` and ``torch.stack`` of every ``batch`` pairs, as a ``DataLoader``'s
  default collate makes the CHW batch our loader hands over (still no decode, no workers).
* **Compile**: in a fresh interpreter with an empty ``FFCV_PAIRS_CACHE_DIR``, the CPU
  seconds of compiling the op's apply function for uint8 (what the op adds), and once the
  parts every such op shares: the drawn-op driver and the batch of draws.

Run it::

    .venv/bin/python -m bench --photo-ops              # 3 rounds, report in bench/results
    .venv/bin/python -m bench --photo-ops --rounds 1 --n 1024 --date try
    .venv/bin/python -m bench.tables.photo_table --no-throughput --rounds 1  # compile only
    .venv/bin/python -m bench --photo-ops --ops blur,jpeg,erasing --date try  # some ops
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GEOMETRY", "OPS", "main", "measure_compile", "measure_throughput", "write_report"]

REPO = Path(__file__).resolve().parents[2]
#: Op -> (PairAugment options, the Albumentations transform, as code).
OPS: dict[str, tuple[dict[str, Any], str]] = {
    "color_jitter": (
        {"color_jitter": (0.4, 0.4, 0.4, 0.1)},
        "A.ColorJitter(0.4, 0.4, 0.4, 0.1, p=1)",
    ),
    "saturation": ({"saturation": 0.4}, "A.ColorJitter(0, 0, 0.4, 0, p=1)"),
    "hue": ({"hue": 0.1}, "A.ColorJitter(0, 0, 0, 0.1, p=1)"),
    "gamma": ({"gamma": (0.8, 1.2)}, "A.RandomGamma((80, 120), p=1)"),
    "grayscale": ({"grayscale": 1.0}, "A.ToGray(p=1)"),
    "autocontrast": ({"autocontrast": 1.0}, "A.AutoContrast(p=1)"),
    "equalize": ({"equalize": 1.0}, "A.Equalize(p=1)"),
    "sharpness": ({"sharpness": 1.0}, "A.Sharpen((0.5, 0.5), (1, 1), p=1)"),
    "posterize": ({"posterize": 1.0}, "A.Posterize((4, 4), p=1)"),
    "solarize": ({"solarize": 1.0}, "A.Solarize((0.5, 0.5), p=1)"),
    "invert": ({"invert": 1.0}, "A.InvertImg(p=1)"),
    "channel_shuffle": ({"channel_shuffle": 1.0}, "A.ChannelShuffle(p=1)"),
    "blur": (
        {"blur": 1.0, "blur_sigma": (0.1, 2.0)},
        "A.GaussianBlur(blur_limit=0, sigma_limit=(0.1, 2.0), p=1)",
    ),
    "jpeg": (
        {"jpeg": 1.0, "jpeg_quality": (50, 100)},
        "A.ImageCompression(quality_range=(50, 100), p=1)",
    ),
    "erasing": ({"erasing": 1.0}, "A.Erasing(scale=(0.02, 0.33), ratio=(0.3, 3.3), p=1)"),
}
#: The matrix geometry's ops: one bilinear warp a sample for every one of them (their own
#: parameters, not always Albumentations': its Perspective draws a scale, ours torchvision's).
GEOMETRY: dict[str, tuple[dict[str, Any], str]] = {
    "rotate": ({"rotate": 30}, "A.Rotate(30, p=1)"),
    "affine": (
        {"affine_degrees": 20, "affine_translate": (0.1, 0.1), "affine_scale": (0.9, 1.1)},
        "A.Affine(scale=(0.9, 1.1), translate_percent=(-0.1, 0.1), rotate=(-20, 20), p=1)",
    ),
    "perspective": ({"perspective": 0.3, "perspective_p": 1.0}, "A.Perspective(p=1)"),
    "elastic": ({"elastic": (50.0, 5.0)}, "A.ElasticTransform(alpha=50, sigma=5, p=1)"),
    "transpose": ({"transpose": 1.0}, "A.Transpose(p=1)"),
    "d4": ({"d4": True}, "A.D4(p=1)"),
    "resize_longest": ({"resize_longest": 80}, "A.LongestMaxSize(80, p=1)"),
    "pad_if_needed": (
        {"pad_if_needed": (240, 240)},
        "A.PadIfNeeded(240, 240, border_mode=0, p=1)",
    ),
}
SIZES = {64: 256, 224: 64}  # side -> batch size

_COMPILE = """
import json, sys, time
import numpy as np
from ffcv_pairs import PairAugment
from ffcv_pairs.augment.photo_ops import photo_steps
from ffcv_pairs.kernels.drawn_driver import drawn_op_kernel
from ffcv_pairs.kernels.hashing import uniform_rows
from ffcv_pairs.kernels.user_driver import user_op_signature
out = {}
t = time.process_time()
if sys.argv[1] == "geometry":
    from ffcv_pairs.kernels.displacement import elastic_field
    from ffcv_pairs.kernels.warp import warp_bilinear
    img, m = np.zeros((1, 1, 4, 4, 3), np.uint8), np.eye(3)[None]
    warp_bilinear(img, img.copy(), m, np.zeros((0, 4, 4, 2)), 0, 0.0, True)
    out["warp"] = time.process_time() - t
    t = time.process_time()
    elastic_field(np.zeros(1, np.int64), np.zeros(2, np.int64), 57, 0, 1.0, 1.0, np.ones(2),
                  np.zeros((1, 4, 4, 2)))
    out["elastic"] = time.process_time() - t
elif sys.argv[1] == "shared":
    uniform_rows(np.zeros(1, np.int64), np.zeros(2, np.int64), 5, 0, 1)
    out["draws"] = time.process_time() - t
    t = time.process_time()
    drawn_op_kernel("uint8")
    out["driver"] = time.process_time() - t
else:
    (step,) = photo_steps(PairAugment(**json.loads(sys.argv[1])), 3, "uint8", "A", (64, 64))
    step.apply.compile(user_op_signature("uint8").args)
    out["apply"] = time.process_time() - t
print(json.dumps(out))
"""

_ALBU = """
import json, sys, time
import cv2, numpy as np
cv2.setNumThreads(1)
import albumentations as A
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
batch = int(sys.argv[4])
ops = [eval(sys.argv[3])]
if batch:
    import torch
    from albumentations.pytorch import ToTensorV2
    torch.set_num_threads(1)
    ops.append(ToTensorV2())
t = A.Compose(ops, additional_targets={"image2": "image"}, seed=0)
for i in range(8):
    t(image=a[i], image2=b[i])
start = time.perf_counter()
xs, ys = [], []
for i in range(len(a)):
    r = t(image=a[i], image2=b[i])
    if batch:
        xs.append(r["image"])
        ys.append(r["image2"])
        if len(xs) == batch or i == len(a) - 1:
            torch.stack(xs), torch.stack(ys)
            xs, ys = [], []
print(len(a) / (time.perf_counter() - start))
"""


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    res = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True
    )
    return res.stdout.strip().splitlines()[-1]


def measure_compile(
    rounds: int, ops: tuple[str, ...] = tuple(OPS | GEOMETRY)
) -> dict[str, dict[str, float]]:
    """CPU seconds per op of ``ops`` (``apply``; the matrix geometry's ops share one warp
    kernel, ``geometry``) and shared (``draws``, ``driver``), each the median of ``rounds``
    fresh interpreters with an empty kernel cache."""
    jobs = {"shared": "shared", **{k: json.dumps(OPS[k][0]) for k in ops if k in OPS}}
    if any(k in GEOMETRY for k in ops):
        jobs["geometry"] = "geometry"
    out: dict[str, dict[str, float]] = {}
    for name, arg in jobs.items():
        runs = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as cache:
                runs.append(json.loads(_python(_COMPILE, arg, env={"FFCV_PAIRS_CACHE_DIR": cache})))
        out[name] = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    return out


def _data(work: Path, side: int, n: int) -> Path:
    """``n`` pairs of photo crops at ``side``: a ``.beton`` (CHW) and ``a.npy``/``b.npy`` (HWC)."""
    from ffcv_pairs import ArraySource, write_pairs
    from ffcv_pairs.demo import photographs

    folder = work / f"photo-{side}-{n}"
    if (folder / "pairs.beton").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(side)
    photos = [p for p in photographs() if min(p.shape[:2]) > side]
    crops = np.empty((2, n, side, side, 3), np.uint8)
    for k in range(2 * n):
        p = photos[rng.integers(len(photos))]
        y, x = rng.integers(0, p.shape[0] - side), rng.integers(0, p.shape[1] - side)
        crops[k % 2, k // 2] = p[y : y + side, x : x + side]
    np.save(folder / "a.npy", crops[0])
    np.save(folder / "b.npy", crops[1])
    chw = np.ascontiguousarray(crops.transpose(0, 1, 4, 2, 3))
    write_pairs(ArraySource(chw[0], chw[1], np.arange(n)), folder / "pairs.beton", progress=False)
    return folder


def _ours(path: Path, options: dict[str, Any], batch: int) -> float:
    """Our loader's pairs/s over an epoch once its kernels are compiled: the first epoch
    compiles (or loads) them, and a parallel kernel compiling in the background (its serial
    twin serving meanwhile, see ``kernels/stand_in``) is waited for before the timed one."""
    from ffcv_pairs import PairAugment, make_loader
    from ffcv_pairs.kernels.stand_in import wait_for_compiles

    loader = make_loader(path, batch_size=batch, augment=PairAugment(**options), device="cpu")
    for _ in range(2):  # the second epoch switches to the parallel kernels compiled meanwhile
        for _ in loader:
            pass
        wait_for_compiles()
    start, count = time.perf_counter(), 0
    for a, _, _ in loader:
        count += len(a)
    return count / (time.perf_counter() - start)


def _albumentations(folder: Path, transform: str, batch: int = 0) -> float:
    """Albumentations' pairs/s on the pairs of ``folder``, one process per core: the
    transform alone, or with ``batch``, into CHW batches of that size."""
    cores = os.cpu_count() or 1
    a, b = np.load(folder / "a.npy"), np.load(folder / "b.npy")
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for k in range(cores):
            np.save(f"{tmp}/a{k}.npy", a[k::cores])
            np.save(f"{tmp}/b{k}.npy", b[k::cores])
            cmd = [sys.executable, "-c", _ALBU, f"{tmp}/a{k}.npy", f"{tmp}/b{k}.npy", transform]
            cmd.append(str(batch))
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        return sum(float(p.communicate()[0].strip().splitlines()[-1]) for p in procs)


def measure_throughput(
    work: Path, n: int, rounds: int, ops: tuple[str, ...] = tuple(OPS | GEOMETRY)
) -> dict[str, dict[str, Any]]:
    """Best pairs/s of ours and of Albumentations, per op of ``ops`` and side, in interleaved
    rounds; row ``none``: our loader with no op (its ceiling)."""
    out: dict[str, dict[str, Any]] = {}
    for side, batch in SIZES.items():
        folder = _data(work, side, n if side == 64 else max(256, n // 4))
        for _ in range(rounds):
            alone = out.setdefault(f"none@{side}", {"ours": 0.0, "albumentations": 0.0})
            alone["ours"] = max(alone["ours"], _ours(folder / "pairs.beton", {}, batch))
            for name in ops:
                options, transform = (OPS | GEOMETRY)[name]
                row = out.setdefault(f"{name}@{side}", {"ours": 0.0, "albumentations": 0.0})
                row["ours"] = max(row["ours"], _ours(folder / "pairs.beton", options, batch))
                row["albumentations"] = max(
                    row["albumentations"], _albumentations(folder, transform)
                )
                row["albumentations_batch"] = max(
                    row.get("albumentations_batch", 0.0), _albumentations(folder, transform, batch)
                )
    return out


def write_report(res: dict[str, Any], out: Path, date: str) -> Path:
    """``photo-ops-<date>.md`` and ``.json`` in ``out``; returns the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"photo-ops-{date}.json").write_text(json.dumps(res, indent=1))
    m = res["machine"]
    lines = [f"# Per-sample photometric ops, {date}", "", f"`{res['command']}`", ""]
    lines += [f"{m['cores']} cores ({m['cpu']}), numba {m['numba']}, load {res['load']}.", ""]
    if "throughput" in res:
        lines += [
            "| op | Albumentations | 64 ours | 64 Alb. | x | 64 Alb. batch | x "
            "| 224 ours | 224 Alb. | x | 224 Alb. batch | x |",
            "|---|---|" + "---:|" * 10,
        ]
        for name, (_, transform) in (OPS | GEOMETRY).items():
            if f"{name}@{next(iter(SIZES))}" not in res["throughput"]:
                continue
            cells = []
            for side in SIZES:
                r = res["throughput"][f"{name}@{side}"]
                cells += [f"{r['ours']:,.0f}"]
                for alb in (r["albumentations"], r.get("albumentations_batch")):
                    cells += [f"{alb:,.0f}", f"{r['ours'] / alb:.2f}"] if alb else ["-", "-"]
            lines.append(f"| {name} | `{transform}` | " + " | ".join(cells) + " |")
        ceiling = [res["throughput"].get(f"none@{side}", {}).get("ours") for side in SIZES]
        if all(ceiling):
            lines += [
                "",
                f"The loader alone (decode, no op) gives {ceiling[0]:,.0f} pairs/s at 64 and "
                f"{ceiling[1]:,.0f} at 224: no op's row can pass it. Albumentations' rows call "
                "the transform on arrays already in memory, in a loop, with no loader: no "
                "decode, no batch, no hand-over. Where an op's Albumentations row is above "
                "our loader's own ceiling, the op cannot reach 1.0x here. *Alb. batch* adds "
                "what our loader's output is and the op alone lacks: `ToTensorV2` and "
                "`torch.stack` into CHW batches of the loader's size (64 pairs at 224, 256 "
                "at 64), as a `DataLoader`'s collate does (still no decode, no workers).",
            ]
        lines.append("")
    comp = res["compile"]
    lines += ["| compiled on an empty cache | CPU s |", "|---|---:|"]
    lines += [f"| shared: driver (uint8) | {comp['shared']['driver']:.2f} |"]
    lines += [f"| shared: batch of draws | {comp['shared']['draws']:.2f} |"]
    if "geometry" in comp:
        lines += [f"| geometry: bilinear warp (uint8) | {comp['geometry']['warp']:.2f} |"]
        lines += [f"| geometry: elastic field | {comp['geometry']['elastic']:.2f} |"]
    lines += [
        f"| {k}: apply (uint8) | {v['apply']:.2f} |"
        for k, v in comp.items()
        if k not in ("shared", "geometry")
    ]
    path = out / f"photo-ops-{date}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--n", type=int, default=4096, help="pairs at 64x64 (a quarter at 224x224)")
    p.add_argument("--no-throughput", action="store_true", help="compile seconds only")
    p.add_argument("--ops", default=",".join(OPS | GEOMETRY), help="the ops, comma-separated")
    p.add_argument("--work", type=Path, default=REPO / "bench" / ".work")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--date", default=datetime.date.today().isoformat())
    args = p.parse_args(argv)
    ops = tuple(args.ops.split(","))
    if unknown := sorted(set(ops) - set(OPS | GEOMETRY)):
        p.error(f"--ops: unknown {unknown}; known: {', '.join(OPS | GEOMETRY)}")
    if not args.no_throughput and importlib.util.find_spec("albumentations") is None:
        p.error("the throughput rows compare with Albumentations: pip install -e '.[peers]'")
    from bench.core.machine import describe_machine

    res: dict[str, Any] = {
        "command": " ".join(["python -m bench --photo-ops", *(argv or sys.argv[1:])])
    }
    res["machine"] = describe_machine()
    res["load"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    res["compile"] = measure_compile(args.rounds, ops)
    if not args.no_throughput:
        res["throughput"] = measure_throughput(args.work, args.n, args.rounds, ops)
    sys.stdout.write(f"{write_report(res, args.out, args.date)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
