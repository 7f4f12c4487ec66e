"""Paired augmentation: the configuration (``config``) and its FFCV ops (``ops``)."""

__all__: list[str] = []
