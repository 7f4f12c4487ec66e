"""Every hand-written LLVM intrinsic has a plain-numba twin (STYLE rule 17), the kernels
call them only by the public name that ``FFCV_PAIRS_PLAIN_KERNELS`` binds, and the sums
(kernels/bytesums.py) and float bits (kernels/floatbits.py) of both kinds equal numpy's
definitions and each other, byte for byte, over seeded inputs and every float16 rounding
boundary. The byte moves and the resize steps have their own files (test_kernel_bytemoves,
test_lanes)."""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import numba as nb
import numpy as np
import pytest

import ffcv_pairs
from ffcv_pairs.kernels import bytesums, floatbits, twins

PACKAGE = Path(ffcv_pairs.__file__).parent
KINDS = ["intrinsic", "plain"]
# Module -> the public names of its intrinsics. A new intrinsic fails
# test_every_intrinsic_has_a_twin until it is listed here and has a twin and tests.
TWINS = {
    "lanes": ["blend8", "rows8", "store8"],
    "bytemoves": ["copy_bytes", "reverse_bytes", "fill_bytes", "fill_gap", "prefetch"],
    "bytesums": ["sums64", "channel_sums48"],
    "floatbits": ["float32_bits", "float16_bits"],
    "warp_lanes": ["blend8_gather", "taps8"],
    "hue_lanes": ["hue16", "lane_sums", "parts64"],
    "warp_quads": ["quads16"],
}
PAIRS = [(m, name) for m, names in TWINS.items() for name in names]


