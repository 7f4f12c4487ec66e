"""The peers' extras: LitData and MosaicML Streaming, each in its own venv under ``bench/``.

Set up with ``python -m bench --setup-extras`` (:mod:`bench.extras.venvs`); each runs as a
subprocess of its venv's python (:mod:`bench.extras.extra_process`). Kept free of imports:
those venvs import this package.
"""

__all__: list[str] = []
