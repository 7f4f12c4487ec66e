#!/usr/bin/env python
"""Convert per-sample or batched .pt pairs into FFCV .beton files.

Commands::

    python writers/write_beton.py SRC_DIR OUT_DIR --split train [--split val ...]
        [--source-kind auto|per-sample|batched] [--workers N] [--limit N]
        [--page-size BYTES] [--store-dtype uint8|float16] [--shuffle SEED] [--resume]
        [--config YAML]

    # the same options from a YAML file (command-line flags win):
    python writers/write_beton.py --config configs/write.yaml

    # e.g. the demo's data, both splits, 2 worker processes:
    python writers/write_beton.py demo_out/pt demo_out/beton --split train --split val --workers 2

    # after a kill, a crash, SIGTERM or a bad file: the same command, plus --resume
    python writers/write_beton.py demo_out/pt demo_out/beton --split train --workers 2 --resume

Writes ``OUT_DIR/<split>.beton`` and its checksum sidecar ``OUT_DIR/<split>.beton.json``.
Bad input prints one line naming the file and exits with status 2; the message says
when ``--resume`` can continue from the kept ``.partial``. Ctrl-C and SIGTERM, at any
moment, end it within seconds with status 130 and 143.
"""

import os
import signal
import sys


def _exit_at_once(signum: int, frame: object) -> None:
    # Nothing is written yet. An exception raised here instead could land inside an
    # extension module's initialisation, which aborts the interpreter (pybind11's
    # std::terminate: SIGABRT, no message).
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    os.write(2, f"error: interrupted by {name} while starting; nothing was written\n".encode())
    os._exit(128 + signum)


if __name__ == "__main__":
    # While the imports run (seconds): SIGINT and SIGTERM exit at once with 130 and 143.
    # Then Ctrl-C is a KeyboardInterrupt again, and the writer takes SIGTERM over.
    default_int = signal.signal(signal.SIGINT, _exit_at_once)
    signal.signal(signal.SIGTERM, _exit_at_once)
    from ffcv_pairs.cli import write_main

    signal.signal(signal.SIGINT, default_int)
    try:
        code = write_main()
    except KeyboardInterrupt:  # outside the writer: nothing was started, or all is done
        print("error: interrupted by Ctrl-C", file=sys.stderr)
        code = 128 + signal.SIGINT
    sys.exit(code)
