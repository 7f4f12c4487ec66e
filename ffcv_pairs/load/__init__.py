"""Loading: page index, distributed order, memory managers, decoders, the epoch
thread, the loader itself, elastic resume and the RAM budget."""

__all__: list[str] = []
