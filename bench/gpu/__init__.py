"""The GPU check, and the bundle that carries it to an offline GPU machine.

``python -m bench.gpu.check`` (:mod:`bench.gpu.check`), ``python -m bench.gpu.bundle``
(:mod:`bench.gpu.bundle`), and on the GPU machine ``bash gpu-bundle/run.sh OUT``
(``bench/gpu/run.sh``).
"""

__all__: list[str] = []
