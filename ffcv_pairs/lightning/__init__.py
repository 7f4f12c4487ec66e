"""Lightning: the data module, the example model and the loader monitor callback."""

__all__: list[str] = []
