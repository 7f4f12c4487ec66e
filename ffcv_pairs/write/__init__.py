"""Writing: sources (``.pt`` files, arrays, datasets), the writer, and comparing a written
file with its sources."""

__all__: list[str] = []
