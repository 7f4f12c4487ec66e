"""The Beta distribution's quantile, so that one hashed uniform gives one Beta draw.

MixUp and CutMix draw their mixing weight from ``Beta(alpha, alpha)``. A sampler that
rejects (gamma ratios, Johnk) uses an unbounded number of uniforms; the inverse CDF uses
exactly one, so a sample's weight is a function of its counter-based key alone:
``lam = F^-1(u)`` with ``F(x) = I_x(a, b)``, the regularised incomplete beta function.

``I_x(a, b)`` is evaluated by its continued fraction (Lentz's method, as in Numerical
Recipes 6.4), on the side of ``(a + 1) / (a + b + 2)`` where it converges fast; the
quantile is found by Newton's method on ``I_x - u`` inside a bracket that shrinks every
step, bisecting whenever Newton would leave it.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = ["beta_cdf", "beta_quantile"]

_TINY = 1e-300
_EPS = 1e-15


@nb.njit(cache=True, nogil=True)
def _continued_fraction(a, b, x):  # pragma: no cover - JIT
    """The continued fraction of ``I_x(a, b)`` (modified Lentz)."""
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 1000):
        for aa in (
            m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


@nb.njit(cache=True, nogil=True)
def _log_beta(a, b):  # pragma: no cover - JIT
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


@nb.njit(cache=True, nogil=True)
def _cdf(x, a, b):  # pragma: no cover - JIT
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, 1.0 - x) / b


@nb.njit(cache=True, nogil=True)
def _quantile(u, a, b):  # pragma: no cover - JIT
    if u <= 0.0:
        return 0.0
    if u >= 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    log_b = _log_beta(a, b)
    # Start from the small-x law I_x ~ x^a / (a B(a, b)) (exact as x -> 0), kept inside.
    x = math.exp((math.log(u) + math.log(a) + log_b) / a)
    if not 0.0 < x < 1.0:
        x = 0.5
    for _ in range(200):
        f = _cdf(x, a, b) - u
        if f == 0.0:
            return x
        if f < 0.0:
            lo = x
        else:
            hi = x
        density = math.exp((a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - log_b)
        step = f / density
        nxt = x - step
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - x) <= 4e-16 * nxt or hi - lo <= 4e-16 * hi:
            return nxt
        x = nxt
    return x


@nb.njit(cache=True, nogil=True)
def beta_cdf(x, a, b):  # pragma: no cover - JIT
    """``I_x(a, b)`` for each of the float64 array ``x``: the CDF of ``Beta(a, b)``."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = _cdf(x[i], a, b)
    return out


@nb.njit(cache=True, nogil=True)
def beta_quantile(u, a, b):  # pragma: no cover - JIT
    """``F^-1(u)`` of ``Beta(a, b)`` for each of the float64 array ``u`` in ``[0, 1]``
    (``a``, ``b`` > 0): a ``Beta(a, b)`` draw per uniform. Symmetric ``a == b`` is solved
    on the lower half, ``F^-1(u) = 1 - F^-1(1 - u)`` above it, so the draws are exactly
    symmetric."""
    out = np.empty_like(u)
    for i in range(u.shape[0]):
        if a == b and u[i] > 0.5:
            out[i] = 1.0 - _quantile(1.0 - u[i], a, b)
        else:
            out[i] = _quantile(u[i], a, b)
    return out
