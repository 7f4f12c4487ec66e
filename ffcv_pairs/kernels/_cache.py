"""numba's on-disk cache, in the folder :mod:`.cache_dir` chooses, keyed on every kernel
source a function can call and on the kind of kernels (LLVM intrinsics or plain twins,
see ``twins``).

numba stamps a cached kernel with its own file only. Kernels here call
functions in other files (the byte moves, the hash), and numba inlines them,
so a change to ``hashing.py`` would leave every caller's cached machine code
stale. The locators below add a digest of all ``kernels/*.py`` sources to the
stamp of every cached function of this package: change any kernel source and
every dependant recompiles. Jitted code elsewhere in the package may call
into ``kernels/`` only, so that digest covers every cross-file call.

The same source compiles to different machine code under
``FFCV_PAIRS_PLAIN_KERNELS=1``, so the kind is in the stamp too (a kernel cached
for the other kind is never loaded), and in the file names (``-intrinsic`` or
``-plain`` after the line number), so both kinds stay cached side by side and a
run of each kind, as ``make test`` does, does not evict the other's kernels.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import pickle
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numba as nb
from numba.core import caching, config
from numba.core.compiler_lock import global_compiler_lock

from .cache_dir import kernel_cache_dir
from .twins import VARIANT

__all__ = [
    "KERNEL_DIR",
    "PACKAGE_DIR",
    "SharedCompile",
    "announce",
    "cache_folder",
    "compile_lock",
    "compiled_only",
    "is_cached",
    "kernel_sources_digest",
]

log = logging.getLogger("ffcv_pairs")

#: Roughly how long a first compile takes, in seconds of one core (2-core machine, numba
#: 0.68.1; the fused kernel's figure is the most its pruned variants take, see
#: ``fused_pairs``); kernels not named take a few seconds.
_COMPILE_SECONDS = {
    "fused_pairs": 20,
    "fused_pairs_serial": 15,
    "copy_pairs": 1,
    "copy_pairs_serial": 1,
    "decode_pairs": 9,
    "decode_pairs_serial": 7,
    "unpack_pairs": 8,
    "unpack_pairs_serial": 5,
    "user_op_batch": 2,
    "drawn_op_batch": 1,
}

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
    """``base``, restricted to this package, with the kernel digest and the kernel kind in
    its stamp and the kind in its file names."""

    def get_source_stamp(self: Any) -> Any:
        return (base.get_source_stamp(self), kernel_sources_digest(), VARIANT)

    def get_disambiguator(self: Any) -> str:
        return f"{base.get_disambiguator(self)}-{VARIANT}"

    def from_function(cls: type, py_func: Any, py_file: str) -> Any:
        if not _ours(py_file):
            return None
        return base.from_function.__func__(cls, py_func, py_file)

    return type(
        f"KernelStamped{base.__name__}",
        (base,),
        {
            "get_source_stamp": get_source_stamp,
            "get_disambiguator": get_disambiguator,
            "from_function": classmethod(from_function),
        },
    )


class _PackageCacheLocator(
    _numba("SourceFileBackedLocatorMixin"),  # type: ignore[misc]
    _numba("CacheLocator"),  # type: ignore[misc]
):
    """The package's kernels in the per-user folder of :mod:`.cache_dir`, one subfolder per
    package folder (``kernels``, ``load``); numba's ``NUMBA_CACHE_DIR`` wins when it is set
    and ``FFCV_PAIRS_CACHE_DIR`` is not."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        folder = kernel_cache_dir(kernel_sources_digest())
        assert folder is not None  # from_function checked
        sub = Path(py_file).resolve().parent.relative_to(PACKAGE_DIR)
        self._cache_path = str(folder / sub)

    def get_cache_path(self) -> str:
        return self._cache_path

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if kernel_cache_dir(kernel_sources_digest()) is None:
            return None
        return super().from_function(py_func, py_file)


