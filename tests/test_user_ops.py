"""Ops of the user's own, without a loader: the declaration (PairOp), where they run
(placement, the evaluation twin), and the test helper check_pair_op against ops broken on
purpose."""

from __future__ import annotations

import numpy as np
import pair_ops as po
import pytest

from ffcv_pairs import PairAugment, PairOp
from ffcv_pairs.augment.evaluation import eval_pipeline, random_ops
from ffcv_pairs.augment.placement import place_ops
from ffcv_pairs.augment.user_apply import apply_user_ops
from ffcv_pairs.augment.user_ops import user_draws
from ffcv_pairs.format.schema import ArraySpec, PairSchema
from ffcv_pairs.testing import check_pair_op


# -- the declaration ---------------------------------------------------------------------
def test_pair_op_defaults_and_import_path() -> None:
    op = PairOp("pair_ops.darken", draws=1)
    assert op.fn is po.darken and op.name == "darken"
    assert (op.kind, op.paired) == ("photometric", True)
    assert PairOp.from_value({"fn": "pair_ops.darken", "draws": 1}) == op
    aug = PairAugment.from_dict({"hflip": 0.5, "user_ops": [{"fn": "pair_ops.darken"}]})
    assert aug.user_ops == (PairOp(po.darken),)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"fn": "pair_ops.nowhere"}, ValueError, r"fn='pair_ops.nowhere': module 'pair_ops' has"),
        ({"fn": "no_such_module_x.f"}, ValueError, r"cannot import 'no_such_module_x'"),
        ({"fn": "darken"}, ValueError, r"fn='darken' is not an import path"),
        ({"fn": "pair_ops.not_jitted"}, TypeError, r"must be a numba function .* got function"),
        ({"fn": po.not_jitted}, TypeError, r"must be a numba function"),
        ({"fn": po.darken, "kind": "warp"}, ValueError, r"user op kind"),
        ({"fn": po.darken, "draws": -1}, ValueError, r"user op draws must be between 0"),
        ({"fn": po.darken, "draws": 1.5}, TypeError, r"user op draws must be an integer"),
        ({"fn": po.darken, "kind": "geometric", "paired": False}, ValueError, "always paired"),
        ({"fn": po.darken, "name": ""}, TypeError, "non-empty string"),
        ({"fn": po.darken, "strength": 2}, ValueError, r"unknown user op option\(s\) \['strength"),
        ({"draws": 2}, ValueError, "has no fn"),
    ],
)
def test_pair_op_refuses_bad_options(options: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PairOp.from_value(options)


def test_user_ops_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="augment user_ops must be a list of PairOp"):
        PairAugment(user_ops=PairOp(po.darken))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="entries must be PairOp or a mapping"):
        PairAugment(user_ops=["pair_ops.darken"])  # type: ignore[list-item]


# -- where they run ----------------------------------------------------------------------
def _schema(dtype: str = "uint8") -> PairSchema:
    spec = ArraySpec((3, 8, 8), dtype)
    return PairSchema(a=spec, b=spec)


def test_user_ops_keep_the_fused_kernel_at_the_stored_dtype() -> None:
    norm = {"normalize_mean": (1.0, 2.0, 3.0), "normalize_std": (2.0, 2.0, 2.0)}
    plain = place_ops(PairAugment(brightness=0.2, **norm), _schema(), on_cpu=True)
    assert plain.cpu_output and plain.output_dtype == "float32"
    user = PairAugment(brightness=0.2, user_ops=[PairOp(po.darken, draws=1)], **norm)
    placed = place_ops(user, _schema(), on_cpu=True)
    assert placed.fused and not placed.cpu_output and placed.output_dtype == "uint8"
    after = place_ops(PairAugment(brightness=0.2, **norm), _schema(), True, ops_after=True)
    assert after == placed


def test_evaluation_keeps_fixed_user_ops_only() -> None:
    fixed, drawn = PairOp(po.halve), PairOp(po.darken, draws=1)
    twin = eval_pipeline(PairAugment(hflip=0.5, user_ops=[fixed, drawn]))
    assert twin == PairAugment(user_ops=[fixed])
    assert random_ops(PairAugment(user_ops=[fixed, drawn])) == ["user op 'darken' draws=1"]


def test_float16_images_reach_the_op_as_float32_and_come_back() -> None:
    """numba cannot type float16: the driver works on a float32 copy, written back."""
    images = np.linspace(0, 1, 2 * 3 * 4 * 4).astype(np.float16).reshape(2, 3, 4, 4)
    op = PairOp(po.halve)
    ids, clock = np.array([3, 4]), np.array([0, 0], dtype=np.int64)
    apply_user_ops(images, ids, clock, (op,), [user_draws(0, op, 0)], (3, 4, 4, 1))
    expected = (np.linspace(0, 1, 96).astype(np.float16).astype(np.float32) / 2).astype(np.float16)
    np.testing.assert_array_equal(images.reshape(-1), expected)


# -- the helper --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "dtype"), [((3, 16, 16), "uint8"), ((16, 16, 3), "float32"), ((16, 16), "float16")]
)
def test_a_good_op_passes(shape: tuple[int, ...], dtype: str) -> None:
    check_pair_op(PairOp(po.darken, draws=1), shape, dtype)
    check_pair_op({"fn": po.reads_tag, "draws": 1, "paired": False}, shape, dtype)


@pytest.mark.parametrize(
    ("op", "caught"),
    [
        (PairOp(po.uses_numpy_random), "the output changes from one run to the next"),
        (PairOp(po.uses_numpy_random), "the output changes with the thread count"),
        (PairOp(po.past_the_end, draws=1), r"writes outside its image .* 1 byte after"),
        (PairOp(po.past_the_end, draws=1), "changes with the batch it is in"),
        (PairOp(po.reads_tag, draws=1), "A and B differ after a paired op"),
        (PairOp(po.returns_value, draws=1), "must change the image in place and return nothing"),
        (PairOp(po.does_not_compile, draws=1), r"does not compile for \(image: uint8"),
    ],
    ids=["numpy-random", "threads", "outside", "batch", "pairing", "returns", "compile"],
)
def test_the_helper_catches_a_broken_op(op: PairOp, caught: str) -> None:
    with pytest.raises(AssertionError, match=caught) as info:
        check_pair_op(op, (3, 16, 16), "uint8")
    lines = str(info.value).splitlines()
    assert all(line.startswith(f"check_pair_op({op.name!r})") for line in lines)
