"""Where the compiled kernels live: a per-user folder that outlives the environment.

numba's default puts a module's cached kernels in ``__pycache__`` beside its source, inside
``site-packages``: read-only in many images, and gone with every new virtual environment, so
each one paid the compile again (tens of seconds a pipeline). Here the folder is, in order:

1. ``FFCV_PAIRS_CACHE_DIR``, when set;
2. numba's own ``NUMBA_CACHE_DIR``, when set (numba's locator takes it, with this
   package's stamp, see :mod:`._cache`);
3. ``$XDG_CACHE_HOME/ffcv-pairs`` (``~/.cache/ffcv-pairs`` by default).

Under it, kernels sit in ``<package version>/numba-<numba version>/<kernel digest>/<module
folder>``: an upgrade, another numba or an edited kernel source gets a folder of its own
(never a stale kernel, and two installs at one version share their kernels). A folder that
cannot be written falls back, with one warning, to a per-user folder in the temporary
directory, then to a fresh temporary folder: a read-only home never stops a loader.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numba
from numba.core import config

from .._version import __version__

__all__ = ["CACHE_ENV", "cache_root", "kernel_cache_dir"]

#: The environment variable that chooses the cache folder.
CACHE_ENV = "FFCV_PAIRS_CACHE_DIR"

_chosen: dict[str, Path] = {}


def cache_root() -> Path | None:
    """The folder chosen by the environment, before any fallback; None when numba's own
    ``NUMBA_CACHE_DIR`` is set and ours is not (numba's locator is used then)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if getattr(config, "CACHE_DIR", ""):  # NUMBA_CACHE_DIR
        return None
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "ffcv-pairs"


def kernel_cache_dir(digest: str) -> Path | None:
    """This install's writable kernel folder (made on first use), or None when numba's
    ``NUMBA_CACHE_DIR`` rules; the kernel ``digest`` names the source's version."""
    root = cache_root()
    if root is None:
        return None
    key = str(root)
    if key not in _chosen:
        _chosen[key] = _writable(root, Path(__version__, f"numba-{numba.__version__}", digest[:16]))
    return _chosen[key]


def _writable(root: Path, sub: Path) -> Path:
    """``root / sub``, or else the first fallback that can be written: ``sub`` in a per-user
    folder of the temporary directory, then a fresh temporary folder (one warning names
    the folder wanted, why it failed and the one used)."""
    wanted = root / sub
    problem = _problem(wanted)
    if problem is None:
        return wanted
    user = os.getuid() if hasattr(os, "getuid") else "user"
    folder = Path(tempfile.gettempdir()) / f"ffcv-pairs-{user}" / sub
    if _problem(folder) is not None:
        folder = Path(tempfile.mkdtemp(prefix="ffcv-pairs-kernels-"))
    warnings.warn(
        f"ffcv-pairs: kernel cache {wanted} is not writable ({problem}); compiled kernels go "
        f"to {folder} instead (set {CACHE_ENV} to a writable folder to keep them)",
        RuntimeWarning,
        stacklevel=2,
    )
    return folder


def _problem(folder: Path) -> str | None:
    """Why ``folder`` cannot hold cached kernels, or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None
