"""Ops of a user's own for the tests: good ones, and ones broken on purpose.

Each is ``fn(image, u, tag)`` on one sample's ``(planes, height, width, pixel)`` view. Not
``cache=True``: numba would write their machine code beside this file.
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = [
    "darken",
    "does_not_compile",
    "halve",
    "not_jitted",
    "past_the_end",
    "reads_tag",
    "returns_value",
    "stamp",
    "stamp_below",
    "uses_numpy_random",
]


@nb.njit
def darken(image, u, tag):
    """Every value times ``0.5 + 0.5 * u[0]`` (truncated back to the dtype)."""
    f = 0.5 + 0.5 * u[0]
    flat = image.reshape(-1)
    for i in range(flat.size):
        flat[i] = flat[i] * f


@nb.njit
def halve(image, u, tag):
    """Deterministic: every value halved (truncated for integers); draws nothing."""
    flat = image.reshape(-1)
    for i in range(flat.size):
        flat[i] = flat[i] / 2


@nb.njit
def stamp(image, u, tag):
    """Writes its uniforms along the first row of plane 0 from the left, ``floor(u * 256)``
    (uint8) or ``u`` (floats), so the draws can be read back from the batch exactly."""
    scale = 256.0 if image.itemsize == 1 else 1.0  # uint8, or a float
    for k in range(u.size):
        image[0, 0, k, 0] = np.floor(u[k] * scale) if scale > 1 else u[k]


@nb.njit
def stamp_below(image, u, tag):
    """:func:`stamp` on the second row (for a second op in the same pipeline)."""
    scale = 256.0 if image.itemsize == 1 else 1.0  # uint8, or a float
    for k in range(u.size):
        image[0, 1, k, 0] = np.floor(u[k] * scale) if scale > 1 else u[k]


# -- broken on purpose -------------------------------------------------------------------


@nb.njit
def uses_numpy_random(image, u, tag):
    """Draws from numpy.random, not from ``u``."""
    f = 0.5 + 0.5 * np.random.random()
    flat = image.reshape(-1)
    for i in range(flat.size):
        flat[i] = flat[i] * f


@nb.njit
def past_the_end(image, u, tag):
    """Writes one element past its image (numba does not check bounds)."""
    image[image.shape[0], 0, 0, 0] = 7
    darken(image, u, tag)


@nb.njit
def reads_tag(image, u, tag):
    """Treats A and B apart although declared paired."""
    f = 0.5 + 0.25 * u[0] + 0.25 * tag
    flat = image.reshape(-1)
    for i in range(flat.size):
        flat[i] = flat[i] * f


@nb.njit
def does_not_compile(image, u, tag):
    image[0, 0, 0, 0] = "text"


@nb.njit
def returns_value(image, u, tag):
    darken(image, u, tag)
    return image


def not_jitted(image, u, tag):
    image[...] = 0
