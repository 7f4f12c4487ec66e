"""``python -m bench`` (``--quick``, ``--help``, ...): see :mod:`bench.run` for every command.

``python -m bench --photo-ops [--rounds N] [--n N] [--no-throughput]`` runs the per-op table of
the photometric ops instead (:mod:`bench.tables.photo_table`).
"""

import sys

__all__: list[str] = []

if sys.argv[1:2] == ["--photo-ops"]:
    from bench.tables.photo_table import main as photo_main

    raise SystemExit(photo_main(sys.argv[2:]))

from bench.run import main

raise SystemExit(main())
