"""The choice between the hand-written LLVM intrinsics and their plain-numba twins.

Every intrinsic of ``lanes``, ``bytemoves``, ``bytesums`` and ``floatbits`` has a
plain-numba twin with the same contract (same inputs, same bytes out), and the
tests compare the two byte for byte. An intrinsic is fast but easy to get subtly
wrong and tied to numba and llvmlite internals; its twin is the readable
definition, and the way to rule the intrinsics out when a result looks wrong:

    FFCV_PAIRS_PLAIN_KERNELS=1 python -m ffcv_pairs ...

The variable is read once, when this module is first imported: each kernel module
then binds its public names (``copy_bytes``, ``blend8``, ...) to one kind with
:func:`pick`, so callers never change. The kind is part of numba's on-disk cache
key (see ``_cache``): a process never loads a kernel compiled for the other kind.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ENV_VAR", "PLAIN", "VARIANT", "pick", "plain_setting"]

ENV_VAR = "FFCV_PAIRS_PLAIN_KERNELS"
_SETTINGS = {"": False, "0": False, "1": True}


def plain_setting(value: str | None) -> bool:
    """Whether ``value`` (of :data:`ENV_VAR`; ``None``: unset) asks for the plain twins.

    Raises:
        ValueError: anything but unset, ``""``, ``"0"`` or ``"1"`` (a typo must not
            silently keep the intrinsics).
    """
    if value is None:
        return False
    if value.strip() not in _SETTINGS:
        raise ValueError(f"Invalid {ENV_VAR}: {value!r}. Must be one of '1', '0' or unset.")
    return _SETTINGS[value.strip()]


PLAIN = plain_setting(os.environ.get(ENV_VAR))
VARIANT = "plain" if PLAIN else "intrinsic"  # the word in numba's cache file names


def pick(intrinsic: Any, plain: Any) -> Any:
    """The kernel this process runs: ``plain`` under ``FFCV_PAIRS_PLAIN_KERNELS=1``."""
    return plain if PLAIN else intrinsic
