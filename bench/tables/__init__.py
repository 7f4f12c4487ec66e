"""The tables of ``python -m bench``: each table's measurement and its report.

:mod:`bench.tables.suite` runs them in order and writes one report
(``bench/results/bench-<date>.md``); :mod:`bench.tables.report` renders it.
"""

__all__: list[str] = []
