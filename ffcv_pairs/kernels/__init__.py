"""Numba kernels: plain arrays and named tuples in, no configuration classes.

``hashing`` (the one counter-based hash), ``permute`` (keyed permutations built on
it), ``bytemoves`` (inline LLVM row moves),
``bytesums`` (64-byte sums), ``floatbits`` (float16/bfloat16 bits), ``geometry``
(one sample's draw), ``planes`` (moving one plane), ``decode`` (A and B of a
batch from the mapping), ``resize`` (separable bilinear) with ``lanes`` (its
eight-value vector steps), ``photometric`` (the definitions), ``noise`` (the
counter stream), ``pixels`` (photometric and output in one pass), ``fused``
(every CPU op of a uint8 batch), ``betas`` (Beta's quantile, for MixUp and CutMix)
and ``jpeg`` (libjpeg-turbo through FFCV's extension). ``colour``, ``tones`` and
``sharpness`` hold the per-sample photometric ops (one small function each; the colour
jitter's vector steps in ``hue_lanes``), run over a batch by ``drawn_driver``;
``user_driver`` runs the user's ops. ``launches`` lets threads launch parallel kernels under
any of numba's threading layers. Every kernel is cached on disk, keyed on all of these
sources (see ``_cache``), in a per-user folder that outlives the environment
(``cache_dir``); :class:`SharedCompile` calls a kernel so that processes needing the same new
kernel at once compile it once.

The eighteen hand-written LLVM intrinsics (``lanes``, ``bytemoves``, ``bytesums``,
``floatbits``, ``warp_lanes``, ``warp_quads``, ``hue_lanes``; ``llvmir`` holds their IR
helpers) each have a plain-numba twin of the same contract, and ``FFCV_PAIRS_PLAIN_KERNELS=1``
runs the twins everywhere (see ``twins``).
"""

from . import _cache  # noqa: F401  (first: the cache locators must be in place before any @njit)
from ._cache import SharedCompile

__all__ = ["SharedCompile"]
