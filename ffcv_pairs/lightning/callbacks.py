"""``LoaderMonitor``: "is the loader my bottleneck?", in the progress bar and the logs.

For every training step it measures the time spent waiting for the batch
(from the end of the previous step to the start of this one: fetching, and
the host-to-device copy) and the time spent in the step itself, and logs

* ``loader/wait_share``: wait / (wait + step). Near 0: the GPU (or CPU) is the
  bottleneck. Large: the loader is.
* ``loader/samples_per_s``: samples per second of wall time, this rank.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L

__all__ = ["LoaderMonitor"]


class LoaderMonitor(L.Callback):
    """Logs the data-wait share of each training step and the samples/s.

    Args:
        prog_bar: Show both figures in the progress bar.
    """

    def __init__(self, prog_bar: bool = True):
        super().__init__()
        self.prog_bar = prog_bar
        self._last_end: float | None = None
        self._start = 0.0
        self.wait = self.busy = 0.0
        self.samples = 0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_end = time.perf_counter()
        self.wait = self.busy = 0.0
        self.samples = 0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._start = time.perf_counter()
        if self._last_end is not None:
            self.wait += self._start - self._last_end

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = time.perf_counter()
        self.busy += now - self._start
        self.samples += len(batch[-1])
        total = self.wait + self.busy
        if total > 0:
            figures = {"wait_share": self.wait / total, "samples_per_s": self.samples / total}
            for name, value in figures.items():
                pl_module.log(
                    f"loader/{name}",
                    value,
                    prog_bar=self.prog_bar,
                    on_step=True,
                    on_epoch=False,
                    batch_size=len(batch[-1]),
                )
        self._last_end = time.perf_counter()

    def summary(self) -> dict[str, float]:
        """This rank's figures for the current (or last) epoch."""
        total = self.wait + self.busy
        return {
            "wait_share": self.wait / total if total else 0.0,
            "samples_per_s": self.samples / total if total else 0.0,
        }
