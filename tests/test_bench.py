"""The benchmark: ``python -m bench --smoke`` writes a complete report, the user-scale
harness reads the writer, and ``bench/`` keeps its rooms (no import circle, no basename
twice, every module and path it names exists).

Checks that every contestant row and every table is there; never checks a timing.
The LitData / Streaming rows may say they could not run (no venvs in CI).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).parents[1]
BENCH = REPO / "bench"
TABLE_HEADINGS = (
    "## Targets",
    "## Throughput",
    "## a. Start-up",
    "## b. Writer",
    "## c. Total memory",
    "## d. Cold cache and read amplification",
    "## e. Augmentation ops",
    "## Machine",
)


@pytest.mark.long
def test_quick_bench_writes_every_row_and_table(tmp_path: Path) -> None:
    from bench.contest.contestants import CONTESTANTS

    out, work = tmp_path / "results", tmp_path / "work"
    cmd = [sys.executable, "-m", "bench", "--smoke", "--out", str(out), "--work", str(work)]
    proc = subprocess.run(
        [*cmd, "--date", "smoke"], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    md = (out / "bench-smoke.md").read_text()
    for heading in TABLE_HEADINGS:
        assert heading in md, heading
    for contestant in CONTESTANTS.values():
        assert f"| {contestant.title}" in md, contestant.title
    assert "per-sample .pt" in md.split("## c. Total memory")[1]
    for verdict_line in (ln for ln in md.splitlines() if ln.startswith("| ffcv-pairs vs")):
        assert any(v in verdict_line for v in ("PASS", "MISS", "NOT MEASURED")), verdict_line

    res = json.loads((out / "bench-smoke.json").read_text())
    assert set(res["throughput"]) == set(CONTESTANTS)
    for key in ("startup", "writer", "memory", "cold", "amplification", "targets", "machine"):
        assert res[key], key
    from bench.tables.augops import AUG_ROWS

    for side in ("64", "224"):
        rows = res["augops"]["sizes"][side]["rows"]
        assert set(rows) == {r.key for r in AUG_ROWS}, side
        assert all(r["status"] == "ok" and r["best"] for r in rows.values()), side
        anchors = res["augops"]["sizes"][side]["anchors"]  # one anchor round per row round
        assert {len(a["rounds"]) for a in anchors.values()} == {len(rows["plain"]["runs"])}, side
    assert "realistic pipeline at 224x224 vs plain decode" in md
    assert {"pt_ranks_w4", "ours_4ranks"} <= set(res["memory"])
    from bench.tables.writer_table import JOBS

    assert len(res["writer"]["rows"]) == 2
    for n, row in res["writer"]["rows"].items():
        for job, title in JOBS.items():
            assert "rate" in row[job], (n, job, row[job])
            assert f"| {int(n):,} | {title} |" in md, (n, title)
    writer_targets = [t for t in res["targets"] if t["target"].startswith("writer")]
    assert len(writer_targets) == 3
    assert all(t["verdict"] in ("PASS", "MISS") for t in writer_targets), writer_targets
    for png in ("bench-smoke-throughput.png", "bench-smoke-memory.png"):
        assert (out / png).stat().st_size > 0, png
    assert sorted(p.name for p in out.iterdir()) == [
        "bench-smoke-memory.png",
        "bench-smoke-throughput.png",
        "bench-smoke.json",
        "bench-smoke.md",
    ]


def test_a_report_is_named_for_what_ran() -> None:
    """``<kind>-<date>.md``: ``bench``, or the tables' names when only the memcpy row raced."""
    from bench.contest.contestants import CONTESTANTS
    from bench.tables.suite import TABLES, report_kind

    every = list(CONTESTANTS)
    assert report_kind(every, TABLES) == "bench"
    assert report_kind(every, "acd") == "bench"
    assert report_kind(["ours", "memcpy"], "e") == "bench"
    assert report_kind(["memcpy"], "e") == "augops"
    assert report_kind(["memcpy"], "b") == "writer"
    assert report_kind(["memcpy"], "d") == "cold"
    assert report_kind(["memcpy"], "eb") == "writer-augops"
    assert report_kind(["memcpy"], "") == "bench"


