"""Old path of :class:`~ffcv_pairs.lightning.callbacks.LoaderMonitor`, kept for
configs that name ``ffcv_pairs.callbacks.LoaderMonitor``."""

from .lightning.callbacks import LoaderMonitor

__all__ = ["LoaderMonitor"]
