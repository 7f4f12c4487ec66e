"""Import upstream FFCV once, without its import-time numba compile or OpenCV.

Every ``import ffcv`` imports ``ffcv/fields/rgb_image.py``, which costs every
process (every rank) twice, for an image field this project never reads:

* It builds ``IMAGE_MODES = numba.typed.Dict()``: numba compiles its typed dict
  for a two-entry table that only Python code ever reads (about 3 s and 110 MB
  of private memory). Here ``numba.typed.Dict`` stands in as ``dict`` for that
  one import, which upstream's Python code reads the same way; the real class
  is put back at once.
* It imports OpenCV (``cv2``, with Qt and its own BLAS: about 25 MB) for its
  JPEG writer and resizer. Here the module gets a stand-in that imports the
  real ``cv2`` the first time one of its attributes is used.

And ``ffcv/pipeline/compiler.py`` sets torch's and numba's thread counts to 1
on import, in the importing thread: both are put back as they were, so
``import ffcv_pairs`` changes neither. (The loader's epoch threads set their
own counts, which are per thread.)

Without effect when ffcv was imported before ffcv_pairs.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["LazyModule", "import_ffcv"]


class LazyModule(types.ModuleType):
    """A stand-in in ``sys.modules`` that imports the real module on first use.

    Dunder probes (``__file__``, ``__path__``, ...: tools that scan ``sys.modules``)
    do not import it; they find nothing.
    """

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def import_ffcv() -> None:
    if "ffcv" in sys.modules:
        return
    import numba
    import numba.typed
    import torch

    threads = torch.get_num_threads(), numba.get_num_threads()
    typed_dict = numba.typed.Dict
    numba.typed.Dict = dict
    stub = LazyModule("cv2")
    sys.modules.setdefault("cv2", stub)
    try:
        import ffcv  # noqa: F401
    finally:
        numba.typed.Dict = typed_dict
        if sys.modules.get("cv2") is stub:
            del sys.modules["cv2"]  # a later ``import cv2`` gets the real module
        if torch.get_num_threads() != threads[0]:
            torch.set_num_threads(threads[0])
        if numba.get_num_threads() != threads[1]:
            numba.set_num_threads(threads[1])


import_ffcv()
