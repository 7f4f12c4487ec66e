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

``ffcv/pipeline/graph.py`` starts with ``from distutils.log import warn``, and Python
3.12 has no ``distutils`` (only setuptools brings it back), while 3.11's costs 35 ms of
every import: unless the process has imported it already, a stand-in ``distutils.log``
whose ``warn`` is ``warnings.warn`` serves that one import and is removed at once.

And ``ffcv/pipeline/compiler.py`` sets torch's and numba's thread counts to 1
on import, in the importing thread: both are put back as they were, so
``import ffcv_pairs`` changes neither. (The loader's epoch threads set their
own counts, which are per thread.) Without effect when ffcv was imported before
ffcv_pairs.

Upstream's memory managers build their state types by *mutating* numba's
interned array types (``t = nb.uint8[::1]; t.mutable = False`` in
``OSCacheManager.state_type`` and ``ProcessCacheManager.state_type``). Those are
the very objects every jitted function of the process uses for ``uint8[::1]``
(and ``uint8[:, ::1]``, ``uint64[::1]``, ``uint32[::1]``), so constructing an
upstream ``Loader`` changes their hash while they are keys of numba's overload
tables: the next compile of a kernel that had such an argument fails with a
``KeyError`` from a corrupted ``OrderedDict`` (and ``uint8[::1]`` means
read-only from then on). :func:`stop_type_mutation` points those two modules'
``nb`` at a view of numba whose ``uint8[...]`` (and so on) are read-only copies,
which is what upstream meant: setting ``mutable = False`` on them changes
nothing. This applies whether ffcv was imported first or not.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from typing import Any

__all__ = ["LazyModule", "import_ffcv", "stop_type_mutation"]


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


class _ReadonlyArrays:
    """``dtype[index]`` as a new read-only array type; the interned one is left alone."""

    def __init__(self, dtype: Any):
        self.dtype = dtype

    def __getitem__(self, index: Any) -> Any:
        return self.dtype[index].copy(readonly=True)


class _NumbaView(types.ModuleType):
    """numba, but with some dtypes whose array types come out read-only."""

    def __init__(self, name: str, readonly: tuple[str, ...]):
        super().__init__(name)
        import numba

        self._numba = numba
        for dtype in readonly:
            setattr(self, dtype, _ReadonlyArrays(getattr(numba, dtype)))

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._numba, attr)


def stop_type_mutation() -> None:
    """Keep upstream's memory managers from mutating numba's interned array types."""
    from ffcv.memory_managers import os_cache
    from ffcv.memory_managers.process_cache import manager

    # os_cache uses nb.uint64 as a scalar type too; it never mutates uint64 arrays.
    for module, readonly in ((os_cache, ("uint8",)), (manager, ("uint8", "uint64", "uint32"))):
        if not isinstance(module.nb, _NumbaView):
            module.nb = _NumbaView("numba", readonly)


def _distutils_log() -> list[str]:
    """Put a stand-in ``distutils.log`` in ``sys.modules`` unless one was imported; the names
    added."""
    if "distutils.log" in sys.modules:
        return []
    added = [name for name in ("distutils", "distutils.log") if name not in sys.modules]
    package = sys.modules.get("distutils") or types.ModuleType("distutils")
    log = types.ModuleType("distutils.log")
    log.warn = warnings.warn  # type: ignore[attr-defined]
    sys.modules.update({"distutils": package, "distutils.log": log})
    return added


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
    stand_ins = _distutils_log()
    try:
        import ffcv  # noqa: F401
    finally:
        for name in stand_ins:
            del sys.modules[name]
        numba.typed.Dict = typed_dict
        if sys.modules.get("cv2") is stub:
            del sys.modules["cv2"]  # a later ``import cv2`` gets the real module
        if torch.get_num_threads() != threads[0]:
            torch.set_num_threads(threads[0])
        if numba.get_num_threads() != threads[1]:
            numba.set_num_threads(threads[1])


import_ffcv()
stop_type_mutation()