def test_user_scale_reads_what_the_writer_prints(tmp_path: Path, pairs_dir) -> None:
    """--user-scale runs only by hand (hours): its parsing of the writer's summary line and
    the imports it times are checked here, on the writer's real output."""
    from bench.scale.user_convert import SUMMARY, WRITER_IMPORTS

    src = pairs_dir("per-sample", n=6)
    out = subprocess.run(
        [sys.executable, "writers/write_beton.py", str(src), str(tmp_path / "out"),
         "--split", "train", "--no-progress"],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    m = SUMMARY.search(out.stdout + out.stderr)
    assert m is not None and int(m.group(2)) == 6, out.stdout + out.stderr
    subprocess.run([sys.executable, "-c", WRITER_IMPORTS], check=True, timeout=300)


def test_user_row_stopped_before_its_second_batch_is_judged_by_its_life_rate() -> None:
    """The speed target of the user-scale report: a steady rate when the user's row has one,
    else all it delivered over its life; neither: not measured."""
    from bench.scale.user_targets import _speed_target

    def res(user: dict) -> dict:
        ours = {"kind": "ours", "workers": 0, "rate": 500_000.0, "ranks": []}
        lists = {"kind": "lists", "workers": 12, "delivered": 256}
        return {"config": {"workers": [12, 4]}, "rows": [ours, {**lists, **user}]}

    def speed(user: dict) -> dict:
        return _speed_target(res(user))

    life = speed({"rate": None, "life_rate": 8.0, "life_s": 32.0})
    assert life["value"] == 62_500 and life["verdict"] == "PASS"
    assert "256 samples in 32.0 s" in life["note"]
    steady = speed({"rate": 10_000.0, "life_rate": 8.0, "life_s": 32.0})
    assert steady["value"] == 50 and steady["verdict"] == "FAIL"
    assert "life" not in steady["note"]
    assert speed({"rate": None, "life_rate": None})["verdict"] == "NOT MEASURED"
    nothing = speed(
        {"rate": None, "life_rate": None, "delivered": 0, "life_s": 96.6, "stopped": "memory"}
    )
    assert nothing["verdict"] == "NOT MEASURED"
    assert (
        "delivered no sample in the 97 s from launch until it was stopped (memory)"
        in nothing["note"]
    )


# --- bench/ as rooms -------------------------------------------------------------------


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root`` (not the extras' venvs or data)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        if any(part.startswith(".") or part == "results" for part in rel.parts):
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports, in function bodies too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (module -> modules it imports), as a path, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        path.append(module)
        for nxt in sorted(graph[module]):
            if nxt in path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done and (found := visit(nxt)):
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done and (found := visit(module)):
            return found
    return None


def test_bench_modules_import_in_no_circle() -> None:
    """Every import between two ``bench`` modules, at the top or inside a function, points one
    way: the rooms build on ``bench.core`` and never back."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    modules = _modules(BENCH)
    assert {"bench.run", "bench.core.timing", "bench.contest.rounds"} <= set(modules)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "bench.core.settings" in graph["bench.contest.rounds"]  # the parser sees imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


#: The rooms of ``bench/``, each importing only the rooms before it (``bench/run.py``, on top,
#: imports any).
ROOMS = ("core", "extras", "contest", "tables", "scale", "gpu")


def test_rooms_import_only_the_rooms_before_them() -> None:
    modules = _modules(BENCH)
    rooms = {name: name.split(".")[1] for name in modules if name.count(".") >= 2}
    assert set(rooms.values()) == set(ROOMS), sorted(set(rooms.values()))
    upward = [
        f"{name} -> {dep}"
        for name, room in rooms.items()
        for dep in _imports(name, modules[name], modules)
        if dep in rooms and ROOMS.index(rooms[dep]) > ROOMS.index(room)
    ]
    assert not upward, upward


def test_no_module_basename_twice_in_bench_or_beside_ffcv_pairs() -> None:
    """A module's file name says which module it is: unique in ``bench/``, and not the name
    of a module of ``ffcv_pairs/`` (``__init__.py`` and ``__main__.py`` aside)."""
    shared = {"__init__.py", "__main__.py"}
    bench = [p.name for p in _modules(BENCH).values() if p.name not in shared]
    package = {p.name for p in _modules(REPO / "ffcv_pairs").values()} - shared
    twice = sorted(name for name, k in Counter(bench).items() if k > 1)
    assert not twice, f"basenames twice in bench/: {twice}"
    assert not sorted(set(bench) & package), "also in ffcv_pairs/: " + str(set(bench) & package)


def _defines(path: Path, name: str) -> bool:
    """``name`` is bound at the top level of the module at ``path``."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        imported = node.names if isinstance(node, ast.Import | ast.ImportFrom) else []
        if any((a.asname or a.name).split(".")[0] == name for a in imported):
            return True
    return False


def test_every_bench_module_and_path_named_exists() -> None:
    """``bench.x.y`` (a module, or a name in one) and ``bench/x/y.py`` as the code, the
    Makefile and the READMEs name them: after a move, a stale name fails here."""
    modules = _modules(BENCH)
    texts = [REPO / "Makefile", REPO / "README.md", BENCH / "README.md", BENCH / "gpu" / "run.sh"]
    texts += [p for p in modules.values()] + [BENCH / "results" / "README.md"]
    stale = []
    for text_path in texts:
        text = text_path.read_text()
        for dotted in set(re.findall(r"\bbench(?:\.[A-Za-z_]\w*)+", text)):
            parts = dotted.split(".")
            k = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
            rest = parts[k:]
            if rest and not _defines(modules[".".join(parts[:k])], rest[0]):
                stale.append(f"{text_path.relative_to(REPO)}: {dotted}")
        for rel in set(re.findall(r"\bbench/[\w./-]*\w(?![\w/<*-])", text)):
            if not rel.startswith("bench/.") and not (REPO / rel).exists():
                stale.append(f"{text_path.relative_to(REPO)}: {rel}")
    assert not stale, "\n".join(stale)


def test_results_keep_one_naming_scheme_and_their_links_resolve() -> None:
    """``bench/results/`` holds ``<kind>-<date>`` reports (``.md``, ``.json``, charts) and its
    index; every link of the index and of ``bench/README.md`` leads to a file."""
    results = BENCH / "results"
    scheme = re.compile(r"[a-z]+(-[a-z]+)*-\d{4}-\d{2}-\d{2}(-\w+)*(\.md|\.json|\.png)")
    odd = [p.name for p in results.iterdir() if p.name != "README.md"]
    assert not [name for name in odd if not scheme.fullmatch(name)]
    for md in (results / "README.md", BENCH / "README.md"):
        for link in re.findall(r"\]\(([^)#]+)\)", md.read_text()):
            assert "://" in link or (md.parent / link).exists(), f"{md.name}: {link}"


def _is_entrypoint(tree: ast.Module) -> bool:
    """The module runs as a program (``if __name__ == "__main__":``)."""
    return any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body
    )


def test_every_bench_module_says_what_it_holds_and_exports() -> None:
    """A docstring and an explicit ``__all__`` in every module; an entrypoint's docstring
    shows the command that runs it (``python -m <module>`` or its path)."""
    for name, path in _modules(BENCH).items():
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree) or ""
        assert doc, f"{name}: no docstring"
        exported = [
            node
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            and "__all__" in ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node)
        ]
        assert exported, f"{name}: no __all__"
        if _is_entrypoint(tree) or path.name == "__main__.py":
            module = name.removesuffix(".__main__")
            commands = (f"python -m {module}", str(path.relative_to(REPO)))
            assert any(c in doc for c in commands), f"{name}: the docstring shows no {commands}"


