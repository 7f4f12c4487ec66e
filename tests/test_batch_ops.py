"""Batch ops through the loader: paired MixUp, CutMix and swap against their definitions,
the user-op protocol, reproducibility (threads, resume, world size), and Lightning.

Expected values come from the definitions in docs/batch-ops.md: each sample's uniforms
re-derived from the hash in plain Python (tests/reference.py), Beta's quantile from scipy,
the box from its formula, the partner as the batch rolled by one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from reference import sample_key, uniform

from ffcv_pairs import ArraySource, CutMix, MixUp, PairAugment, make_loader, write_pairs
from ffcv_pairs.augment.batch_ops import BatchOp, replaced
from ffcv_pairs.kernels.hashing import OP_BATCH, OP_SWAP

betaincinv = pytest.importorskip("scipy.special").betaincinv

N, H, W = 192, 12, 10
SEED = 7


def draws(epoch: int, ids: np.ndarray, op: int, k: int, seed: int = SEED) -> np.ndarray:
    """Row ``i``: the first ``k`` uniforms of sample ``ids[i]`` for ``op``, by definition."""
    return np.array(
        [[uniform(sample_key(seed, epoch, int(i), op, 0), j) for j in range(k)] for i in ids]
    )


def weights(u: np.ndarray, alpha: float, p: float) -> np.ndarray:
    return np.where(u[:, 0] < p, betaincinv(alpha, alpha, u[:, 1]), 1.0)


def write(path: Path, a: np.ndarray, b: np.ndarray, labels: np.ndarray, **extra: Any) -> Path:
    write_pairs(ArraySource(a, b, labels, **extra), path, page_size=1 << 16, progress=False)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``ids``: random A, B = 255 - A, label = sample id; ``same``: A == B; ``dense``: a
    per-pixel uint8 label; ``floats``: a float label."""
    root = tmp_path_factory.mktemp("batch_ops")
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (N, 3, H, W), dtype=np.uint8)
    mask = rng.integers(0, 5, (N, H, W), dtype=np.uint8)
    floats = rng.standard_normal(N)
    return {
        "a": a,
        "mask": mask,
        "floats": floats,
        "ids": write(root / "ids.beton", a, 255 - a, np.arange(N)),
        "same": write(root / "same.beton", a, a, np.arange(N) % 10),
        "dense": write(root / "dense.beton", a, 255 - a, mask),
        "floats_path": write(root / "floats.beton", a, 255 - a, floats),
    }


def epoch_of(path: Path, epoch: int = 1, **options: Any) -> list[tuple[np.ndarray, list]]:
    """``(sample ids, fields)`` of every batch of one epoch, cloned."""
    options = {"batch_size": 32, "seed": SEED, "num_threads": 1, **options}
    loader = make_loader(path, **options)
    loader.set_epoch(epoch)
    return [(loader.last_batch_ids.copy(), [x.clone() for x in b]) for b in loader]


# -- MixUp, CutMix and their labels, from the definitions ---------------------------------------
def test_mixup_blends_a_and_b_by_one_weight_per_pair(data: dict) -> None:
    alpha, p = 0.4, 0.8
    a = data["a"].astype(np.float64)
    for ids, (ga, gb, target) in epoch_of(data["ids"], batch_ops=[MixUp(N, alpha=alpha, p=p)]):
        lam = weights(draws(1, ids, OP_BATCH, 2), alpha, p)[:, None, None, None]
        part = np.roll(ids, 1)
        want_a = lam * a[ids] + (1 - lam) * a[part]
        want_b = lam * (255 - a[ids]) + (1 - lam) * (255 - a[part])
        for got, want in ((ga, want_a), (gb, want_b)):
            assert got.dtype == torch.uint8
            assert np.abs(got.numpy() - np.round(want)).max() <= 1  # float32 vs float64 ties
        rows = np.arange(len(ids))
        t = target.numpy()
        assert t.shape == (len(ids), N) and t.dtype == np.float32
        assert np.allclose(t.sum(1), 1, atol=1e-6)
        assert np.allclose(t[rows, ids], lam[:, 0, 0, 0], atol=1e-6)
        assert np.allclose(t[rows, part], 1 - lam[:, 0, 0, 0], atol=1e-6)


