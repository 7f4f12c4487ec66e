"""Host to device: the stage that copies each batch from its pinned slot to the GPU
(:mod:`.stage`), the four calls it is written against with their CUDA implementation
(:mod:`.engines`), and a CPU simulation of a lagging GPU for the tests (:mod:`.simulated`)."""

__all__: list[str] = []