# numba internals edited here, checked with numba 0.68.1 (llvmlite 0.50.0; the pins in
# pyproject.toml stop at these): ``CacheImpl._locator_classes`` (private: the list numba
# walks to find a function's cache locator, first match wins), the three locator classes
# (public from 0.62, ``_``-prefixed before) and their methods ``from_function``,
# ``get_source_stamp`` and ``get_disambiguator``, and ``IndexDataCacheFile._load_index`` (below).
# If a numba release renames the list or a class, this import fails loudly. If it stops
# reading the list (or the user sets NUMBA_CACHE_LOCATOR_CLASSES, which replaces it), or calls
# the methods differently, it fails silently: kernels load stale after an edit of another
# kernel file, or compiled for the other FFCV_PAIRS_PLAIN_KERNELS setting.
# tests/test_kernel_cache.py catches both.
_LOCATORS = [_with_kernel_stamp(_PackageCacheLocator)] + [
    _with_kernel_stamp(_numba(name))
    for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")
]
_CLASSES = _numba("CacheImpl")._locator_classes
if not any(c.__name__.startswith("KernelStamped") for c in _CLASSES):
    _CLASSES[:0] = _LOCATORS
if _REPLACED := getattr(config, "CACHE_LOCATOR_CLASSES", None):
    warnings.warn(
        f"NUMBA_CACHE_LOCATOR_CLASSES={_REPLACED!r} replaces ffcv_pairs' "
        "cache locators: cached kernels may be stale, or compiled for the other "
        "FFCV_PAIRS_PLAIN_KERNELS setting. Unset it to key the kernels as ffcv_pairs needs.",
        stacklevel=2,
    )


# An index file of ours whose pickle names a class that is gone (a named tuple of a kernel's
# signature renamed, or an older install's cache under a newer one) makes numba's
# ``IndexDataCacheFile._load_index`` raise "Can't get attribute ..." at the kernel's first call,
# before it compares stamps. Such an index is stale by definition: read it as empty, so the
# kernel compiles again and numba overwrites the files. Other packages' indexes (names without
# the kind suffix that ``get_disambiguator`` adds) raise as before.
_OUR_INDEX = re.compile(rf"-{VARIANT}\.py\d+[a-z]*\.nbi$")
_numba_load_index = caching.IndexDataCacheFile._load_index


def _load_index_or_empty(self: Any) -> Any:
    try:
        return _numba_load_index(self)
    except (AttributeError, ImportError, pickle.UnpicklingError, EOFError, TypeError):
        if not _OUR_INDEX.search(self._index_name):
            raise
        return {}


if getattr(caching.IndexDataCacheFile._load_index, "__name__", "") != "_load_index_or_empty":
    caching.IndexDataCacheFile._load_index = _load_index_or_empty  # type: ignore[method-assign]


# A process forked while another thread compiles (the loader's epoch thread at a first batch,
# or a parallel kernel compiling in the background, see ``stand_in``) would inherit numba's
# compiler lock held by a thread it does not have, and hang at its own first compile: a
# writer's forked workers did. So a fork waits for the compile under way: numba's lock is
# taken before every fork and released after it, in the parent and in the child. numba
# internals (0.68.1): the RLock inside ``global_compiler_lock``, which every compile holds.
_COMPILES = global_compiler_lock._lock
os.register_at_fork(
    before=_COMPILES.acquire, after_in_parent=_COMPILES.release, after_in_child=_COMPILES.release
)


class SharedCompile:
    """Calls kernels so that processes that need the same new kernel at once compile it once.

    A kernel's first call with new argument types compiles it (tens of seconds for the fused
    kernels) and writes it to the on-disk cache. DDP ranks, or several loaders on one
    machine, reach that first call together, and each would compile the same kernel. Here
    the first call of each kernel that has no machine code in this process for the arguments'
    types takes an exclusive lock on a file beside the kernel's cache files: one process
    compiles; the others wait, then load the kernel from the cache. Later calls go straight
    to the kernel. Where the cache folder cannot hold the lock, the call goes ahead unlocked.

    numba internals used (numba 0.68.1): ``Dispatcher._cache.cache_path`` (the cache folder)
    and ``Dispatcher.overloads`` (the compiled signatures).
    """

    def __init__(self) -> None:
        self._called: set[int] = set()

    def __call__(self, kernel: Any, *args: Any) -> Any:
        if id(kernel) in self._called:
            return kernel(*args)
        self._called.add(id(kernel))
        return _locked_first_call(kernel, args)