def test_mixup_on_normalised_floats_and_float_labels(data: dict) -> None:
    aug = PairAugment(normalize_mean=(10.0,), normalize_std=(7.3,))
    got = epoch_of(data["floats_path"], augment=aug, batch_ops=[MixUp(None, p=0.6)])
    plain = epoch_of(data["floats_path"], augment=aug)
    for (ids, (ga, _, label)), (_, (pa, _, _)) in zip(got, plain, strict=True):
        lam = weights(draws(1, ids, OP_BATCH, 2), 1.0, 0.6)
        part = np.roll(ids, 1)
        x = (data["a"].astype(np.float64) - 10) / 7.3
        want = lam[:, None, None, None] * x[ids] + (1 - lam[:, None, None, None]) * x[part]
        assert ga.dtype == torch.float32 and np.allclose(ga.numpy(), want, atol=1e-4)
        kept = lam == 1  # a sample left alone keeps its exact values
        assert kept.any() and torch.equal(ga[kept], pa[kept])
        assert label.dtype == torch.float64
        want_label = lam * data["floats"][ids] + (1 - lam) * data["floats"][part]
        assert np.allclose(label.numpy(), want_label, atol=1e-6)


def boxes(u: np.ndarray, alpha: float, p: float) -> np.ndarray:
    """CutMix's box (y1, y2, x1, x2) per row, from the definition."""
    out = []
    for row, lam in zip(u, weights(u, alpha, p)):
        cy, cx = int(row[2] * H), int(row[3] * W)
        hy, hx = int(0.5 * np.sqrt(1 - lam) * H), int(0.5 * np.sqrt(1 - lam) * W)
        out.append((max(cy - hy, 0), min(cy + hy, H), max(cx - hx, 0), min(cx + hx, W)))
    return np.array(out)


def pasted(x: np.ndarray, ids: np.ndarray, box: np.ndarray) -> np.ndarray:
    """``x[ids]`` with each row's box from its partner (the row before)."""
    out = x[ids].copy()
    part = x[np.roll(ids, 1)]
    for i, (y1, y2, x1, x2) in enumerate(box):
        out[i, ..., y1:y2, x1:x2] = part[i, ..., y1:y2, x1:x2]
    return out


def test_cutmix_pastes_one_box_per_pair_and_mixes_by_its_area(data: dict) -> None:
    alpha, p = 1.0, 0.75
    a, areas = data["a"], []
    for ids, (ga, gb, target) in epoch_of(data["ids"], batch_ops=[CutMix(N, alpha=alpha, p=p)]):
        box = boxes(draws(1, ids, OP_BATCH, 4), alpha, p)
        assert np.array_equal(ga.numpy(), pasted(a, ids, box))
        assert np.array_equal(gb.numpy(), pasted(255 - a, ids, box))
        area = (box[:, 1] - box[:, 0]) * (box[:, 3] - box[:, 2]) / (H * W)
        rows, t = np.arange(len(ids)), target.numpy()
        assert np.allclose(t[rows, ids], 1 - area, atol=1e-6)
        assert np.allclose(t[rows, np.roll(ids, 1)], area, atol=1e-6)
        assert np.allclose(t.sum(1), 1, atol=1e-6)
        areas.append(area)
    assert 0.1 < np.concatenate(areas).mean() < 0.5  # boxes of every size were drawn


def test_a_dense_label_takes_the_box_and_mixup_refuses_it(data: dict) -> None:
    for ids, (ga, _, label) in epoch_of(data["dense"], batch_ops=[CutMix(None, p=1.0)]):
        box = boxes(draws(1, ids, OP_BATCH, 4), 1.0, 1.0)
        assert label.dtype == torch.uint8
        assert np.array_equal(label.numpy(), pasted(data["mask"], ids, box))
        assert np.array_equal(ga.numpy(), pasted(data["a"], ids, box))
    with pytest.raises(ValueError, match=r"MixUp cannot blend the dense label field 'label'"):
        epoch_of(data["dense"], batch_ops=[MixUp(None)])


def test_bad_labels_and_options_are_refused_by_name(data: dict) -> None:
    with pytest.raises(ValueError, match=r"label holds class ids .*give num_classes"):
        epoch_of(data["ids"], batch_ops=[MixUp(None)])
    with pytest.raises(ValueError, match=r"label holds class 1\d\d, outside 0..99"):
        epoch_of(data["ids"], batch_ops=[CutMix(100)])
    for make, match in [
        (lambda: MixUp(0), "MixUp num_classes must be at least 1, got 0"),
        (lambda: CutMix(2, alpha=0.0), "CutMix alpha must be > 0.0"),
        (lambda: MixUp(2, p=1.5), "MixUp p must be between 0.0 and 1.0, got 1.5"),
        (lambda: CutMix(2, channels="middle"), "CutMix channels must be one of"),
    ]:
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(TypeError, match=r"batch_ops\[1\] must be a BatchOp .*got <function"):
        make_loader(data["ids"], batch_size=8, batch_ops=[MixUp(N), lambda b, u: b])


