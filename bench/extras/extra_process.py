"""Entry point of an extra's process, run by that extra's venv python.

    bench/.venv-litdata/bin/python bench/extras/extra_process.py litdata prepare '{"n": ...}'
    bench/.venv-litdata/bin/python bench/extras/extra_process.py litdata serve '{"n": ...}'

``prepare`` writes the extra's format from the ``.npy`` files; ``serve`` does the
same if the format is not there yet, then answers the JSON-line commands of
:func:`bench.core.timing.serve` on stdin. Results go to stdout behind a marker;
whatever the library prints goes to stderr.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.core.timing import serve

__all__ = ["MARK", "main"]

MARK = "@@BENCH "


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in ("litdata", "streaming"):
        sys.stderr.write("usage: extra_process.py litdata|streaming prepare|serve SPEC_JSON\n")
        return 2
    key, action, spec = argv[1], argv[2], json.loads(argv[3])
    out = sys.stdout
    sys.stdout = sys.stderr

    def send(msg: dict) -> None:
        out.write(MARK + json.dumps(msg) + "\n")
        out.flush()

    impl = importlib.import_module(f"bench.extras.{key}_contestant")
    seconds = None
    if action == "prepare" or not (Path(spec["out_dir"]) / "index.json").exists():
        t = time.perf_counter()
        impl.prepare(spec)
        seconds = time.perf_counter() - t
    if action == "prepare":
        send({"seconds": seconds})
        return 0
    module = importlib.import_module(key)
    send({"ready": True, "version": module.__version__, "prepare_s": seconds})
    serve(
        lambda: json.loads(sys.stdin.readline() or '{"cmd": "stop"}'),
        send,
        lambda: impl.build(spec),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
