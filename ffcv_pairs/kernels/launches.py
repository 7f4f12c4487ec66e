"""Parallel kernels launched from several threads of one process, under any threading layer.

Each loader runs its batches' kernels (``parallel=True``) on its own epoch thread. Two
loaders of one process can be busy at once: Lightning's validation loader starts while
the training loader's thread is still preparing its batches ahead (validation every N
steps, ``val_check_interval``), or a user iterates two loaders in two threads. numba's
``tbb`` and ``omp`` threading layers take concurrent launches. Its ``workqueue`` layer,
the one numba falls back to where neither TBB nor GNU OpenMP can be loaded (a slim
container, a pip-only environment), does not: it aborts the whole process ("Numba
workqueue threading layer is terminating: Concurrent access has been detected"), with no
Python exception to catch.

:func:`kernel_launches` makes such launches take turns where they must. numba chooses the
layer at the first parallel launch of the process, so until one has happened the launches
take turns; afterwards only under ``workqueue``. Under ``tbb`` or ``omp`` the threads run
their kernels side by side as before. A process forked while another thread held the
turns gets them free (the holder does not exist in the child).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import numba as nb

__all__ = ["kernel_launches"]

_TURNS = threading.RLock()
#: Whether threads may launch parallel kernels at once: None until numba chose its layer.
_side_by_side: bool | None = None


def _free_turns_in_child() -> None:
    global _TURNS
    _TURNS = threading.RLock()


os.register_at_fork(after_in_child=_free_turns_in_child)


@contextlib.contextmanager
def kernel_launches() -> Iterator[None]:
    """Around code that may launch parallel kernels (a batch of a loader's pipeline): one
    thread at a time where numba's threading layer is ``workqueue`` (or not chosen yet),
    no waiting otherwise."""
    global _side_by_side
    if _side_by_side:
        yield
        return
    with _TURNS:
        yield
        if _side_by_side is None:
            with contextlib.suppress(ValueError):  # no parallel launch yet: layer not chosen
                _side_by_side = nb.threading_layer() != "workqueue"
