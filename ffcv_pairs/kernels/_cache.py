"""numba's on-disk cache, keyed on every kernel source a function can call.

numba stamps a cached kernel with its own file only. Kernels here call
functions in other files (the byte moves, the hash), and numba inlines them,
so a change to ``hashing.py`` would leave every caller's cached machine code
stale. The locators below add a digest of all ``kernels/*.py`` sources to the
stamp of every cached function of this package: change any kernel source and
every dependant recompiles. Jitted code elsewhere in the package may call
into ``kernels/`` only, so that digest covers every cross-file call.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from numba.core import caching

__all__ = ["KERNEL_DIR", "PACKAGE_DIR", "kernel_sources_digest"]

KERNEL_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = KERNEL_DIR.parent


def kernel_sources_digest(directory: Path = KERNEL_DIR) -> str:
    """SHA-256 over the names and bytes of every ``*.py`` in ``directory``."""
    files = sorted(directory.glob("*.py"))
    return _digest(tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files))


@functools.lru_cache(maxsize=8)
def _digest(files: tuple[tuple[str, int, int], ...]) -> str:
    """Hash the files (the stat tuple keys the memo: an edited file is hashed again)."""
    h = hashlib.sha256()
    for name, _, _ in files:
        path = Path(name)
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _ours(py_file: str) -> bool:
    return Path(py_file).resolve().is_relative_to(PACKAGE_DIR)


def _numba(name: str) -> Any:
    """A class of ``numba.core.caching`` (public from numba 0.62, ``_``-prefixed before)."""
    return getattr(caching, name, None) or getattr(caching, f"_{name}")


def _with_kernel_stamp(base: Any) -> type:
    """``base``, restricted to this package, with the kernel digest in its stamp."""

    def get_source_stamp(self: Any) -> Any:
        return (base.get_source_stamp(self), kernel_sources_digest())

    def from_function(cls: type, py_func: Any, py_file: str) -> Any:
        if not _ours(py_file):
            return None
        return base.from_function.__func__(cls, py_func, py_file)

    return type(
        f"KernelStamped{base.__name__}",
        (base,),
        {"get_source_stamp": get_source_stamp, "from_function": classmethod(from_function)},
    )


_LOCATORS = [
    _with_kernel_stamp(_numba(name))
    for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")
]
_CLASSES = _numba("CacheImpl")._locator_classes
if not any(c.__name__.startswith("KernelStamped") for c in _CLASSES):
    _CLASSES[:0] = _LOCATORS