def _decorated_intrinsics() -> dict[str, set[str]]:
    """Module stem -> names of the functions decorated ``@intrinsic`` in kernels/*.py."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / "kernels").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                (d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")) == "intrinsic"
                for d in node.decorator_list
            ):
                found.setdefault(path.stem, set()).add(node.name)
    return found


def test_every_intrinsic_has_a_twin() -> None:
    found = _decorated_intrinsics()
    assert found == {m: {f"{n}_intrinsic" for n in names} for m, names in TWINS.items()}
    assert len(PAIRS) == 18


@pytest.mark.parametrize(("module", "name"), PAIRS)
def test_the_public_name_is_the_kind_the_environment_picks(module: str, name: str) -> None:
    mod = importlib.import_module(f"ffcv_pairs.kernels.{module}")
    plain, intrinsic = getattr(mod, f"{name}_plain"), getattr(mod, f"{name}_intrinsic")
    assert isinstance(plain, nb.core.registry.CPUDispatcher), "a twin is plain numba"
    assert getattr(mod, name) is (plain if twins.PLAIN else intrinsic)
    assert {name, f"{name}_plain", f"{name}_intrinsic"} <= set(mod.__all__)


def test_kernels_call_the_twins_only_by_their_public_names() -> None:
    """``*_intrinsic`` and ``*_plain`` are read only where ``pick`` binds them, in a twin
    (a twin may call a twin) and in a factory of intrinsics (``make_blend8``): every
    kernel follows FFCV_PAIRS_PLAIN_KERNELS."""
    kinds = {f"{n}_{k}" for _, n in PAIRS for k in KINDS}
    bad = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        allowed: set[int] = set()
        for node in ast.walk(tree):
            picked = isinstance(node, ast.Call) and getattr(node.func, "id", "") == "pick"
            defined = isinstance(node, ast.FunctionDef) and (
                node.name.endswith("_plain") or node.name.startswith("make_")
            )
            if picked or defined:
                allowed.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if isinstance(node, ast.alias):  # imported, under any name
                used = node.name
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used = node.id
            else:
                used = getattr(node, "attr", None)
            if used in kinds and id(node) not in allowed:
                bad.append(f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')} {used}")
    assert not bad, bad


@pytest.mark.parametrize(
    ("value", "plain"), [(None, False), ("", False), ("0", False), ("1", True), (" 1 ", True)]
)
def test_the_setting_is_read_strictly(value: str | None, plain: bool) -> None:
    assert twins.plain_setting(value) is plain


@pytest.mark.parametrize("value", ["yes", "true", "2", "plain"])
def test_a_misspelt_setting_is_refused_with_its_value(value: str) -> None:
    with pytest.raises(ValueError, match=rf"FFCV_PAIRS_PLAIN_KERNELS: '{value}'\. Must be one"):
        twins.plain_setting(value)


# -- the sums ---------------------------------------------------------------------------------


@functools.cache
def _summer(name: str, kind: str):
    kernel = getattr(bytesums, f"{name}_{kind}")
    if name == "sums64":

        @nb.njit
        def sums(arr, starts, floors, out):  # pragma: no cover - JIT
            for c in range(starts.shape[0]):
                out[c, 0], out[c, 1], out[c, 2] = kernel(arr, starts[c], floors[c])

        return sums

    @nb.njit
    def channels(arr, starts, floors, out):  # pragma: no cover - JIT
        for c in range(starts.shape[0]):
            out[c, 0], out[c, 1], out[c, 2] = kernel(arr, starts[c])

    return channels


def _sums(name: str, kind: str, seed: int):
    """(what ``name`` of ``kind`` returns, numpy's definition) at every offset of a random
    buffer, the last run ending at its end, for floors including 0, 1, 254 and 255."""
    rng = np.random.default_rng(seed)
    width = bytesums.WIDTH if name == "sums64" else 48
    arr = rng.integers(0, 256, 300, dtype=np.uint8)
    arr[:70] = rng.choice(np.array([0, 1, 254, 255], np.uint8), 70)  # the extremes
    starts = np.arange(arr.size - width + 1, dtype=np.int64)
    floors = rng.integers(0, 256, starts.size).astype(np.uint8)
    floors[:8] = [0, 1, 254, 255, 0, 1, 254, 255]
    got = np.full((starts.size, 3), -1, np.int64)
    _summer(name, kind)(arr, starts, floors, got)
    want = np.empty_like(got)
    for c, (s, f) in enumerate(zip(starts, floors.astype(np.int64))):
        x = arr[s : s + width].astype(np.int64)
        if name == "sums64":
            want[c] = x.sum(), np.maximum(x - f, 0).sum(), (x > f).sum()
        else:
            want[c] = x[0::3].sum(), x[1::3].sum(), x[2::3].sum()
    return got, want


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["sums64", "channel_sums48"])
def test_sums_follow_their_numpy_definition(name: str, kind: str) -> None:
    got, want = _sums(name, kind, seed=3)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["sums64", "channel_sums48"])
def test_sum_intrinsics_equal_their_twins(name: str) -> None:
    for seed in (4, 5):
        assert (
            _sums(name, "intrinsic", seed)[0].tobytes() == _sums(name, "plain", seed)[0].tobytes()
        )


# -- the float bits -----------------------------------------------------------------------------


@functools.cache
def _converter(kind: str):
    f32, f16 = (getattr(floatbits, f"float{w}_bits_{kind}") for w in (32, 16))

    @nb.njit
    def convert(x, bits32, bits16):  # pragma: no cover - JIT
        for j in range(x.shape[0]):
            bits32[j], bits16[j] = f32(x[j]), f16(x[j])

    return convert


def _float_inputs(seed: int) -> np.ndarray:
    """float32 values: every float16 value, every midpoint between two neighbours (the
    ties) and the float32 values either side of it, random bit patterns (NaN payloads and
    subnormals included) and the specials."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    finite = np.unique(np.abs(halves[np.isfinite(halves)]))
    ties = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    ties = np.concatenate([ties, [np.float32(65520.0)]])  # the tie between 65504 and inf
    near = ties.view(np.uint32)
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    special = np.array(
        [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00001, 1, 0x33000000]
    )
    bits = np.concatenate([halves.view(np.uint32), near - 1, near, near + 1, random_bits, special])
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)]).astype(np.uint32)
    return bits.view(np.float32)


def _converted(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = _float_inputs(seed)
    bits32, bits16 = np.zeros(x.size, np.uint32), np.zeros(x.size, np.uint16)
    _converter(kind)(x, bits32, bits16)
    return x, bits32, bits16


@pytest.mark.parametrize("kind", KINDS)
def test_float_bits_follow_their_numpy_definition(kind: str) -> None:
    x, bits32, bits16 = _converted(kind, seed=6)
    np.testing.assert_array_equal(bits32, x.view(np.uint32))
    number = ~np.isnan(x)
    with np.errstate(over="ignore"):
        want = x[number].astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(bits16[number], want)
    # A NaN: its sign and top ten payload bits, made quiet (numpy keeps a signalling one).
    nan = x.view(np.uint32)[~number]
    quiet = ((nan >> 16) & 0x8000) | 0x7E00 | ((nan >> 13) & 0x3FF)
    np.testing.assert_array_equal(bits16[~number], quiet.astype(np.uint16))


def test_float_bit_intrinsics_equal_their_twins() -> None:
    _, bits32, bits16 = _converted("intrinsic", seed=7)
    _, plain32, plain16 = _converted("plain", seed=7)
    assert bits32.tobytes() == plain32.tobytes() and bits16.tobytes() == plain16.tobytes()
