"""``python -m bench`` (``--quick``, ``--help``, ...): see :mod:`bench.run` for every command.

``python -m bench --photo-ops [--rounds N] [--n N] [--no-throughput]`` runs the per-op table of
the photometric ops instead (:mod:`bench.tables.photo_table`), and ``python -m bench
--pipelines [--rounds N] [--n N]`` the whole pipelines against Albumentations and torchvision
(:mod:`bench.tables.pipelines_table`).
"""

import sys

__all__: list[str] = []

if sys.argv[1:2] == ["--photo-ops"]:
    from bench.tables.photo_table import main as photo_main

    raise SystemExit(photo_main(sys.argv[2:]))
if sys.argv[1:2] == ["--pipelines"]:
    from bench.tables.pipelines_table import main as pipelines_main

    raise SystemExit(pipelines_main(sys.argv[2:]))

from bench.run import main

raise SystemExit(main())
