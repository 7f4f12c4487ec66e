"""The one counter-based hash behind every random number: orders and augmentation.

splitmix64's finaliser (:func:`mix64`) mixes a key; :func:`sample_key` builds the
key of one ``(seed, epoch, sample_id, op, field_tag)``; ``uniform(key, k)`` is
its k-th uniform double. Nothing depends on thread scheduling, rank or order.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = [
    "GOLDEN",
    "OP_BATCH",
    "OP_BRIGHTNESS",
    "OP_CONTRAST",
    "OP_GEOMETRY",
    "OP_NOISE",
    "OP_SWAP",
    "OP_USER",
    "PHOTO_OP_IDS",
    "WARP_OP_IDS",
    "batch_uniforms",
    "below",
    "key3",
    "mix64",
    "normal",
    "randint",
    "sample_key",
    "uniform",
    "uniform_rows",
]

GOLDEN = np.uint64(0x9E3779B97F4A7C15)

# Op ids: part of the random key, so ops never share random numbers.
OP_GEOMETRY, OP_BRIGHTNESS, OP_CONTRAST, OP_NOISE = 1, 2, 3, 4
#: ``PairAugment(swap=p)``: whether a sample's A and B change places.
OP_SWAP = 5
#: The first batch op's id: the op at position ``j`` of a loader's ``batch_ops`` draws with
#: ``OP_BATCH + j`` (256 up to 319: above the per-sample ops' small ids, below ``OP_USER``'s).
OP_BATCH = 256
#: The ops of the user's own: the k-th of a ``PairAugment``'s ``user_ops`` is ``OP_USER + k``,
#: above every built-in id.
OP_USER = 1 << 16
#: The per-sample photometric ops that run through the drawn-op driver (``augment/photo_ops``),
#: by option name: 32 to 43, and 64 on (blur, JPEG, erasing), apart from the small ids above
#: and any beside them, below every id of ops drawn per batch or of the user's own.
PHOTO_OP_IDS = {
    "color_jitter": 32,
    "saturation": 33,
    "hue": 34,
    "gamma": 35,
    "grayscale": 36,
    "autocontrast": 37,
    "equalize": 38,
    "sharpness": 39,
    "posterize": 40,
    "solarize": 41,
    "invert": 42,
    "channel_shuffle": 43,
    "blur": 64,
    "jpeg": 65,
    "erasing": 66,
}
#: The draws of the matrix geometry (``augment/warp_draws``): 48 to 63, one id per draw, by
#: what it draws. ``b_offset`` is drawn once per sample (key tag 0) and moves B's window only.
WARP_OP_IDS = {
    "scale_jitter": 48,
    "rotate": 49,
    "affine": 50,
    "perspective": 51,
    "window": 52,
    "flips": 53,
    "transpose": 54,
    "d4": 55,
    "b_offset": 56,
    "elastic": 57,
}


@nb.njit(cache=True, nogil=True)
def mix64(x):  # pragma: no cover - JIT
    """splitmix64's finaliser: a bijective, well-mixed hash of a uint64."""
    x = np.uint64(x)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@nb.njit(cache=True, nogil=True)
def key3(a, b, c):  # pragma: no cover - JIT
    """A key from three integers."""
    return mix64(mix64(mix64(np.uint64(a) ^ GOLDEN) ^ np.uint64(b)) ^ np.uint64(c))


@nb.njit(cache=True, nogil=True)
def below(key, counter, n):  # pragma: no cover - JIT
    """A uniform-enough integer in [0, n) from ``(key, counter)``."""
    return np.int64(mix64(key + np.uint64(counter) * GOLDEN) % np.uint64(n))


@nb.njit(cache=True, nogil=True)
def sample_key(seed, epoch, sample_id, op, tag):  # pragma: no cover - JIT
    """The random key of one (sample, op, field) in one epoch."""
    k = mix64(np.uint64(seed) ^ GOLDEN)
    k = mix64(k ^ np.uint64(epoch))
    k = mix64(k ^ np.uint64(sample_id))
    return mix64(k ^ (np.uint64(op) << np.uint64(8)) ^ np.uint64(tag))


@nb.njit(cache=True, nogil=True)
def uniform(key, k):  # pragma: no cover - JIT
    """The k-th uniform double in [0, 1) of ``key``."""
    return np.float64(mix64(key + np.uint64(k + 1) * GOLDEN) >> np.uint64(11)) * (
        1.0 / 9007199254740992.0
    )


@nb.njit(cache=True, nogil=True)
def randint(key, k, lo, hi):  # pragma: no cover - JIT
    """Uniform integer in [lo, hi]."""
    return lo + np.int64(math.floor(uniform(key, k) * (hi - lo + 1)))


@nb.njit(cache=True, nogil=True, inline="always")
def normal(key, k):  # pragma: no cover - JIT
    """A standard normal from two hashed uniforms (Box-Muller)."""
    u1 = uniform(key, 2 * k)
    u2 = uniform(key, 2 * k + 1)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


@nb.njit(cache=True, nogil=True)
def uniform_rows(ids, clock, op, key_tag, count):  # pragma: no cover - JIT
    """``out[i, k] = uniform(sample_key(clock[0], clock[1], ids[i], op, key_tag), k)``: the
    ``count`` uniforms of each sample of a batch, as ``(len(ids), count)`` float64."""
    out = np.empty((len(ids), count), np.float64)
    for i in range(len(ids)):
        key = sample_key(clock[0], clock[1], ids[i], op, key_tag)
        for k in range(count):
            out[i, k] = uniform(key, k)
    return out


def batch_uniforms(seed: int, epoch: int, ids: np.ndarray, op: int, draws: int) -> np.ndarray:
    """The first ``draws`` uniforms of each sample of ``ids`` for ``op`` (field tag 0): a
    float64 array ``(len(ids), draws)``, row ``i`` from ``sample_key(seed, epoch, ids[i],
    op, 0)``. What batch ops draw from: the same keys as the per-sample ops
    (:func:`uniform_rows`)."""
    clock = np.asarray([seed, epoch], dtype=np.int64)
    return uniform_rows(np.asarray(ids, dtype=np.int64), clock, op, 0, draws)
