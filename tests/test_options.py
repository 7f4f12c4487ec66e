"""The loader's options are declared once, in ``LoaderConfig``: ``make_loader`` and
``PairDataModule`` take them with the same names, types and defaults, and document them
with the same words."""

from __future__ import annotations

import dataclasses
import inspect

from ffcv_pairs import LoaderConfig, PairDataModule, make_loader
from ffcv_pairs.load.options import options_doc

FIELDS = {f.name: f for f in dataclasses.fields(LoaderConfig)}
# PairDataModule's own meaning of these (trainer-aware), or set per split by it.
DATAMODULE_OWN = {
    "batch_size",
    "order",
    "augment",
    "batch_ops",  # training batches only
    "num_threads",
    "device",
    "epoch_size",
}
DATAMODULE_SETS = {"distributed", "drop_last", "rank", "world_size", "indices", "verify"}


def _default(f: dataclasses.Field) -> object:
    return inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default


def test_make_loader_takes_exactly_the_config_fields() -> None:
    params = list(inspect.signature(make_loader).parameters.values())[1:]  # after path
    assert [p.name for p in params] == list(FIELDS)
    for p in params:
        f = FIELDS[p.name]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, p.name
        assert p.default == _default(f), p.name
        assert p.annotation == f.type, (p.name, p.annotation, f.type)


def test_pair_data_module_passes_the_rest_unchanged() -> None:
    params = inspect.signature(PairDataModule.__init__).parameters
    shared = set(FIELDS) & set(params)
    assert shared == set(PairDataModule.LOADER_OPTIONS) | DATAMODULE_OWN
    assert not set(params) & DATAMODULE_SETS, "set per split by the data module"
    for name in shared - {"batch_size"}:  # the data module's may be None (global size)
        assert params[name].annotation == FIELDS[name].type, name
        assert params[name].default == _default(FIELDS[name]), name


def test_documented_once() -> None:
    for name, f in FIELDS.items():
        assert f.metadata["doc"], name
        assert f"{name}: {f.metadata['doc'].split()[0]}" in make_loader.__doc__, name
    assert options_doc(PairDataModule.LOADER_OPTIONS) in PairDataModule.__doc__