def test_the_jpeg_report_judges_each_target_and_its_pairs_differ_by_a_shift() -> None:
    from bench.tables.compression import compression_lines, make_pairs

    a, b = make_pairs(6, 32, seed=1)
    assert a.shape == b.shape == (6, 32, 32, 3) and a.dtype == np.uint8
    assert len({x.tobytes() for x in [*a, *b]}) == 12, "no two images identical"
    # B is A's view moved by 1-2 px: closer to some shift of A than to A itself
    x, y = a[0].astype(float), b[0].astype(float)
    moved = min(
        np.abs(np.roll(x, (dy, dx), (0, 1))[4:-4, 4:-4] - y[4:-4, 4:-4]).mean()
        for dy in range(-2, 3)
        for dx in range(-2, 3)
        if (dy, dx) != (0, 0)
    )
    assert moved < np.abs(x - y)[4:-4, 4:-4].mean()

    def side(smaller: float, ours: list[float], theirs: list[float]) -> dict:
        sizes = {"raw": {"bytes_per_pair": 100.0, "psnr": None, "smaller": 1.0}}
        sizes["jpeg90"] = {"bytes_per_pair": 100 / smaller, "psnr": 33.0, "smaller": smaller}
        for row in sizes.values():
            row["write_pairs_per_s"] = 1.0
        speed = {"ffcv-pairs jpeg": ours, "upstream jpeg": theirs, "ffcv-pairs raw": ours}
        ratios = [o / t for o, t in zip(ours, theirs)]
        return {"pairs": 8, "sizes": sizes, "speed": speed, "ratios": ratios}

    res = {
        "cores": 2,
        "rounds": 3,
        "sides": {"64": side(5.6, [11, 12, 13], [10] * 3), "224": side(4.0, [9, 11, 12], [10] * 3)},
        "startup": {"samples": 3_000_000, "seconds": {"raw": [0.8] * 3, "jpeg": [0.9, 1.2, 1.3]}},
        "small_output": {
            "stored": 224,
            "out": 64,
            "speed": {"reduced": [12, 13, 15], "full": [10] * 3, "upstream": [6, 5, 5]},
        },
    }
    text = "\n".join(compression_lines(res))
    assert "| 13 (12-15) | 10 (10-10) | 5 (5-6) | 2.60 (2.00-3.00) | 1.30 (1.20-1.50) |" in text
    assert "- 64x64: quality 90 is 5.6x smaller: PASS" in text
    assert "- 224x224: quality 90 is 4.0x smaller: MISS" in text
    assert "- 64x64: 1.20x upstream per image (median): PASS" in text
    assert "- 224x224: 1.10x upstream per image (median): STRADDLES" in text
    assert "- start-up at 3,000,000 JPEG samples: 1.20 s (median): MISS" in text