# -- swap ----------------------------------------------------------------------------------------
def marked(label: torch.Tensor, swapped: torch.Tensor) -> torch.Tensor:
    """A swap label callback: +1000 where swapped."""
    return label + 1000 * swapped


class Probe(BatchOp):
    """Records A as the op after it sees it, and its parameters."""

    draws = 3

    def __init__(self) -> None:
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def apply(self, batch: Any, params: Any) -> Any:
        self.seen.append((batch[0].clone(), params))
        return batch


@pytest.mark.parametrize("how", [marked, "test_batch_ops.marked"], ids=["function", "path"])
def test_swap_exchanges_a_and_b_and_tells_the_label(data: dict, how: Any) -> None:
    probe = Probe()
    aug = PairAugment(swap=0.3, swap_label=how)
    a, swaps = data["a"], []
    for k, (ids, (ga, gb, label)) in enumerate(
        epoch_of(data["ids"], augment=aug, batch_ops=[probe])
    ):
        swapped = draws(1, ids, OP_SWAP, 1)[:, 0] < 0.3
        want_a = np.where(swapped[:, None, None, None], 255 - a[ids], a[ids])
        assert np.array_equal(ga.numpy(), want_a)
        assert np.array_equal(gb.numpy(), 255 - want_a)
        assert np.array_equal(label.numpy(), ids + 1000 * swapped)
        assert np.array_equal(probe.seen[k][0].numpy(), want_a)  # swap runs before batch_ops
        swaps.append(swapped)
    share = np.concatenate(swaps).mean()
    assert 0.2 < share < 0.4


def test_swap_changes_the_batch_not_the_pages(data: dict) -> None:
    """In place, but in the batch's own memory: an epoch read again is swapped again from
    the file's bytes, not swapped back."""
    loader = make_loader(data["ids"], batch_size=32, augment=PairAugment(swap=1.0), seed=SEED)
    for _ in range(2):
        loader.set_epoch(0)
        for batch in loader:
            assert np.array_equal(batch[0].numpy(), 255 - data["a"][loader.last_batch_ids])


def test_swap_needs_a_and_b_alike_and_is_not_an_eval_op(data: dict, tmp_path: Path) -> None:
    from ffcv_pairs.augment.evaluation import eval_pipeline, random_ops

    aug = PairAugment(swap=0.5)
    assert random_ops(aug) == ["swap=0.5"] and eval_pipeline(aug) is None
    with pytest.raises(ValueError, match=r"swap_label='nowhere\.fn' does not import"):
        PairAugment(swap=0.5, swap_label="nowhere.fn")
    with pytest.raises(ValueError, match=r"swap_label=.* applies to swap, which is 0"):
        PairAugment(swap_label=marked)
    a = data["a"]
    odd = write(tmp_path / "odd.beton", a, a[:, :1], np.arange(N))
    with pytest.raises(ValueError, match=r"swap=0.5 needs A and B of one shape and dtype"):
        make_loader(odd, batch_size=8, augment=aug)


# -- the protocol --------------------------------------------------------------------------------
class Vignette(BatchOp):
    """docs/batch-ops.md's example: darken towards the corners by a drawn strength."""

    draws = 1

    def __init__(self, strength: float = 0.5) -> None:
        self.strength = strength

    def apply(self, batch: Any, params: Any) -> Any:
        a, b = batch[0], batch[1]
        h, w = a.shape[-2:]
        y = torch.linspace(-1, 1, h, device=a.device)[:, None]
        x = torch.linspace(-1, 1, w, device=a.device)[None, :]
        k = self.strength * params[:, 0].view(-1, 1, 1, 1)
        gain = (1 - k * (x * x + y * y)).clamp_min(0).to(a.dtype)
        return replaced(batch, {0: a * gain, 1: b * gain})


