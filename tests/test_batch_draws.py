"""The draws behind the batch ops, from their definitions: the batch's uniforms are the
counter-based hash's (re-derived in plain Python by tests/reference.py), Beta's quantile
is scipy's, and MixUp's weights through a loader follow ``Beta(alpha, alpha)`` and ``p``.

Nothing here reads the op's own draws to build its expectation.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from reference import sample_key, uniform

from ffcv_pairs import ArraySource, MixUp, make_loader, write_pairs
from ffcv_pairs.kernels import hashing
from ffcv_pairs.kernels.betas import beta_cdf, beta_quantile

scipy_special = pytest.importorskip("scipy.special")
scipy_stats = pytest.importorskip("scipy.stats")

ALPHA = 1e-5  # significance of every distribution test


def binomial_z(successes: int, n: int, p: float) -> float:
    return (successes - n * p) / math.sqrt(n * p * (1 - p))


def test_batch_uniforms_are_the_hash_of_each_sample() -> None:
    ids = np.array([0, 7, 123456789012, 2**40 + 3, 5], dtype=np.int64)
    for seed, epoch, op, draws in [(0, 0, hashing.OP_SWAP, 1), (2**62 + 9, 17, 259, 4)]:
        got = hashing.batch_uniforms(seed, epoch, ids, op, draws)
        want = [
            [uniform(sample_key(seed, epoch, int(i), op, 0), k) for k in range(draws)] for i in ids
        ]
        assert got.dtype == np.float64 and got.tolist() == want


def test_batch_op_ids_are_apart_from_the_per_sample_ops() -> None:
    small = {hashing.OP_GEOMETRY, hashing.OP_BRIGHTNESS, hashing.OP_CONTRAST, hashing.OP_NOISE}
    assert hashing.OP_SWAP not in small and max(small | {hashing.OP_SWAP}) < hashing.OP_BATCH


@pytest.mark.parametrize("a, b", [(0.2, 0.2), (1.0, 1.0), (0.4, 0.4), (2.0, 2.0), (0.5, 3.0)])
def test_beta_quantile_is_scipys(a: float, b: float) -> None:
    u = np.random.default_rng(3).random(20000)
    u[:4] = [0.0, 0.5, 2.0**-53, 1 - 2.0**-53]
    got = beta_quantile(u, a, b)
    want = scipy_special.betaincinv(a, b, u)
    # Each draw is scipy's to 1e-12 (relative), or, where the CDF is flat and x is set
    # only as well as I_x is, has I_x = u to rounding.
    close = np.abs(got - want) <= 1e-12 * want
    flat = np.abs(scipy_special.betainc(a, b, got) - u) <= 4e-15
    assert (close | flat).all(), u[~(close | flat)][:5]
    assert close.mean() > 0.99
    assert np.abs(beta_cdf(want, a, b) - scipy_special.betainc(a, b, want)).max() < 1e-13
    assert ((got >= 0) & (got <= 1)).all()


@pytest.mark.parametrize("alpha", [0.2, 1.0, 3.0])
def test_beta_draws_follow_beta(alpha: float) -> None:
    """Kolmogorov-Smirnov against Beta's CDF, and the moments from the definition: mean
    1/2, variance 1 / (4 (2 alpha + 1))."""
    u = np.random.default_rng(11).random(20000)
    lam = beta_quantile(u, alpha, alpha)
    assert scipy_stats.kstest(lam, scipy_stats.beta(alpha, alpha).cdf).pvalue > ALPHA
    se_mean = math.sqrt(1 / (4 * (2 * alpha + 1)) / len(lam))
    assert abs(lam.mean() - 0.5) < 5 * se_mean
    assert abs(lam.var() / (1 / (4 * (2 * alpha + 1))) - 1) < 0.05


def test_mixup_weights_through_the_loader(tmp_path: Path) -> None:
    """Every sample's soft target is ``lam`` at its own class and ``1 - lam`` at its
    partner's; over 6 epochs the mixed ones' ``lam`` follow Beta(0.4, 0.4), and a share
    ``p`` is mixed."""
    n, p, alpha = 256, 0.7, 0.4
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (n, 1, 4, 4), dtype=np.uint8)
    path = tmp_path / "d.beton"
    write_pairs(ArraySource(a, a, np.arange(n)), path, page_size=1 << 16, progress=False)
    loader = make_loader(
        path, batch_size=64, batch_ops=[MixUp(n, alpha=alpha, p=p)], seed=5, num_threads=1
    )
    lams, chosen = [], []
    for epoch in range(6):
        loader.set_epoch(epoch)
        for batch in loader:
            ids = loader.last_batch_ids
            rows = np.arange(len(ids))
            target = batch.label.numpy()
            lam = target[rows, ids]
            assert np.allclose(target[rows, np.roll(ids, 1)], 1 - lam, atol=1e-6)
            lams.append(lam)
            op = hashing.OP_BATCH  # the first batch op; u0 < p decides
            chosen += [uniform(sample_key(5, epoch, int(i), op, 0), 0) < p for i in ids]
    lam, mixed = np.concatenate(lams).astype(np.float64), np.array(chosen)
    assert (lam[~mixed] == 1).all()
    assert abs(binomial_z(int(mixed.sum()), len(lam), p)) < 4.5
    assert scipy_stats.kstest(lam[mixed], scipy_stats.beta(alpha, alpha).cdf).pvalue > ALPHA
