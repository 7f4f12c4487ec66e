"""A full disk, as the writer reports it: one line naming the output file, the free
space and about how much more the file needs."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

__all__ = ["allocated", "disk_full", "no_space"]

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def no_space(e: BaseException) -> bool:
    """Whether ``e`` says the disk (or the user's quota) is full."""
    return isinstance(e, OSError) and e.errno in _NO_SPACE


def _amount(size: float) -> str:
    """``1536`` -> ``"1.5 KiB"``, ``700`` -> ``"700 bytes"``."""
    unit = "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, larger
    return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"


def allocated(path: Path) -> int:
    """Bytes of disk that ``path`` takes (``OUT.partial`` is sparse until written); 0 when
    it does not exist."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def disk_full(out: Path, missing: int) -> str:
    """``OUT: disk full: <free> free in <folder>, and OUT needs about <missing> more``."""
    folder = out.parent
    free = shutil.disk_usage(folder).free
    need = f", and {out.name} needs about {_amount(missing)} more" if missing > 0 else ""
    return f"{out}: disk full: {_amount(free)} free in {folder}{need}"