def is_cached(kernel: Any, types: tuple) -> bool:
    """Whether the on-disk cache holds ``kernel``'s machine code for argument ``types``
    (numba internals: ``Dispatcher._cache``, its ``_index_key`` and the index file's
    ``_load_index``; True when they cannot tell, so that nothing is announced wrongly)."""
    cache = getattr(kernel, "_cache", None)
    try:
        key = cache._index_key(types, kernel.targetctx.codegen())  # type: ignore[union-attr]
        return key in cache._cache_file._load_index()  # type: ignore[union-attr]
    except Exception:  # an internal renamed, an unreadable index: say nothing
        return True


def _locked_first_call(kernel: Any, args: tuple) -> Any:
    try:
        types = tuple(kernel.typeof_pyval(a) for a in args)
    except Exception:  # an argument numba cannot type: the call raises its own error
        return kernel(*args)
    if types in kernel.overloads or cache_folder(kernel) is None:
        return kernel(*args)
    announce(kernel, types)
    with compile_lock(kernel):
        return kernel(*args)


def cache_folder(kernel: Any) -> str | None:
    """The folder of ``kernel``'s cached machine code (None: not cached on disk)."""
    return getattr(getattr(kernel, "_cache", None), "cache_path", None)


def announce(kernel: Any, types: tuple, background: bool = False, stand_in: bool = False) -> None:
    """Say once, on one line, that ``kernel`` compiles for ``types`` (unless it is cached):
    in the foreground (about how long), or in the background while its serial twin serves
    (``stand_in``: while a numpy stand-in serves)."""
    if is_cached(kernel, types):
        return
    name, folder = kernel.py_func.__name__, cache_folder(kernel)
    if background and stand_in:
        log.warning(
            "ffcv-pairs: compiling the %s kernel in the background; batches come from a numpy "
            "stand-in (the same bytes) until it is ready, then it is cached in %s for later runs",
            name,
            folder,
        )
        return
    if background:
        log.warning(
            "ffcv-pairs: compiling the parallel %s kernel in the background; batches come from "
            "its serial twin until it is ready, then it is cached in %s for later runs",
            name,
            folder,
        )
        return
    log.warning(
        "ffcv-pairs: compiling the %s kernel for this machine (first use, about %d s of one "
        "core); it is cached in %s for later runs (`ffcv-pairs warmup` does this ahead)",
        name,
        _COMPILE_SECONDS.get(name, 5),
        folder,
    )


@contextlib.contextmanager
def compile_lock(kernel: Any) -> Iterator[None]:
    """Hold ``kernel``'s compile lock, a file beside its cached machine code: one process
    of a node compiles, the others wait and then load it. Where no lock can be had (a
    read-only folder, a file system without locks), or none is needed (a kernel with no disk
    cache: nothing to share), go ahead unlocked."""
    func, folder = kernel.py_func, cache_folder(kernel)
    if folder is None:  # not cached: no lock file (it once landed in the working directory)
        yield
        return
    lock = Path(folder) / f"{func.__module__}.{func.__qualname__}.lock"
    with contextlib.ExitStack() as stack:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fcntl.flock(stack.enter_context(open(lock, "ab")), fcntl.LOCK_EX)
        except OSError:
            pass
        yield


def compiled_only(func: Any, types: tuple) -> Any:
    """``func`` as a parallel, cached numba kernel compiled (or loaded from the disk cache)
    for exactly ``types``, under the compile lock and announced; further compiles are turned
    off, so a call with other types raises ``TypeError`` rather than compiling a variant the
    cache cannot key (the user-op and drawn-op drivers, which take a first-class function)."""
    kernel = nb.njit(cache=True, parallel=True, nogil=True)(func)
    announce(kernel, types)
    with compile_lock(kernel):
        kernel.compile(types)
    kernel.disable_compile()
    return kernel
