"""Train a pair classifier with Lightning: one command from a laptop CPU to several GPU nodes.

Commands::

    # single process, CPU (the demo's data; see `make demo`)
    python -m ffcv_pairs.train fit --config configs/demo_cpu.yaml

    # one node, 4 GPUs, DDP, global batch 1024 (256 per GPU), bf16-mixed.
    # Lightning starts the 4 processes itself:
    python -m ffcv_pairs.train fit --config configs/ddp_4gpu.yaml

    # several nodes with torchrun (run on every node; NODE_RANK = 0, 1, ...)
    torchrun --nnodes 2 --nproc-per-node 4 --node-rank $NODE_RANK \\
        --master-addr $MASTER_ADDR --master-port 29500 \\
        -m ffcv_pairs.train fit --config configs/multinode.yaml

    # several nodes with SLURM (sbatch --nodes 2 --ntasks-per-node 4 --gpus-per-node 4)
    srun python -m ffcv_pairs.train fit --config configs/multinode.yaml

    # resume a pre-empted run mid-epoch (the loader continues where it stopped)
    python -m ffcv_pairs.train fit --config configs/ddp_4gpu.yaml --ckpt_path last

    # any option from the command line, e.g. a quick check:
    python -m ffcv_pairs.train fit --config configs/demo_cpu.yaml --trainer.fast_dev_run true

``--print_config`` shows every option. The data options are those of
:class:`~ffcv_pairs.lightning.datamodule.PairDataModule`, the model's those of
:class:`~ffcv_pairs.lightning.model.SiamesePairClassifier`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from lightning.pytorch.cli import LightningCLI

from .lightning.datamodule import PairDataModule
from .lightning.model import SiamesePairClassifier

__all__ = ["cli_main"]


def cli_main(args: Sequence[str] | None = None, run: bool = True) -> LightningCLI:
    """Run the LightningCLI (``args`` default to ``sys.argv[1:]``)."""
    return LightningCLI(
        SiamesePairClassifier,
        PairDataModule,
        args=list(args) if args is not None else None,
        run=run,
        save_config_kwargs={"overwrite": True},
    )


def main(argv: Sequence[str] | None = None) -> Any:
    cli_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
