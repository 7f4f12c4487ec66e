"""``python -m bench`` (``--quick``, ``--help``, ...): see :mod:`bench.run` for every command."""

from bench.run import main

__all__: list[str] = []

raise SystemExit(main())
