"""Every public argument, thrown values of every type (hypothesis): each either works, or
raises ``ValueError``/``TypeError`` (or a project error built on them) naming the
argument. Never a raw error from deep inside, a hang or a crash."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ffcv_pairs import ArraySource, PairAugment, PairDataModule, make_loader, write_pairs

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-2.0, 2.0),
    st.text(max_size=6),
    st.sampled_from(["cpu", "cuda", "sequential", "random", "reflect", "first", "float16"]),
    st.lists(st.integers(-3, 310), max_size=4),
    st.lists(st.floats(-1.0, 300.0), max_size=4),
    st.tuples(st.integers(-2, 40), st.integers(-2, 40)),
    st.tuples(st.floats(-1.0, 2.0), st.floats(-1.0, 2.0)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.sampled_from([np.int64(3), np.float32(0.5), np.bool_(True), np.zeros(2), object()]),
)
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


@pytest.fixture(scope="module")
def beton(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (300, 3, 12, 12), dtype=np.uint8)
    path = tmp_path_factory.mktemp("arguments") / "pairs.beton"
    write_pairs(ArraySource(a, 255 - a, np.arange(300)), path, page_size=1 << 16, progress=False)
    return path


def _names(function) -> list[str]:
    params = inspect.signature(function).parameters.values()
    return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]


def _refused_naming(error: BaseException, *names: str) -> None:
    event("refused")
    assert isinstance(error, ValueError | TypeError), f"raw {type(error).__name__}: {error}"
    text = str(error)
    assert "\n" not in text.strip(), f"not one line: {text!r}"
    assert any(name in text for name in names), f"{names} not named in: {text}"


def _first_batch(loader) -> None:
    event("worked")
    try:
        batch = next(iter(loader))
        assert len(batch) == 3 and len(batch[2]) >= 1
    finally:
        loader.close()


@SETTINGS
@given(name=st.sampled_from(_names(make_loader)), value=ANY)
def test_make_loader_takes_or_names_every_argument(beton: Path, name: str, value) -> None:
    args = {"batch_size": 8, "num_threads": 1, name: value}
    try:
        loader = make_loader(beton, **args)
    except Exception as e:
        _refused_naming(e, name)
        return
    _first_batch(loader)


AUGMENT_FIELDS = [f.name for f in dataclasses.fields(PairAugment)]


@SETTINGS
@given(name=st.sampled_from(AUGMENT_FIELDS), value=ANY, crop=st.booleans())
def test_pair_augment_takes_or_names_every_field(beton: Path, name, value, crop) -> None:
    """With and without a crop, since some fields only apply to one."""
    base = {"crop": (10, 10)} if crop and name not in ("crop", "crop_scale") else {}
    try:
        augment = PairAugment(**{**base, name: value})
        loader = make_loader(beton, batch_size=8, num_threads=1, augment=augment)
    except Exception as e:
        _refused_naming(e, name, f"augment {name}")
        return
    _first_batch(loader)


@SETTINGS
@given(name=st.sampled_from(_names(PairDataModule.__init__)), value=ANY)
def test_pair_data_module_checks_every_argument_at_once(beton: Path, name, value) -> None:
    sizes = {"global_batch_size": None, "batch_size": None} if "batch_size" in name else {}
    args = {"batch_size": 8, **sizes, name: value}
    try:
        PairDataModule(train_path=str(beton), **args)
    except Exception as e:
        names = ("global_batch_size", "batch_size") if "batch_size" in name else (name,)
        _refused_naming(e, *names)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"seed": "5"}, "seed must be an integer, got '5' (str)"),
        ({"max_ram_gb": -1}, "max_ram_gb must be > 0, got -1.0"),
        ({"batch_size": 0}, "batch_size must be between 1 and"),
        ({"global_batch_size": 1.5, "batch_size": None}, "global_batch_size must be an integer"),
        ({"train_path": 3}, "train_path must be a path or None, got 3 (int)"),
    ],
)
def test_pair_data_module_names_the_argument(beton: Path, args, needle) -> None:
    """At construction, not when the trainer first asks for a loader."""
    with pytest.raises(
        (ValueError, TypeError), match=needle.replace("(", r"\(").replace(")", r"\)")
    ):
        PairDataModule(**{"train_path": str(beton), "batch_size": 8, **args})


STATE_KEYS = [
    "epoch",
    "batches_consumed",
    "segments",
    "content",
    "file",
    "order",
    "seed",
    "window_pages",
]
SEGMENT_KEYS = ["world_size", "batch_size", "drop_last", "batches"]


@pytest.fixture(scope="module")
def mid_epoch(beton: Path) -> dict:
    loader = make_loader(beton, batch_size=8, num_threads=1, order="sequential")
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    loader.close()
    return state


@SETTINGS
@given(
    key=st.sampled_from(STATE_KEYS + [f"segments.{k}" for k in SEGMENT_KEYS]),
    value=ANY,
    drop=st.booleans(),
)
def test_load_state_dict_takes_or_names_every_field(beton, mid_epoch, key, value, drop) -> None:
    """A saved state with one field replaced (or removed): loads, or is refused naming it."""
    state = {**mid_epoch, "segments": [dict(s) for s in mid_epoch["segments"]]}
    target, name = state, key
    if key.startswith("segments."):
        target, name = state["segments"][0], key.split(".", 1)[1]
    if drop:
        target.pop(name, None)
    else:
        target[name] = value
    loader = make_loader(beton, batch_size=8, num_threads=1, order="sequential")
    try:
        loader.load_state_dict(state)
    except Exception as e:
        _refused_naming(e, name, "state", "segment")
        return
    _first_batch(loader)


# -- write_pairs ------------------------------------------------------------------------
WRITE_ANY = st.one_of(
    ANY,
    st.sampled_from(["uint8", "float16", "float32", 4096, 1 << 16, 4095, 3 << 20, 2**64 - 1]),
    st.sampled_from([b"out.beton", Path("sub") / "x.beton", np.int64(4096), np.uint64(7)]),
)
WRITE_NAMES = ["source", "path", *_names(write_pairs)]


@settings(SETTINGS, max_examples=300)
@given(name=st.sampled_from(WRITE_NAMES), value=WRITE_ANY)
def test_write_pairs_takes_or_names_every_argument(
    tmp_path_factory: pytest.TempPathFactory, name: str, value
) -> None:
    """A tiny source (one page, so the writer stays in this process) and a fresh folder
    for each example; a string path is put inside that folder."""
    folder = tmp_path_factory.mktemp("write")
    if name == "path" and isinstance(value, str | Path):
        value = folder / f"x{value}"
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (12, 3, 4, 4), dtype=np.uint8)
    args = {"workers": 1, "page_size": 4096, "progress": False, name: value}
    args.setdefault("source", ArraySource(a, 255 - a, np.arange(12)))
    args.setdefault("path", folder / "out.beton")
    try:
        report = write_pairs(**args)
    except Exception as e:
        names = (name, f"{type(value).__name__}[0]") if name == "source" else (name,)
        _refused_naming(e, *names)
        return
    event("worked")
    assert report.path.is_file() and report.num_samples >= 1


@pytest.mark.parametrize(
    ("args", "error", "needle"),
    [
        ({"path": ""}, ValueError, "path must name a file, got ''"),
        ({"path": "."}, ValueError, "path must name a file, got '.'"),
        ({"path": "/"}, ValueError, "path must name a file, got '/'"),
        ({"path": "a\0b"}, ValueError, "path must name a file"),
        ({"path": b"x.beton"}, TypeError, "path must be a path (str or os.PathLike), got b'x"),
        ({"path": None}, TypeError, "path must be a path"),
        ({"workers": True}, TypeError, "workers must be an integer, got True (bool)"),
        ({"workers": 0}, ValueError, "workers must be at least 1, got 0"),
        ({"workers": 10**6}, ValueError, "(4 per CPU of the"),
        ({"page_size": 3 << 20}, ValueError, "page_size must be a power of two from 4096 to"),
        ({"page_size": 2048}, ValueError, "got 2048"),
        ({"page_size": 2**32}, ValueError, "got 4294967296"),
        ({"page_size": "4KiB"}, TypeError, "page_size must be an integer, got '4KiB' (str)"),
        ({"page_size": 4096.0}, TypeError, "page_size must be an integer"),
        ({"store_dtype": "int8"}, ValueError, "store_dtype must be one of ['uint8', 'float16']"),
        ({"limit": 0}, ValueError, "limit must be at least 1, got 0"),
        ({"limit": False}, TypeError, "limit must be an integer, got False (bool)"),
        ({"shuffle_seed": -1}, ValueError, "shuffle_seed must be between 0 and"),
        ({"shuffle_seed": 2**64}, ValueError, "got 18446744073709551616"),
        ({"shuffle_seed": 1.0}, TypeError, "shuffle_seed must be an integer"),
        ({"resume": 1}, TypeError, "resume must be True or False, got 1 (int)"),
        ({"progress": "no"}, TypeError, "progress must be True or False"),
        ({"source": "pairs"}, TypeError, "source must be a PairSource or a sequence"),
        ({"source": {0: (1, 2, 3)}}, TypeError, "got dict"),
    ],
)
def test_write_pairs_names_the_argument(tmp_path: Path, args, error, needle) -> None:
    """Before reading the source or touching the disk."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (12, 3, 4, 4), dtype=np.uint8)
    base = {"source": ArraySource(a, a, np.arange(12)), "path": tmp_path / "o.beton"}
    with pytest.raises(error) as info:
        write_pairs(**{**base, "progress": False, **args})
    assert needle in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_write_pairs_refuses_a_directory_as_its_path(tmp_path: Path) -> None:
    a = np.zeros((2, 3, 4, 4), np.uint8)
    with pytest.raises(ValueError, match="which is a directory"):
        write_pairs(ArraySource(a, a, np.arange(2)), tmp_path, progress=False)
