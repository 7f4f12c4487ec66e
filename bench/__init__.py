"""Benchmarks of ffcv-pairs against the other ways to load image pairs.

Entry point: ``python -m bench`` (see :mod:`bench.run` for the exact commands). The rooms,
each importing only those above it in this list:

* :mod:`bench.core`: settings, the main data set, fresh processes, timing, memory, machine;
* :mod:`bench.extras`: LitData and MosaicML Streaming in their own venvs;
* :mod:`bench.contest`: the contestants, their processes, the interleaved rounds;
* :mod:`bench.tables`: each table of the report, its measurement and its section;
* :mod:`bench.scale`: the user's day at full scale, and a file larger than RAM;
* :mod:`bench.gpu`: the GPU check and its offline bundle (imports no other room).

Kept free of imports so that the extras' venvs can import :mod:`bench.core.timing`.
"""

__all__: list[str] = []
