"""``PairDataModule``: the loader inside Lightning's (distributed) trainer, without traps.

* Loaders are built in the ``*_dataloader`` hooks from the trainer's rank and
  world size, so they shard correctly under DDP on any number of nodes.
* ``global_batch_size`` is split over the world size (``batch_size`` is per
  device), with an error when it does not divide.
* Lightning calls ``loader.sampler.set_epoch(epoch)`` at every epoch start, so
  every epoch gets a new order. Lightning only injects a ``DistributedSampler``
  into a torch ``DataLoader``; this loader shards itself, so
  ``use_distributed_sampler`` may be either value.
* Validation, test and predict read sequentially, sharded, with nothing dropped; the
  ranks' shares are padded by wrapping to equal lengths (as ``DistributedSampler``
  does: fewer than ``world_size`` samples are read twice), so per-step
  collectives cannot hang.
* Mid-epoch resume, on any number of devices: Lightning saves rank 0's train
  loader ``state_dict`` in every checkpoint and restores it on every rank (its
  stateful-dataloader protocol). The rest of the epoch is then every sample not
  yet trained on, dealt to the new ranks, with the same augmented bytes; on the
  same devices and batch size, in the same order too. Lightning counts the
  interrupted epoch's batches in the old world's batches; when the world or the
  batch size changed, the loader's ``on_resume`` hook moves that count to the new
  world's, so the epoch ends with the loader's last batch and later epochs run
  in full.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import lightning as L

from .._checks import integer, optional, shown
from ..augment.batch_ops import BatchOp
from ..augment.config import PairAugment, image_axes
from ..augment.evaluation import eval_pipeline, random_ops
from ..format.joined import open_dataset
from ..format.objectstore import is_url
from ..format.schema import PairSchema
from ..load.loader import (
    DEFAULT_PREFETCH,
    DEFAULT_WINDOW_BYTES,
    LoaderConfig,
    PairLoader,
    make_loader,
)
from ..load.mixing import Stream, as_streams
from ..load.options import MAX_BATCH, options_doc
from ..load.order import OrderKind, Partition
from ..load.remote_dataset import open_remote
from ..load.world import default_num_threads

__all__ = ["PairDataModule"]


class PairDataModule(L.LightningDataModule):
    """Pair `.beton` files for ``fit``/``validate``/``test``.

    Args:
        train_path: Training `.beton`, or dataset manifest of shards (``.json``), or its
            URL (``s3://bucket/train.json``, with ``cache_dir``).
        train_streams: Instead of ``train_path``, a mixture of datasets for training: a list
            of :class:`~ffcv_pairs.load.mixing.Stream` (in YAML, ``{path, proportion}`` or
            ``{path, repeat}`` or ``{path, choose}`` each), drawn from by weight every epoch.
        epoch_size: With ``train_streams`` given proportions, training samples per epoch
            (over all devices; default their total).
        val_path: Validation `.beton` or manifest (optional).
        test_path: Test `.beton` or manifest (optional).
        predict_path: `.beton` or manifest for ``predict`` (optional).
        global_batch_size: Samples per optimiser step over all devices and nodes;
            split over the world size. Give this or ``batch_size``.
        batch_size: Samples per device. Give this or ``global_batch_size``.
        order: Training order: ``quasi_random``, ``random`` or ``sequential``
            (validation and test read sequentially).
        augment: Training augmentation.
        batch_ops: Ops over each training batch, on its device, in order (validation, test
            and predict get none): :class:`~ffcv_pairs.augment.mixup.MixUp`,
            :class:`~ffcv_pairs.augment.mixup.CutMix` or your own
            :class:`~ffcv_pairs.augment.batch_ops.BatchOp` (in YAML, a list of
            ``class_path``/``init_args``); see docs/batch-ops.md.
        eval_augment: What validation, test and predict batches get (deterministic ops
            only: set ``center`` on a crop). Default: derived from ``augment``, with the
            same output size (its ``crop`` or ``resized_crop``, taken from the centre)
            and the same ``normalize_*``/``out_dtype``, and nothing random, so the
            inputs match training's.
        num_threads: JIT threads per rank; default the node's cores over its devices.
        device: Where batches go; default the trainer's device.
        {loader_options}
    """

    #: Options passed to every loader as they are (documented by LoaderConfig).
    LOADER_OPTIONS = [
        "os_cache",
        "seed",
        "window_bytes",
        "batches_ahead",
        "prefetch",
        "dequantize",
        "jpeg_downscale",
        "max_ram_gb",
        "partition",
        "canonical_nodes",
        "node_window",
        "cache_dir",
        "cache_limit",
    ]

    def __init__(
        self,
        train_path: str | None = None,
        val_path: str | None = None,
        test_path: str | None = None,
        predict_path: str | None = None,
        *,
        train_streams: list[Stream] | None = None,
        epoch_size: int | None = None,
        global_batch_size: int | None = None,
        batch_size: int | None = None,
        order: OrderKind = "quasi_random",
        os_cache: bool = True,
        seed: int = 0,
        augment: PairAugment | None = None,
        eval_augment: PairAugment | None = None,
        batch_ops: Sequence[BatchOp] | None = None,
        num_threads: int | None = None,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
        batches_ahead: int = 2,
        prefetch: int = DEFAULT_PREFETCH,
        dequantize: bool = True,
        jpeg_downscale: bool = True,
        max_ram_gb: float | None = None,
        partition: Partition = "global",
        canonical_nodes: int | None = None,
        node_window: bool = False,
        cache_dir: str | None = None,
        cache_limit: int | str | None = None,
        device: str | None = None,
    ):
        super().__init__()
        if (global_batch_size is None) == (batch_size is None):
            raise ValueError(
                "give exactly one of global_batch_size (over all devices) or batch_size "
                f"(per device); got global_batch_size={global_batch_size}, "
                f"batch_size={batch_size}"
            )
        for name, value in (("global_batch_size", global_batch_size), ("batch_size", batch_size)):
            optional(integer)(name, value, 1, MAX_BATCH)
        for name, path in (
            ("train_path", train_path),
            ("val_path", val_path),
            ("test_path", test_path),
            ("predict_path", predict_path),
        ):
            if path is not None and not isinstance(path, str | os.PathLike):
                raise TypeError(
                    f"{name} must be a path or None, got {path!r} ({type(path).__name__})"
                )
        if train_streams is not None:
            if train_path is not None:
                raise ValueError(
                    f"give train_path or train_streams, not both (train_path={train_path!r})"
                )
            train_streams = as_streams(train_streams)
        elif epoch_size is not None:
            raise ValueError(f"epoch_size={epoch_size} goes with train_streams (a mixture)")
        given = locals()
        #: The LOADER_OPTIONS as given: every loader gets them unchanged.
        self.loader_options = {name: given[name] for name in self.LOADER_OPTIONS}
        # The loader's options, checked now (each loader is made later, at setup).
        LoaderConfig(
            batch_size=1,
            order=order,
            augment=augment,
            batch_ops=batch_ops,
            num_threads=num_threads,
            device=device,
            **self.loader_options,
        )
        if eval_augment is None:
            eval_augment = eval_pipeline(augment)
        elif not isinstance(eval_augment, PairAugment):
            raise TypeError(
                f"eval_augment must be a PairAugment or None, got {shown(eval_augment)} "
                f"({type(eval_augment).__name__})"
            )
        elif drawn := random_ops(eval_augment):
            raise ValueError(
                f"eval_augment draws at random ({', '.join(drawn)}), so validation batches "
                f"would change with the epoch: give deterministic ops (center=True for a crop "
                f"or resized crop; no flips, translate or photometric jitter)"
            )
        self.save_hyperparameters(ignore=["augment", "eval_augment", "batch_ops"])
        self.train_streams, self.epoch_size = train_streams, epoch_size
        self.paths = {
            "train": train_path if train_streams is None else str(train_streams[0].path),
            "val": val_path,
            "test": test_path,
            "predict": predict_path,
        }
        self.global_batch_size, self._batch_size = global_batch_size, batch_size
        self.order, self.augment, self.eval_augment = order, augment, eval_augment
        self.batch_ops = batch_ops
        self.num_threads, self.device = num_threads, device
        self._loaders: dict[str, PairLoader] = {}

    # -- the trainer's view ------------------------------------------------------------
    def _world(self) -> tuple[int, int, int]:
        """(rank, world_size, devices per node) from the trainer, or a single process."""
        trainer = self.trainer
        if trainer is None:
            return 0, 1, 1
        return trainer.global_rank, trainer.world_size, max(1, trainer.num_devices)

    def per_device_batch_size(self, world_size: int) -> int:
        """The batch each device loads (``global_batch_size / world_size``)."""
        if self._batch_size is not None:
            return self._batch_size
        assert self.global_batch_size is not None
        if self.global_batch_size % world_size:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} is not divisible by the world "
                f"size {world_size} (devices x nodes); use a multiple of {world_size}"
            )
        return self.global_batch_size // world_size

    def schema(self) -> PairSchema:
        """The schema of the training (or first given) file."""
        path = next(p for p in self.paths.values() if p is not None)
        if is_url(path):
            options = self.loader_options
            return open_remote(str(path), options["cache_dir"], options["cache_limit"]).schema
        return open_dataset(path).schema

    def input_channels(self) -> int:
        """Channels of image A, for sizing a model's first layer."""
        spec = self.schema().a
        return image_axes(spec, self.augment.channels if self.augment else "auto").num_channels

    def _device(self) -> str | None:
        if self.device is not None:
            return self.device
        trainer = self.trainer
        return str(trainer.strategy.root_device) if trainer is not None else None

    def _loader(self, split: str) -> PairLoader:
        path = self.paths[split]
        if path is None:
            raise ValueError(f"PairDataModule has no {split}_path; set data.{split}_path")
        train = split == "train"
        streams = self.train_streams if train else None
        for where, given in (
            [(f"data.{split}_path", path)]
            if streams is None
            else [(f"data.train_streams[{i}].path", s.path) for i, s in enumerate(streams)]
        ):
            if not is_url(given) and not os.path.exists(given):
                raise ValueError(f"{where}: {given} does not exist")
        rank, world, local = self._world()
        threads = self.num_threads or default_num_threads(local)
        return make_loader(
            path if streams is None else streams,
            batch_size=self.per_device_batch_size(world),
            order=self.order if train else "sequential",
            drop_last=train,
            augment=self.augment if train else self.eval_augment,
            batch_ops=self.batch_ops if train else None,
            device=self._device(),
            num_threads=threads,
            rank=rank,
            world_size=world,
            epoch_size=self.epoch_size if train else None,
            **self.loader_options,
        )

    # -- Lightning hooks ---------------------------------------------------------------
    def train_dataloader(self) -> PairLoader:
        loader = self._loaders["train"] = self._loader("train")
        loader.on_resume = self._align_progress
        return loader

    def _align_progress(self, saved: int, now: int) -> None:
        """Lightning restored ``saved`` batches done in the interrupted epoch; on this
        world the same samples are ``now`` batches of the loader's ``len()``. Lightning
        ends an epoch when its count reaches ``len()``, so move its count to ``now``
        (the four counters together, which keeps their order)."""
        trainer = self.trainer
        if trainer is None or saved == now:
            return
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        for name in ("ready", "started", "processed", "completed"):
            setattr(progress, name, getattr(progress, name) + now - saved)

    def val_dataloader(self) -> Any:
        return self._loader("val") if self.paths["val"] else []

    def test_dataloader(self) -> PairLoader:
        return self._loader("test")

    def predict_dataloader(self) -> PairLoader:
        return self._loader("predict")

    def teardown(self, stage: str) -> None:
        for loader in self._loaders.values():
            loader.close()
        self._loaders.clear()


assert PairDataModule.__doc__ is not None
PairDataModule.__doc__ = PairDataModule.__doc__.replace(
    "        {loader_options}\n", options_doc(PairDataModule.LOADER_OPTIONS) + "\n"
)
# help(PairDataModule.__init__) would show LightningDataModule's; the arguments are
# declared once, in the class docstring, and repeated here.
PairDataModule.__init__.__doc__ = (
    "Check every argument at once (a bad one raises ValueError or TypeError naming it);\n"
    "    the loaders are made later, by the ``*_dataloader`` hooks.\n\n"
    + PairDataModule.__doc__[PairDataModule.__doc__.index("    Args:") :]
)