def test_the_first_batch_report_shows_every_column_and_each_failure() -> None:
    """The first-batch report renders from its JSON: a column per contestant and cache, the
    median (range) of each cell, a warm run of ours that compiled marked, a failed run counted
    and listed, the import row."""
    from bench.tables.first_batch_report import first_batch_lines

    def run(loader_s: float) -> dict:
        return {"loader_s": loader_s, "compile_cpu_s": 0.5, "wall_s": 2.0, "cpu_s": 1.5}

    contestants = [
        {"key": "ours", "title": "ours", "tree": "/repo"},
        {"key": "before", "title": "ours (before)", "tree": "/tmp/before"},
        {"key": "upstream", "title": "upstream FFCV", "tree": ""},
    ]
    plain = {
        "ours": {
            "empty": [run(9.0), run(11.0), run(10.0)],
            "warm": [run(1.5), run(1.5), {**run(30.0), "compile_cpu_s": 29.0}],
        },
        "before": {"empty": [run(30.0)] * 3, "warm": [run(2.0)] * 3},
        "upstream": {"empty": [run(4.0), {"error": "exit 1: KeyError: 'A'"}], "warm": []},
    }
    machine = dict.fromkeys(("cpu", "kernel", "python", "torch", "numpy", "numba", "ffcv"), "1")
    machine |= {"cores": 2, "ram_gib": 8.0, "cuda": False, "ffcv-pairs": "0"}
    res = {
        "command": "python -m bench --first-batch",
        "elapsed_s": 600.0,
        "pairs": 2048,
        "batch_size": 64,
        "rounds": 3,
        "smoke": False,
        "file_mb": {"raw": 42.0},
        "contestants": contestants,
        "pipelines": [{"key": "plain", "title": "plain decode", "ours": "o", "upstream": "u"}],
        "runs": {"plain": plain},
        "imports": {
            "pass_s": 0.03,
            "commands": {"ours": "import ffcv_pairs", "upstream": "import ffcv.loader"},
            "seconds": {"ours": [1.25, 1.5, 1.0], "upstream": [3.75] * 3},
        },
        "load": {"start": [1.0, 2.0, 3.0], "end": [4.0, 5.0, 6.0]},
        "machine": machine,
    }
    text = "\n".join(first_batch_lines(res))
    header = (
        "| pipeline | ours, empty | ours, warm | ours (before), empty | ours (before), warm | "
        "upstream FFCV, empty |"
    )
    lines = text.splitlines()
    assert lines.count(header) == 4, "a column per contestant and cache; none for no runs"
    assert "| plain decode | 10.0 (9.0-11.0) | 1.5 (1.5-30.0), 1 compiled | 30.0 (30.0-30.0) |" in (
        text
    )
    assert "| 2.00 (2.00-2.00) | 4.00, 1 failed |" in text
    assert "- plain, upstream, empty: exit 1: KeyError: 'A'" in text
    assert '| ours | `python -c "import ffcv_pairs"` | 1.25 (1.00-1.50) |' in text
    assert "at the start 1.00, 2.00, 3.00, at the end 4.00, 5.00, 6.00" in text
    assert text.count("## ") == 9, "four tables, imports, failures, pipelines, how, machine"


