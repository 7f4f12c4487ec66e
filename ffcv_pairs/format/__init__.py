"""The `.beton` file: one schema, the page layout, the reader, the checksum sidecar and
integrity checks. Imports nothing else of the package."""

__all__: list[str] = []
