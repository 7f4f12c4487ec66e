"""Benchmarks of ffcv-pairs against the other ways to load image pairs.

Entry point: ``python -m bench`` (see :mod:`bench.run` for the exact commands).
Kept free of imports so that the extras' venvs can import :mod:`bench.timing`.
"""

__all__: list[str] = []
