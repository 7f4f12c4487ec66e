"""The picture of every op (``bench/gallery.py``): its rows name real options, and every op of
:class:`~ffcv_pairs.PairAugment` has a row, so the picture in ``docs/augmentation.md`` cannot
fall behind the ops silently."""

from __future__ import annotations

import dataclasses

import numpy as np

from bench.gallery import ROWS, SIDE, photo_pair
from ffcv_pairs import PairAugment
from ffcv_pairs.augment.photo_options import PHOTO_OPS

#: The options that turn an op on (not its parameters, pairing switches or outputs).
OPS = (
    "hflip", "vflip", "rot90", "transpose", "d4", "crop", "resized_crop", "translate", "rotate",
    "affine_degrees", "scale_jitter", "perspective", "elastic", "b_offset", "swap",
    "brightness", "contrast", "noise_std", *PHOTO_OPS, "erasing", "policy",
)  # fmt: skip


def test_every_row_names_options_pairaugment_has() -> None:
    names = {f.name for f in dataclasses.fields(PairAugment)}
    for title, options in ROWS:
        assert set(options) <= names, (title, sorted(set(options) - names))
        PairAugment(**options)  # and a valid setting


def test_every_op_has_a_row() -> None:
    shown = {name for _, options in ROWS for name in options}
    assert set(OPS) <= shown, sorted(set(OPS) - shown)
    policies = {options.get("policy") for _, options in ROWS}
    assert {"trivial_augment_wide", "rand_augment"} <= policies


def test_the_pair_is_two_views_of_one_scene() -> None:
    a, b = photo_pair()
    assert a.shape == b.shape == (3, SIDE, SIDE) and a.dtype == np.uint8
    assert 0 < np.abs(a.astype(int) - b).mean() < 40  # alike, not equal: a stereo pair