def test_the_compile_clock_counts_each_threads_outermost_compile_only() -> None:
    """numba nests the compile of a callee inside its caller's: one outermost interval per
    thread counts, in every thread."""
    import threading

    from bench.tables.first_batch_probe import CompileClock

    clock = CompileClock()

    def compile_nested(depth: int) -> None:
        for _ in range(depth):
            clock.on_start(None)
        for _ in range(depth):
            clock.on_end(None)

    compile_nested(3)
    compile_nested(1)
    worker = threading.Thread(target=compile_nested, args=(2,))
    worker.start()
    worker.join()
    assert clock.count == 3
    assert clock.cpu_s >= 0 and clock.wall_s >= 0


def test_the_node_order_figures_follow_their_definitions() -> None:
    """Two nodes of one rank on 3 shards of 4 samples (pages of 2, class = shard): what each
    node reads, the batch spans and the position spread, worked out by hand; Mosaic's array
    is read as a ``DataLoader`` reads its workers, in turn, padding left out."""
    from bench.tables.node_order_sim import (
        SimConfig,
        epoch_figures,
        make_dataset,
        mosaic_rank_seqs,
        over_epochs,
    )

    cfg = SimConfig(12, (3,), page_samples=2, nodes=(1, 2), canonical_nodes=2, classes=3)
    data = make_dataset(cfg, 3)
    assert data.page_of.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert data.shard_of.tolist() == data.class_of.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    seq = np.asarray
    first = epoch_figures([seq([0, 4, 1, 5]), seq([8, 9, 10])], data, 1, 2)
    assert [s.tolist() for s in first["shards"]] == [[0, 1], [2]]
    assert [p.tolist() for p in first["pages"]] == [[0, 2], [4, 5]]
    assert first["page_samples"] == [4, 4]
    assert first["batch_classes"].tolist() == [2, 2, 1], "[0, 4], [1, 5]; [8, 9] (10: no batch)"
    assert first["batch_shards"].tolist() == [2, 2, 1]
    placed = {i: float(x) for i, x in enumerate(first["position"]) if np.isfinite(x)}
    assert placed == {0: 0, 4: 0, 1: 0.5, 5: 0.5, 8: 0, 9: 0, 10: 0.5}, "step / ceil(len / 2)"
    second = epoch_figures([seq([1, 5, 0, 4]), seq([10, 9, 8])], data, 1, 2)
    row = over_epochs([first, second], data, 2)
    share = 12 / 2
    assert row["need_max"] == pytest.approx(8 / share) and row["need_mean"] == pytest.approx(1)
    assert row["new_max"] == 0 and row["held_max"] == pytest.approx(8 / share)
    # samples 0, 1, 4, 5, 8, 10 move by 0.5 (variance 0.125), 9 stays: sqrt(6 * 0.125 / 7)
    assert row["position_spread"] == pytest.approx(np.sqrt(6 * 0.125 / 7))
    assert row["read_fraction"] == pytest.approx(7 / 12)
    ids = np.asarray([[[[[0, 1], [2, 3]], [[4, 5], [6, -1]]]]])  # (1, 1, 2 workers, 2, 2)
    assert [s.tolist() for s in mosaic_rank_seqs(ids)] == [[0, 1, 4, 5, 2, 3, 6]]
    with pytest.raises(ValueError, match="canonical_nodes 64 is not a multiple of the node"):
        SimConfig(nodes=(8, 48))


