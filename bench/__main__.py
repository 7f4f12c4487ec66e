"""``python -m bench``: see :mod:`bench.run` for the commands."""

from bench.run import main

raise SystemExit(main())
