"""Imported once by the forkserver, so that contestant processes start without import time.

Every contestant process of the project's venv is forked from a server that has
imported only this: it never built a loader, so each contestant still compiles
or loads its own JIT code (upstream FFCV compiles its pipeline per process).
"""

import numpy  # noqa: F401
import psutil  # noqa: F401
import torch
import torch.utils.data  # noqa: F401

# ffcv_pairs first: it imports ffcv without ffcv's import-time numba compile.
import ffcv_pairs
import ffcv_pairs.load.loader  # noqa: F401  (the package imports its parts on first use)

# isort: split
from ffcv.loader import Loader  # noqa: F401

__all__: list[str] = []