def _smoke(tmp_path: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    """``python -m bench FLAGS --smoke --no-extras``, its report in ``out``, dated 2026-01-01."""
    cmd = [sys.executable, "-m", "bench", *flags, "--smoke", "--no-extras", "--out", str(out)]
    return subprocess.run(
        [*cmd, "--work", str(tmp_path / "work"), "--date", "2026-01-01"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_node_order_smoke_writes_the_report_and_node_rows_keep_to_their_stretch(
    tmp_path: Path,
) -> None:
    """``python -m bench --node-order --smoke --no-extras``: every (shards, nodes, order) row
    of ours; a node-local node reads the same shards every epoch (nothing new after the
    first, its cache is one epoch's need); a bad size is one line and exit 2."""
    out = tmp_path / "results"
    proc = _smoke(tmp_path, out, "--node-order")
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (out / "node-order-2026-01-01.md").read_text()
    for heading in ("## Target", "## What a node reads", "## Shuffle quality"):
        assert heading in md
    assert "Mosaic Streaming did not run: --no-extras" in md
    res = json.loads((out / "node-order-2026-01-01.json").read_text())
    got = {(r["shards"], r["nodes"], r["order"]) for r in res["rows"]}
    assert got == {(s, p, o) for s in (30, 300) for p in (8, 64) for o in ("global", "node")}
    for r in res["rows"]:
        assert r["need_pages_max"] <= r["need_max"] + 1e-9, r
        if r["order"] == "node":
            assert r["new_max"] == 0 and r["held_max"] == r["need_max"], r
    cmd = [sys.executable, "-m", "bench", "--node-order", "--smoke", "--no-extras"]
    bad = subprocess.run(
        [*cmd, "--n", "1000"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "samples 1000 is too few" in bad.stderr


def test_the_cache_simulation_keeps_its_invariants() -> None:
    """The node cache simulated over the loader's own orders and planner: with no limit each
    shard a node reads is downloaded once, whatever the epochs (the union of the shards its
    plans read); under a limit the cache never holds more, downloads at least what each
    epoch reads, and Belady never downloads more than least-recently-used (one shard size);
    a node downloads at least the bytes of the samples it reads. Mosaic's rule, sample by
    sample, worked out by hand."""
    from bench.tables.node_order_sim import SimConfig, make_dataset
    from bench.tables.remote_sim import cache_epochs, lru_epochs, node_plans, ours_epoch
    from ffcv_pairs.load.cache_plan import Plan, needed_bytes

    sim = SimConfig(40_000, (40,), page_samples=100, nodes=(2,), ranks_per_node=2,
                    batch_size=64, window_pages=4, canonical_nodes=2, epochs=3)  # fmt: skip
    data = make_dataset(sim, 40)
    sizes = data.shard_sizes * sim.sample_bytes
    offsets = np.concatenate([[0], np.cumsum(data.shard_sizes)])
    for partition in ("global", "node"):
        seqs = [ours_epoch(sim, data, 2, partition, e) for e in range(sim.epochs)]
        plans = [node_plans(s, offsets, 2, sim.batch_size) for s in seqs]
        for p in range(2):
            mine = [e[p] for e in plans]
            read = [np.unique(plan.shards) for plan in mine]
            free = cache_epochs(mine, sizes, None)
            assert (
                sum(e["downloaded"] for e in free) == sizes[np.unique(np.concatenate(read))].sum()
            )
            assert free[0]["downloaded"] >= sim.sample_bytes * sum(
                len(q) for q in seqs[0][2 * p : 2 * p + 2]
            )
            limit = max(needed_bytes(plan, sizes) for plan in mine)  # the least allowed
            assert limit < sizes[read[0]].sum(), "a limit that makes the cache evict"
            belady, lru = (cache_epochs(mine, sizes, limit, rule) for rule in ("belady", "lru"))
            for e, shards in enumerate(read):
                assert belady[e]["peak"] <= limit and lru[e]["peak"] <= limit
                assert belady[e]["downloaded"] >= sizes[shards].sum() - (limit if e else 0)
            assert sum(e["fetches"] for e in belady) <= sum(e["fetches"] for e in lru)
    # Steps read shards 1, 0, 1, 2, 0 with room for two: at step 3 least-recently-used drops
    # shard 0 (read at step 1; shard 1 at step 2) and fetches it again at step 4; Belady drops
    # shard 1, never read again.
    by_hand = Plan(np.arange(6), np.asarray([1, 0, 1, 2, 0]))
    two = np.asarray([10, 10, 10])
    assert [e["fetches"] for e in cache_epochs([by_hand], two, 20, "lru")] == [4]
    assert [e["fetches"] for e in cache_epochs([by_hand], two, 20, "belady")] == [3]
    with pytest.raises(ValueError, match="policy 'fifo' is not one of"):
        cache_epochs([], sizes, None, "fifo")

    # Two ranks read ids of shards 0, 1, 0, 1 (of 10 samples each) in turn: 0 1 | 1 0 | ...
    seq = np.asarray
    off, size = np.asarray([0, 10, 20]), np.asarray([100, 100])
    one = [[seq([0, 10]), seq([11, 1])]]
    assert lru_epochs(one, off, size, None) == [{"downloaded": 200, "peak": 200, "fetches": 2}]
    # read as 0, 11, 10, 1 -> shards 0, 1, 1, 0: one shard of room refetches shard 0
    assert lru_epochs(one, off, size, 100) == [{"downloaded": 300, "peak": 100, "fetches": 3}]
    with pytest.raises(ValueError, match="limit 50 bytes is below shard 0's 100 bytes"):
        lru_epochs(one, off, size, 50)


def test_remote_sim_smoke_writes_the_report(tmp_path: Path) -> None:
    """``python -m bench --remote sim --smoke --no-extras``: a row per (nodes, order,
    window), a cell per limit, the target judged per limit."""
    out = tmp_path / "results"
    proc = _smoke(tmp_path, out, "--remote", "sim")
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (out / "remote-2026-01-01.md").read_text()
    for heading in ("## Targets", "## 1. Simulated nodes"):
        assert heading in md
    res = json.loads((out / "remote-2026-01-01.json").read_text())
    got = {(r["nodes"], r["order"], r["window"]) for r in res["sim"]["rows"]}
    want = {(p, o, w) for p in (8, 64) for o in ("global", "node") for w in (32, 4)}
    assert got == want | {(p, "node_window", w) for p in (8, 64) for w in (32, 64, 128)}
    for r in res["sim"]["rows"]:
        assert [c["limit"] for c in r["cache"]] == [None, 1.0, 0.5]
        free = r["cache"][0]
        assert not free["refused"] and free["first_max"] >= 1 - 1e-9, free
    assert md.count('| `partition="node"`') == 6
    assert md.count('| `partition="node", node_window=True`') == 9
