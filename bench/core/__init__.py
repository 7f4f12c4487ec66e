"""The measuring core: settings, the main data set, fresh processes, timing, memory, machine.

Imports nothing else of ``bench``; every other room builds on it. Kept free of imports so
that the extras' venvs can import :mod:`bench.core.timing` (standard library only).
"""

__all__: list[str] = []