def test_a_user_op_gets_the_uniforms_of_its_position(data: dict) -> None:
    first, second = Probe(), Probe()
    got = epoch_of(data["ids"], batch_ops=[first, second])
    for k, (ids, _) in enumerate(got):
        for j, probe in enumerate((first, second)):
            params = probe.seen[k][1]
            assert params.dtype == torch.float32 and params.shape == (len(ids), 3)
            want = np.floor(draws(1, ids, OP_BATCH + j, 3) * 2**24) / 2**24
            assert np.array_equal(params.numpy(), want.astype(np.float32))

    class Broken(BatchOp):
        def apply(self, batch: Any, params: Any) -> Any:
            return list(batch)

    with pytest.raises(TypeError, match=r"batch op Broken\(\) returned list"):
        epoch_of(data["ids"], batch_ops=[Broken()])


def test_pairs_stay_paired(data: dict) -> None:
    """A equal to B in, A equal to B out, through geometry, swap, MixUp, CutMix and a
    user's op."""
    aug = PairAugment(
        hflip=0.5, crop=(10, 8), swap=0.5, normalize_mean=(0.0,), normalize_std=(1.0,)
    )
    ops = [MixUp(10, alpha=0.3), CutMix(10), Vignette(0.8)]
    changed = 0
    for ids, (ga, gb, target) in epoch_of(data["same"], augment=aug, batch_ops=ops):
        assert torch.equal(ga, gb)
        assert target.shape == (len(ids), 10)
        changed += int((ga != torch.from_numpy(data["a"][ids, :, 1:11, 1:9]).float()).any())
    assert changed


# -- reproducibility -----------------------------------------------------------------------------
OPS = [MixUp(N, alpha=0.5, p=0.5), CutMix(N, alpha=2.0, p=0.5)]


def _same(x: list, y: list) -> bool:
    return len(x) == len(y) and all(
        np.array_equal(i, j) and all(torch.equal(s, t) for s, t in zip(a, b))
        for (i, a), (j, b) in zip(x, y)
    )


def test_the_same_batches_on_any_thread_count(data: dict) -> None:
    aug = PairAugment(swap=0.5, hflip=0.5)
    one = epoch_of(data["ids"], augment=aug, batch_ops=OPS, num_threads=1)
    two = epoch_of(data["ids"], augment=aug, batch_ops=OPS, num_threads=2)
    assert _same(one, two)
    other_seed = epoch_of(data["ids"], augment=aug, batch_ops=OPS, seed=SEED + 1)
    assert not _same(one, other_seed)


def test_a_resumed_epoch_gives_the_same_batches(data: dict) -> None:
    aug = PairAugment(swap=0.5)
    whole = epoch_of(data["ids"], augment=aug, batch_ops=OPS)
    options = {"batch_size": 32, "seed": SEED, "num_threads": 1, "augment": aug, "batch_ops": OPS}
    first = make_loader(data["ids"], **options)
    first.set_epoch(1)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    first.close()
    again = make_loader(data["ids"], **options)
    again.load_state_dict(state)
    rest = [(again.last_batch_ids.copy(), [x.clone() for x in b]) for b in again]
    assert _same(rest, whole[2:])


def test_a_sample_draws_the_same_on_any_world_size(data: dict) -> None:
    """The same weight and swap per sample with one rank or two (the partners differ). A
    swap adds 1000 to the label, so a sample's soft target sits at its id or id + 1000."""
    aug = PairAugment(swap=0.5, swap_label=marked)

    def per_sample(world: int) -> dict[int, tuple[float, bool]]:
        out = {}
        for rank in range(world):
            ops = [MixUp(N + 1000, alpha=0.5)]
            got = epoch_of(
                data["ids"], augment=aug, batch_ops=ops, rank=rank, world_size=world, batch_size=16
            )
            for ids, (_, _, target) in got:
                t = target.numpy()
                for row, i in enumerate(ids):
                    swapped = bool(t[row, i + 1000] != 0)
                    out[int(i)] = (float(t[row, i + 1000 if swapped else i]), swapped)
        return out

    one, two = per_sample(1), per_sample(2)
    assert len(one) == N and one == two
    assert 0 < sum(s for _, s in one.values()) < N


