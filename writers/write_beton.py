#!/usr/bin/env python
"""Convert per-sample or batched .pt pairs into FFCV .beton files.

Commands::

    python writers/write_beton.py SRC_DIR OUT_DIR --split train [--split val ...]
        [--layout auto|per-sample|batched] [--workers N] [--limit N]
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
when ``--resume`` can continue from the kept ``.partial``.
"""

import sys

from ffcv_pairs.cli import write_main

if __name__ == "__main__":
    sys.exit(write_main())
