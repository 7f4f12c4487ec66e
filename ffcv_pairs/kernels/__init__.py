"""Numba kernels: plain arrays and named tuples in, no configuration classes.

``hashing`` (the one counter-based hash), ``permute`` (keyed permutations built on
it), ``bytemoves`` (inline LLVM row moves),
``geometry`` (one sample's draw), ``planes`` (moving one plane), ``decode``
(A and B of a batch from the mapping), ``resize`` and ``photometric``. Every
kernel is cached on disk, keyed on all of these sources (see ``_cache``).
"""

from . import _cache  # noqa: F401  (first: the cache locators must be in place before any @njit)

__all__: list[str] = []
