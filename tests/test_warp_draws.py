"""The matrix geometry's random parameters, from their definitions (torchvision's
``RandomRotation``, ``RandomAffine``, ``RandomPerspective`` and ``RandomResizedCrop``
ranges, Albumentations' ``Transpose`` and ``D4``, the scale jitter's uniform scale and
log-uniform aspect, the elastic noise), read back off the drawn matrices of many samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_distributions import binomial_z, chi2_p, uniform_counts

from ffcv_pairs import PairAugment
from ffcv_pairs.augment.warp_draws import warp_matrices
from ffcv_pairs.augment.warp_ops import _LAST_FIELD, displacements
from ffcv_pairs.kernels import hashing
from ffcv_pairs.kernels.hashing import PHOTO_OP_IDS, WARP_OP_IDS

ALPHA = 1e-5
N = 6000
IDS = np.arange(N, dtype=np.int64)
CLOCK = np.array([5, 2], np.int64)
#: An option that makes a pipeline use the matrix geometry and moves nothing (the canvas is
#: larger than its minimum): the other ops' matrices read alone.
QUIET = dict(pad_if_needed=(1, 1))


def mats(size=(40, 40), tag: int = 0, **options) -> np.ndarray:
    return warp_matrices(PairAugment(**options), IDS, CLOCK, tag, *size)


def uniform_p(x: np.ndarray, lo: float, hi: float, bins: int = 20, slack: float = 1e-9) -> float:
    """Pearson's fit of ``x`` to uniform on ``[lo, hi]`` (values within ``slack`` outside it:
    rounding, counted at the ends)."""
    assert x.min() >= lo - slack and x.max() <= hi + slack, (x.min(), x.max(), lo, hi)
    counts = np.histogram(np.clip(x, lo, hi), bins=bins, range=(lo, hi))[0]
    return chi2_p(counts, np.full(bins, 1 / bins))


def identity(m: np.ndarray) -> np.ndarray:
    return np.all(np.abs(m - np.eye(3)) < 1e-12, axis=(1, 2))


def test_ids_are_their_own_in_48_to_63() -> None:
    ids = list(WARP_OP_IDS.values())
    others = {v for k, v in vars(hashing).items() if k.startswith("OP_") and isinstance(v, int)}
    assert len(set(ids)) == len(ids) and all(48 <= i <= 63 for i in ids)
    assert not set(ids) & (others | set(PHOTO_OP_IDS.values()))


def test_rotation_uniform_over_its_degrees_with_its_probability() -> None:
    m = mats(rotate=(-30.0, 50.0), rotate_p=0.7)
    on = ~identity(m)
    assert abs(binomial_z(int(on.sum()), N, 0.7)) < 5
    angle = np.degrees(np.arctan2(m[on, 1, 0], m[on, 0, 0]))  # inverse of counter-clockwise
    assert uniform_p(angle, -30, 50) > ALPHA


def test_a_number_of_degrees_is_plus_minus() -> None:
    assert PairAugment(rotate=15).rotate == (-15.0, 15.0)
    assert PairAugment(affine_degrees=7).affine_degrees == (-7.0, 7.0)
    assert PairAugment(affine_shear=4).affine_shear == (-4.0, 4.0, 0.0, 0.0)
    assert PairAugment(affine_shear=(1, 3)).affine_shear == (1.0, 3.0, 0.0, 0.0)


def test_affine_angle_scale_and_shear_uniform() -> None:
    m = mats(affine_degrees=(-20.0, 20.0))
    assert uniform_p(-np.degrees(np.arctan2(m[:, 1, 0], m[:, 0, 0])), -20, 20) > ALPHA
    m = mats(affine_scale=(0.5, 2.0))
    assert uniform_p(1 / m[:, 0, 0], 0.5, 2.0) > ALPHA
    m = mats(affine_shear=(-10.0, 20.0, -5.0, 5.0))  # inverse of SHy SHx: [[1+ab, a], [b, 1]]
    assert uniform_p(np.degrees(np.arctan(m[:, 0, 1])), -10, 20) > ALPHA
    assert uniform_p(np.degrees(np.arctan(m[:, 1, 0])), -5, 5) > ALPHA


def test_affine_shift_is_a_rounded_uniform_of_the_size_fractions() -> None:
    """torchvision: ``round(uniform(-fx * width, fx * width))``: whole pixels, the end values
    half as likely."""
    m = mats(size=(40, 50), affine_translate=(0.1, 0.2), affine_p=0.5)
    on = ~identity(m)
    assert abs(binomial_z(int(on.sum()), N, 0.5)) < 5
    for col, most in ((0, 5), (1, 8)):
        shift = -m[on, col, 2]
        assert np.array_equal(shift, np.round(shift))
        probs = np.full(2 * most + 1, 1.0 / (2 * most))
        probs[[0, -1]] /= 2
        assert chi2_p(uniform_counts(shift.astype(np.int64), -most, most), probs) > ALPHA


def test_perspective_corners_as_torchvisions_get_params() -> None:
    """The corners, read back through the homography, each a uniform integer in
    torchvision's band ``[0, int(d * half) + 1)`` from its side."""
    d, size = 0.5, 40
    m = mats(size=(size, size), perspective=d, perspective_p=0.6)
    on = ~identity(m)
    assert abs(binomial_z(int(on.sum()), N, 0.6)) < 5
    to_corners = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]])
    h = to_corners @ m[on] @ np.linalg.inv(to_corners)  # end -> start, on pixel corners
    start = np.array([[0, 0, 1], [size - 1, 0, 1], [size - 1, size - 1, 1], [0, size - 1, 1]])
    end = np.einsum("nij,kj->nki", np.linalg.inv(h), start)
    end = end[..., :2] / end[..., 2:]
    assert np.allclose(end, np.round(end), atol=1e-6)
    end = np.round(end).astype(np.int64)
    bound = int(d * (size // 2)) + 1
    for k, (sx, sy) in enumerate(((0, 0), (1, 0), (1, 1), (0, 1))):
        for axis, far in ((0, sx), (1, sy)):
            v = end[:, k, axis] - (size - bound if far else 0)
            assert chi2_p(uniform_counts(v, 0, bound - 1), np.full(bound, 1 / bound)) > ALPHA


def _rounded_probs(groups: list, w1: int, lo: float, hi: float, log: bool) -> np.ndarray:
    """P(round(w1 * f) in group) for f uniform (or log-uniform) in [lo, hi]."""
    t = np.log if log else (lambda v: v)
    out = []
    for a, b in groups:
        left, right = max((a - 0.5) / w1, lo), min((b + 0.5) / w1, hi)
        out.append(max(0.0, t(right) - t(left)) / (t(hi) - t(lo)))
    return np.array(out)


def test_scale_jitter_size_is_the_rounded_uniform_scale() -> None:
    w1, lo, hi = 400, 0.5, 1.5
    m = mats(size=(400, w1), scale_jitter=(lo, hi))
    w2 = np.round(w1 / m[:, 0, 0]).astype(np.int64)
    edges = np.linspace(w1 * lo, w1 * hi, 21).round().astype(np.int64)
    groups = [(edges[i] + (i > 0), edges[i + 1]) for i in range(20)]
    counts = [((w2 >= a) & (w2 <= b)).sum() for a, b in groups]
    assert chi2_p(counts, _rounded_probs(groups, w1, lo, hi, False)) > ALPHA


def test_scale_jitter_aspect_is_log_uniform_and_splits_over_the_axes() -> None:
    w1, lo, hi = 400, 0.5, 2.0
    m = mats(size=(w1, w1), scale_jitter_aspect=(lo, hi))
    w2 = np.round(w1 / m[:, 0, 0]).astype(np.int64)  # round(w1 * sqrt(a))
    h2 = np.round(w1 / m[:, 1, 1]).astype(np.int64)  # round(w1 / sqrt(a))
    assert np.all(np.abs(w2 * h2 / w1**2 - 1) < 0.01)
    edges = np.linspace(w1 * math.sqrt(lo), w1 * math.sqrt(hi), 21).round().astype(np.int64)
    groups = [(edges[i] + (i > 0), edges[i + 1]) for i in range(20)]
    counts = [((w2 >= a) & (w2 <= b)).sum() for a, b in groups]
    probs = _rounded_probs(groups, w1, math.sqrt(lo), math.sqrt(hi), True)
    assert chi2_p(counts, probs) > ALPHA


def test_transpose_and_d4() -> None:
    m = mats(transpose=0.3, **QUIET)
    assert abs(binomial_z(int((m[:, 0, 1] == 1).sum()), N, 0.3)) < 5
    m = mats(d4=True, **QUIET)
    # each element is told by where it sends two points
    seen = np.round(np.einsum("nij,kj->nki", m, np.array([[0, 0, 1], [1, 0, 1]]))[..., :2])
    keys = [tuple(row) for row in seen.reshape(N, -1).astype(int)]
    kinds = sorted(set(keys))
    assert len(kinds) == 8
    counts = [keys.count(k) for k in kinds]
    assert chi2_p(counts, np.full(8, 1 / 8)) > ALPHA


def test_flips_and_turns_in_the_matrix_path() -> None:
    m = mats(hflip=0.4, vflip=0.2, rot90=True, **QUIET)
    turns = np.round(np.degrees(np.arctan2(m[:, 1, 0], m[:, 0, 0]))).astype(int)
    det = np.round(np.linalg.det(m[:, :2, :2])).astype(int)
    # one flip: determinant -1 (P = 0.4 * 0.8 + 0.6 * 0.2)
    assert abs(binomial_z(int((det < 0).sum()), N, 0.4 * 0.8 + 0.6 * 0.2)) < 5
    plain = det > 0
    counts = np.bincount(((turns[plain] // 90) % 4), minlength=4)
    assert chi2_p(counts, np.full(4, 0.25)) > ALPHA


def test_b_offset_moves_b_only_uniformly() -> None:
    a = mats(b_offset=(2.0, 0.5))
    b = mats(tag=1, b_offset=(2.0, 0.5))
    assert identity(a).all()
    assert uniform_p(b[:, 1, 2], -2.0, 2.0) > ALPHA
    assert uniform_p(b[:, 0, 2], -0.5, 0.5) > ALPHA


def test_plain_and_resized_crop_windows() -> None:
    """The crop's place: whole pixels uniform over the padded canvas; the resized crop's
    region: torchvision's area fraction (uniform) and log-uniform aspect, on a canvas large
    enough that the first try fits and rounding is below the bins."""
    m = mats(size=(30, 40), crop=(20, 20), crop_padding=3, **QUIET)
    y0, x0 = m[:, 1, 2].astype(np.int64), m[:, 0, 2].astype(np.int64)
    assert chi2_p(uniform_counts(y0, -3, 13), np.full(17, 1 / 17)) > ALPHA
    assert chi2_p(uniform_counts(x0, -3, 23), np.full(27, 1 / 27)) > ALPHA
    m = mats(size=(1000, 1000), resized_crop=(10, 10), crop_scale=(0.2, 0.4), **QUIET)
    rh, rw = m[:, 1, 1] * 10, m[:, 0, 0] * 10
    assert uniform_p(rh * rw / 1e6, 0.2, 0.4, slack=1e-3) > ALPHA
    assert uniform_p(np.log(rw / rh), math.log(3 / 4), math.log(4 / 3), slack=1e-2) > ALPHA


def test_elastic_noise_uniform_times_torchvisions_gains() -> None:
    """Unsmoothed (sigma 0), each displacement is ``gain * (2u - 1)``, gains ``alpha * ow /
    (2 * oh)`` (x) and ``alpha * oh / (2 * ow)`` (y), as torchvision's normalised grid."""
    aug = PairAugment(elastic=(8.0, 0.0), elastic_p=0.5)
    d = displacements(aug, IDS[:400], CLOCK, 0, (10, 20))
    on = np.abs(d).reshape(400, -1).max(axis=1) > 0
    assert abs(binomial_z(int(on.sum()), 400, 0.5)) < 5
    assert uniform_p(d[on, ..., 0].ravel() / (8.0 * 20 / 20), -1, 1) > ALPHA
    assert uniform_p(d[on, ..., 1].ravel() / (8.0 * 10 / 40), -1, 1) > ALPHA


@pytest.mark.parametrize("paired", [True, False])
def test_a_batch_field_is_made_once_for_a_and_b_when_paired(paired: bool) -> None:
    """A and B of one batch share one elastic field under ``geometry_paired`` (the kept
    array, read only), and the kept field is never served for other inputs: another tag
    unpaired, other ids, another epoch, other options each get their own, each the field
    made afresh."""
    aug = PairAugment(elastic=(20.0, 2.0), geometry_paired=paired)
    ids, size = IDS[:6], (12, 14)
    a = displacements(aug, ids, CLOCK, 0, size)
    b = displacements(aug, ids, CLOCK, 1, size)
    assert (a is b) == paired
    assert np.array_equal(a, b) == paired
    others = [
        (aug, IDS[1:7], CLOCK),
        (aug, ids, CLOCK + np.array([0, 1])),
        (PairAugment(elastic=(21.0, 2.0), geometry_paired=paired), ids, CLOCK),
    ]
    for other, o_ids, o_clock in others:
        kept = displacements(aug, ids, CLOCK, 0, size)  # A's field is the one kept
        np.testing.assert_array_equal(kept, a)
        got = displacements(other, o_ids, o_clock, 0, size)
        assert got is not kept and not np.array_equal(got, a)
        _LAST_FIELD.clear()
        np.testing.assert_array_equal(got, displacements(other, o_ids, o_clock, 0, size))


@pytest.mark.parametrize("paired", [True, False])
def test_paired_geometry_is_one_draw_and_unpaired_two(paired: bool) -> None:
    options = dict(rotate=40, affine_scale=(0.8, 1.2), geometry_paired=paired)
    a, b = mats(**options), mats(tag=1, **options)
    assert np.array_equal(a, b) == paired
