"""Import upstream FFCV once, without its import-time numba compile.

``ffcv/fields/rgb_image.py`` builds ``IMAGE_MODES = numba.typed.Dict()`` when it
is imported (and every ``import ffcv`` imports it): numba compiles its typed
dict for a two-entry table that only Python code ever reads. That costs about
3 s and 110 MB of private memory in every process, every rank included. Here
ffcv is imported with ``numba.typed.Dict`` standing in as ``dict`` for that one
import, which upstream's Python code reads the same way; the real class is put
back at once. Without effect when ffcv was imported before ffcv_pairs.
"""

from __future__ import annotations

import sys

__all__ = ["import_ffcv"]


def import_ffcv() -> None:
    if "ffcv" in sys.modules:
        return
    import numba.typed

    typed_dict = numba.typed.Dict
    numba.typed.Dict = dict
    try:
        import ffcv  # noqa: F401
    finally:
        numba.typed.Dict = typed_dict


import_ffcv()