# -- the ops on batches of every layout, called directly -----------------------------------------
@pytest.mark.parametrize(
    "image, label",
    [((3, H, W), (H, W)), ((H, W, 2), (H, W, 1)), ((H, W), (2, H, W))],
    ids=["chw", "hwc", "hw"],
)
def test_cutmix_boxes_every_layout(image: tuple[int, ...], label: tuple[int, ...]) -> None:
    from ffcv_pairs.load.batches import PairBatch

    n = 6
    rng = np.random.default_rng(2)
    a = torch.from_numpy(rng.random((n, *image)).astype(np.float32))
    mask = torch.from_numpy(rng.integers(0, 9, (n, *label)).astype(np.int64))
    u = rng.random((n, 4))
    u[:, 0] = 0.0  # every row boxed
    out = CutMix(None, channels="auto")(PairBatch(a, a.clone(), mask), u)
    box = boxes(u, 1.0, 1.0)
    hw_last = image[-2:] == (H, W)
    for got, x, last in ((out.A, a, hw_last), (out.label, mask, label[-2:] == (H, W))):
        want = x.numpy().copy()
        part = np.roll(want, 1, axis=0)
        for i, (y1, y2, x1, x2) in enumerate(box):
            if last:
                want[i, ..., y1:y2, x1:x2] = part[i, ..., y1:y2, x1:x2]
            else:
                want[i, y1:y2, x1:x2] = part[i, y1:y2, x1:x2]
        assert np.array_equal(got.numpy(), want)
    assert torch.equal(out.A, out.B)


def test_mixup_reads_no_channel_axis_for_a_scalar_label() -> None:
    """A cube image (8, 8, 8) has no readable channel axis; MixUp needs one only to tell a
    dense label, which a scalar label cannot be."""
    from ffcv_pairs.load.batches import PairBatch

    x = torch.rand(4, 8, 8, 8)
    out = MixUp(3)(PairBatch(x, x.clone(), torch.tensor([0, 1, 2, 0])), np.full((4, 2), 0.3))
    assert out.label.shape == (4, 3) and torch.equal(out.A, out.B)
    with pytest.raises(ValueError, match=r"cannot tell the channel axis of A's shape \(8, 8, 8\)"):
        MixUp(None)(PairBatch(x, x, torch.rand(4, 8, 8)), np.full((4, 2), 0.3))


@pytest.mark.cuda
def test_on_a_gpu_the_ops_give_the_cpu_paths_values(data: dict) -> None:
    """The same draws, boxes and swaps on the device: uint8 batches byte for byte, floats
    (normalised on the device, then blended there) within float32 rounding."""
    exact = {"augment": PairAugment(swap=0.5), "batch_ops": [CutMix(N, p=0.7)]}
    norm = PairAugment(swap=0.5, normalize_mean=(10.0,), normalize_std=(7.3,))
    close = {"augment": norm, "batch_ops": [MixUp(N, alpha=0.4, p=0.7), CutMix(N, p=0.7)]}
    for options, same in ((exact, torch.equal), (close, _close)):
        cpu = epoch_of(data["ids"], device="cpu", **options)
        gpu = epoch_of(data["ids"], device="cuda", **options)
        assert len(cpu) == len(gpu)
        for (i, c), (j, g) in zip(cpu, gpu):
            assert np.array_equal(i, j)
            for x, y in zip(c, g):
                assert y.device.type == "cuda" and x.dtype == y.dtype
                assert same(x, y.cpu())


def _close(x: torch.Tensor, y: torch.Tensor) -> bool:
    return torch.allclose(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "dtype"), [((3, 10, 12), torch.uint8), ((5, 7), torch.float16), ((3, 5), torch.uint8)]
)
def test_swap_on_cpu_kernel_and_torch_paths_agree(
    monkeypatch: pytest.MonkeyPatch, shape: tuple, dtype: torch.dtype
) -> None:
    """The CPU swap through the row kernel (compiled) and through torch's row copies (while
    it compiles, or rows not of whole 8-byte words: 15 bytes) exchange the same rows."""
    from ffcv_pairs.augment import swap

    gen = torch.Generator().manual_seed(7)
    a = (torch.rand((9, *shape), generator=gen) * 200).to(dtype)
    b = (torch.rand((9, *shape), generator=gen) * 200).to(dtype)
    rows = np.array([0, 3, 4, 8])
    want_a, want_b = a.clone(), b.clone()
    want_a[rows], want_b[rows] = b[rows], a[rows]
    for ready in (True, False):
        monkeypatch.setattr(swap, "kernel_ready", lambda *args, r=ready: r)
        got_a, got_b = a.clone(), b.clone()
        swap._swap_cpu(got_a, got_b, rows)
        assert torch.equal(got_a, want_a) and torch.equal(got_b, want_b), ready
