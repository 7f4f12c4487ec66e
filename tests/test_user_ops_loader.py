"""Ops of the user's own through make_loader: where they run (after the built-in geometry,
before normalisation), what they draw (checked against the hash's pure-Python definition),
pairing, threads and resume; upstream FFCV ops appended per field; a user op from YAML."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pair_ops as po
import pytest
import reference as ref
import torch
from conftest import make_arrays, write_small_beton
from ffcv.pipeline.operation import Operation
from ffcv.pipeline.state import State
from ffcv.transforms import ToTensor

from ffcv_pairs import ArraySource, PairAugment, PairOp, make_loader, write_pairs
from ffcv_pairs.kernels.hashing import OP_USER

SEED, EPOCH, N = 5, 2, 48


def _epoch(loader, epoch: int = EPOCH) -> dict[int, tuple[np.ndarray, ...]]:
    """Sample id -> (A, B, label) of one epoch."""
    loader.set_epoch(epoch)
    out = {}
    for batch in loader:
        for i, sid in enumerate(loader.last_batch_ids):
            out[int(sid)] = tuple(x[i].numpy().copy() for x in batch)
    return out


def _first_row(image: np.ndarray, row: int, count: int, axes: str) -> np.ndarray:
    """The ``count`` first values of row ``row`` of plane 0 of ``image`` (a field's own axes)."""
    if axes == "chw":
        return image[0, row, :count]
    if axes == "hwc":
        return image[row, :count, 0]
    return image[row, :count]


CASES = [
    ("uint8", (3, 8, 8), "chw", False),
    ("uint8", (8, 8, 3), "hwc", False),
    ("uint8", (8, 8), "2d", False),
    ("float32", (3, 8, 8), "chw", False),
    ("float16", (8, 8, 3), "hwc", False),
    ("uint8", (3, 8, 8), "chw", True),
]


@pytest.mark.parametrize(("dtype", "shape", "axes", "normalize"), CASES)
def test_user_ops_draw_the_keyed_uniforms_after_the_geometry(
    tmp_path: Path, dtype: str, shape: tuple[int, ...], axes: str, normalize: bool
) -> None:
    """Op k draws ``uniform(sample_key(seed, epoch, sample, OP_USER + k, tag), j)``, tag 0 for
    A and B when paired and the field's otherwise; it sees the flipped image, and the
    normalisation sees its output."""
    path, a, b = write_small_beton(tmp_path, n=N, shape=shape, dtype=dtype)
    channels = 3 if len(shape) == 3 else 1
    norm = {"normalize_mean": (10.0,) * channels, "normalize_std": (4.0,)} if normalize else {}
    ops = [PairOp(po.stamp, draws=3), PairOp(po.stamp_below, paired=False, draws=3)]
    aug = PairAugment(hflip=1.0, user_ops=ops, **norm)
    loader = make_loader(path, batch_size=16, order="sequential", seed=SEED, augment=aug)
    scale = 256.0 if dtype == "uint8" else 1.0
    got = _epoch(loader)
    assert sorted(got) == list(range(N))
    for sid, (out_a, out_b, _) in got.items():
        for t, (out, stored) in enumerate(((out_a, a[sid]), (out_b, b[sid]))):
            flipped = stored[..., ::-1, :] if axes == "hwc" else stored[..., ::-1]
            expected = flipped.astype(np.float32 if dtype == "float16" else dtype).copy()
            for row, (op, tag) in enumerate(((0, 0), (1, t))):
                key = ref.sample_key(SEED, EPOCH, sid, OP_USER + op, tag)
                u = np.array([ref.uniform(key, j) for j in range(3)])
                _first_row(expected, row, 3, axes)[:] = np.floor(u * scale) if scale > 1 else u
            expected = expected.astype(dtype)
            if normalize:
                expected = (expected.astype(np.float32) - np.float32(10)) / np.float32(4)
            np.testing.assert_array_equal(out, expected, err_msg=f"sample {sid} field {t}")


def test_on_a_device_the_user_ops_run_before_its_normalisation(tmp_path: Path) -> None:
    """With a device stage (a simulated GPU) the user ops run on the host and the device
    normalises their output: the CPU path's uint8 batch, then ``(x - mean) / std``."""
    from ffcv_pairs.load.delivery.simulated import SimulatedEngine
    from ffcv_pairs.load.loader import LoaderConfig, PairLoader

    path, _, _ = write_small_beton(tmp_path, n=32)
    ops = [PairOp(po.darken, draws=1)]
    raw = PairAugment(hflip=0.5, user_ops=ops)
    norm = replace(raw, normalize_mean=(8.0, 8.0, 8.0), normalize_std=(2.0, 2.0, 2.0))
    options = {"batch_size": 8, "order": "sequential", "seed": SEED}
    want = _epoch(make_loader(path, augment=raw, **options), 0)
    engine = SimulatedEngine()
    loader = PairLoader(path, LoaderConfig(augment=norm, device="cpu", **options), engine)
    got: dict[int, tuple[np.ndarray, ...]] = {}

    def keep(batch: tuple, ids: np.ndarray) -> None:
        got.update({int(s): tuple(x[i].numpy().copy() for x in batch) for i, s in enumerate(ids)})

    with engine.stream(engine.default_stream):
        for batch in loader:
            ids = loader.last_batch_ids.copy()
            engine.run(lambda b=batch, ids=ids: keep(b, ids), engine.default_stream)
    engine.synchronize()
    assert sorted(got) == sorted(want)
    for sid, (out_a, out_b, label) in got.items():
        for out, host in zip((out_a, out_b), want[sid]):
            np.testing.assert_array_equal(out, (host.astype(np.float32) - 8) / 2)
        assert label == want[sid][2]


@pytest.fixture(scope="module")
def same_pairs(tmp_path_factory) -> Path:
    """A file whose B is A: a paired op must keep them equal."""
    a, _, labels = make_arrays(N, (3, 8, 8), "uint8", seed=1)
    path = tmp_path_factory.mktemp("same") / "same.beton"
    write_pairs(ArraySource(a, a.copy(), labels), path, page_size=4096, progress=False)
    return path


def test_reproducible_across_threads_and_a_resume_and_paired(same_pairs: Path) -> None:
    ops = [PairOp(po.darken, draws=1), PairOp(po.reads_tag, draws=1, paired=False)]
    aug = PairAugment(vflip=0.5, brightness=0.3, user_ops=ops)
    one = make_loader(same_pairs, batch_size=8, num_threads=1, seed=SEED, augment=aug)
    whole = _epoch(one)
    two = make_loader(same_pairs, batch_size=6, num_threads=2, seed=SEED, augment=aug)
    two.set_epoch(EPOCH)
    resumed: dict[int, tuple[np.ndarray, ...]] = {}
    it = iter(two)
    for _ in range(3):
        batch = next(it)
        for i, sid in enumerate(two.last_batch_ids):
            resumed[int(sid)] = tuple(x[i].numpy().copy() for x in batch)
    state = two.state_dict()
    again = make_loader(same_pairs, batch_size=6, num_threads=2, seed=SEED, augment=aug)
    again.load_state_dict(state)
    for batch in again:
        for i, sid in enumerate(again.last_batch_ids):
            resumed[int(sid)] = tuple(x[i].numpy().copy() for x in batch)
    assert sorted(resumed) == sorted(whole)
    for sid, (out_a, out_b, label) in whole.items():
        for x, y in zip((out_a, out_b, label), resumed[sid]):
            np.testing.assert_array_equal(x, y, err_msg=f"sample {sid}")
    # reads_tag is per image: A and B part; without it the paired ops keep them equal
    assert sum((w[0] != w[1]).any() for w in whole.values()) > N // 2
    paired = make_loader(
        same_pairs, batch_size=8, seed=SEED, augment=replace(aug, user_ops=ops[:1])
    )
    for out_a, out_b, _ in _epoch(paired).values():
        np.testing.assert_array_equal(out_a, out_b)


def test_a_geometric_user_op_is_refused_beside_an_image_shaped_field(tmp_path: Path) -> None:
    a, b, labels = make_arrays(16, (3, 8, 8), "uint8")
    path = tmp_path / "mask.beton"
    mask = np.zeros((16, 8, 8), np.uint8)
    write_pairs(ArraySource(a, b, labels, mask=mask), path, page_size=4096, progress=False)
    shift = PairAugment(user_ops=[PairOp(po.halve, kind="geometric")])
    with pytest.raises(ValueError, match=r"user op 'halve' is geometric, but field 'mask' \(uint8"):
        make_loader(path, batch_size=8, augment=shift)
    dense = replace(shift, hflip=0.5, dense={"mask": "mask"})  # follows hflip, not the user op
    with pytest.raises(ValueError, match=r"'mask' \(uint8\[8, 8\]\) is shaped like the images"):
        make_loader(path, batch_size=8, augment=dense)
    values = PairAugment(user_ops=[PairOp(po.halve)])  # photometric: the mask stays as it is
    out_a, _, _, out_mask = next(iter(make_loader(path, batch_size=8, augment=values,
                                                  order="sequential")))  # fmt: skip
    np.testing.assert_array_equal(out_a.numpy(), a[:8] // 2)
    assert not out_mask.numpy().any()


# -- upstream FFCV ops appended per field ------------------------------------------------
class Halve(Operation):
    """An upstream-style op: numpy code that upstream would compile with numba."""

    def declare_state_and_memory(self, previous_state: State):
        self.seen = previous_state.dtype
        return replace(previous_state, jit_mode=True), None

    def generate_code(self):
        def halve(images, _):
            for i in range(images.shape[0]):
                images[i] = images[i] // 2
            return images

        return halve


class TimesTen(Operation):
    def declare_state_and_memory(self, previous_state: State):
        return replace(previous_state, jit_mode=True), None

    def generate_code(self):
        def times_ten(labels, _, indices):
            for i in range(labels.shape[0]):
                labels[i] = labels[i] + 9 * indices[i]  # label i of sample i: 10 * i
            return labels

        times_ten.with_indices = True
        return times_ten


def test_field_ops_run_after_ours_and_before_normalisation(tmp_path: Path) -> None:
    path, a, b = write_small_beton(tmp_path, n=32)
    halve = Halve()
    aug = PairAugment(normalize_mean=(8.0, 8.0, 8.0), normalize_std=(2.0, 2.0, 2.0))
    loader = make_loader(
        path,
        batch_size=16,
        order="sequential",
        augment=aug,
        field_ops={"A": [halve], "label": [TimesTen()]},
    )
    got = _epoch(loader, 0)
    assert halve.seen == np.dtype("uint8")  # the stored dtype, not the normalised one
    for sid, (out_a, out_b, label) in got.items():
        np.testing.assert_array_equal(out_a, ((a[sid] // 2).astype(np.float32) - 8) / 2)
        np.testing.assert_array_equal(out_b, (b[sid].astype(np.float32) - 8) / 2)
        assert label == 10 * sid


def test_upstream_ops_compile_as_upstream_compiles_them() -> None:
    """In ``jit_mode`` an op's code runs compiled by numba (this package's pipeline compiles
    nothing itself); out of it, as it is."""
    from numba.core.dispatcher import Dispatcher

    from ffcv_pairs.load.field_ops import UpstreamOp

    cpu = torch.device("cpu")
    start = State(jit_mode=True, device=cpu, shape=(2,), dtype=np.dtype("int64"))
    numeric = UpstreamOp(TimesTen())
    numeric.declare_state_and_memory(start)
    code = numeric.generate_code()
    labels = np.array([1, 2], dtype=np.int64)
    assert code(labels, None, np.array([1, 2])) is not None and list(labels) == [10, 20]
    assert isinstance(numeric.compiled, Dispatcher) and code.with_indices
    torch_op = UpstreamOp(ToTensor())
    torch_op.declare_state_and_memory(start)
    torch_op.generate_code()
    assert torch_op.compiled is None


def test_field_ops_are_checked(tmp_path: Path) -> None:
    path, _, _ = write_small_beton(tmp_path, n=16)
    with pytest.raises(ValueError, match=r"field_ops names field\(s\) \['C'\] the file lacks"):
        make_loader(path, batch_size=8, field_ops={"C": [Halve()]})
    with pytest.raises(TypeError, match=r"field_ops\['A'\] holds 3 \(int\), not an ffcv"):
        make_loader(path, batch_size=8, field_ops={"A": [3]})
    with pytest.raises(TypeError, match=r"field_ops\['A'\] must be a list of ffcv Operations"):
        make_loader(path, batch_size=8, field_ops={"A": Halve()})


# -- YAML ----------------------------------------------------------------------------------
def test_a_user_op_from_the_cli_yaml(tmp_path: Path, monkeypatch) -> None:
    from ffcv_pairs.train import cli_main

    monkeypatch.setattr(sys, "argv", ["train.py"])
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data:\n  train_path: {tmp_path / 'x.beton'}\n  batch_size: 8\n"
        "  augment:\n    hflip: 0.5\n    user_ops:\n"
        "      - fn: pair_ops.darken\n        draws: 1\n"
        "      - {fn: pair_ops.reads_tag, draws: 1, paired: false, name: tagged}\n"
        f"trainer:\n  logger: false\n  default_root_dir: {tmp_path}\n"
    )
    cli = cli_main(["--config", str(config)], run=False)
    expected = (
        PairOp(po.darken, draws=1),
        PairOp(po.reads_tag, paired=False, draws=1, name="tagged"),
    )
    assert cli.datamodule.augment.user_ops == expected
