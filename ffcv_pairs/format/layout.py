"""Where every byte of a `.beton` written by this project lives.

The format is FFCV 1.0.2's, so plain ``ffcv.loader.Loader`` reads these files.
File order: header, field descriptors, metadata table (one row per sample),
zero padding to a page boundary, the data pages, the allocation table (sorted by
pointer). A sample never straddles a page, as upstream's allocator guarantees.

* :class:`BetonLayout`: A and B of a fixed size, so the layout is a pure function
  of ``(schema, num_samples, page_size)``: sample ``i`` sits on data page
  ``i // samples_per_page`` at slot ``i % samples_per_page``, A first, then B.
  Workers can therefore write any page at its final offset, in any order.
* :class:`PackedLayout`: JPEG images vary in size, so samples are packed into pages
  in order, A then B, as they come (``ffcv_pairs.write.packing``); the layout is
  known once every page is, from each image's pointer and size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from ffcv.fields.base import Field
from ffcv.types import (
    ALLOC_TABLE_TYPE,
    CURRENT_VERSION,
    TYPE_ID_HANDLER,
    FieldDescType,
    HeaderType,
    get_metadata_type,
)

from .schema import NOTE_OFFSET, PairSchema

__all__ = [
    "MAX_PAGE_SIZE",
    "MIN_PAGE_SIZE",
    "BetonLayout",
    "PackedLayout",
    "check_page_size",
    "field_descriptors",
    "parse_size",
]

#: Smallest page size accepted (one OS page); upstream's writer insists on 2 MiB.
MIN_PAGE_SIZE = 1 << 12
#: Largest page size accepted (the header keeps it in 32 bits).
MAX_PAGE_SIZE = 1 << 31
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
}


def parse_size(text: str | int) -> int:
    """``"8MiB"`` -> 8388608; plain integers pass through.

    Raises:
        ValueError: ``text`` is not a number with an optional unit, not a whole number of
            bytes (``"8.5"``), or 2**63 bytes or more; the message quotes it.
    """
    if isinstance(text, int):
        return text
    s = text.strip().lower()
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num) :]
    unparsable = ValueError(f"cannot parse size {text!r}; use bytes or a suffix like 8MiB")
    if unit not in _UNITS:
        raise unparsable
    try:
        size = float(num) * _UNITS[unit]
    except ValueError:
        raise unparsable from None
    if not size < 2**63:
        raise ValueError(f"size {text!r} is too large")
    if not size.is_integer():
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(size)


def field_descriptors(
    fields: dict[str, Field], notes: dict[str, bytes] | None = None
) -> np.ndarray:
    """The FFCV field-descriptor table for ``fields`` (name -> Field), in order, with each
    field's note (see :mod:`~ffcv_pairs.format.schema`) at ``NOTE_OFFSET`` of its arguments."""
    table = np.zeros(len(fields), dtype=FieldDescType)
    type_ids = {handler: tid for tid, handler in TYPE_ID_HANDLER.items()}
    name_len = table[0]["name"].shape[0]
    for i, (name, field) in enumerate(fields.items()):
        encoded = np.frombuffer(name.encode("ascii"), dtype="<u1")
        if len(encoded) > name_len:
            raise ValueError(f"field name {name!r} is longer than {name_len} bytes")
        table[i]["type_id"] = type_ids[type(field)]
        table[i]["name"][: len(encoded)] = encoded
        table[i]["arguments"][:] = field.to_binary()[0]
        note = (notes or {}).get(name, b"")
        if note:
            args = table[i]["arguments"]
            if args[NOTE_OFFSET:].any():
                raise ValueError(f"field {name!r}: its arguments leave no room for a note")
            args[NOTE_OFFSET : NOTE_OFFSET + len(note)] = np.frombuffer(note, dtype="<u1")
    return table


def check_page_size(page_size: int) -> None:
    """Raises ValueError unless ``page_size`` is a power of two in the accepted range."""
    ps = page_size
    if ps < MIN_PAGE_SIZE or ps > MAX_PAGE_SIZE or ps & (ps - 1):
        raise ValueError(
            f"page_size must be a power of two in [{MIN_PAGE_SIZE}, {MAX_PAGE_SIZE}], got {ps}"
        )


@dataclass(frozen=True)
class _Tables:
    """The regions every layout shares: header, field table, metadata table."""

    schema: PairSchema
    num_samples: int
    page_size: int

    @property
    def fields(self) -> dict[str, Field]:
        return self.schema.ffcv_fields()

    def descriptors(self) -> np.ndarray:
        """The field-descriptor table, with the schema's notes."""
        return field_descriptors(self.fields, self.schema.notes())

    @property
    def metadata_type(self) -> np.dtype:
        return get_metadata_type(list(self.fields.values()))

    @property
    def metadata_start(self) -> int:
        return HeaderType.itemsize + FieldDescType.itemsize * len(self.fields)

    @property
    def data_start(self) -> int:
        end = self.metadata_start + self.num_samples * self.metadata_type.itemsize
        return -(-end // self.page_size) * self.page_size

    @property
    def num_pages(self) -> int:
        raise NotImplementedError

    @property
    def alloc_table_ptr(self) -> int:
        return self.data_start + self.num_pages * self.page_size

    @property
    def file_size(self) -> int:
        return self.alloc_table_ptr + self.per_sample * self.num_samples * ALLOC_TABLE_TYPE.itemsize

    def header(self) -> np.ndarray:
        header = np.zeros(1, dtype=HeaderType)
        header["version"] = CURRENT_VERSION
        header["num_fields"] = len(self.fields)
        header["page_size"] = self.page_size
        header["num_samples"] = self.num_samples
        header["alloc_table_ptr"] = self.alloc_table_ptr
        return header

    @property
    def per_sample(self) -> int:
        """Allocation-table rows per sample: A, B and each array field."""
        return 2 + len(self.schema.arrays)

    def _rows(self, values: np.ndarray, ptrs: dict[str, np.ndarray]) -> np.ndarray:
        """Metadata rows of samples whose stored fields start at ``ptrs`` (by name), with
        scalar ``values``: int64 labels, or a record array with a column per scalar field."""
        rows = np.zeros(len(values), dtype=self.metadata_type)
        for t, name in enumerate(self.schema.names):
            column = f"f{t}"
            if name in ptrs and name not in self.schema.arrays:
                spec = self.schema.spec(name)
                if spec.jpeg is None:
                    rows[column] = ptrs[name]
                    continue
                height, width = spec.height_width
                image = rows[column]
                image["mode"] = 0  # upstream's IMAGE_MODES["jpg"]
                image["width"], image["height"], image["data_ptr"] = width, height, ptrs[name]
            elif name in ptrs:
                rows[column] = ptrs[name]
            else:
                rows[column] = values[name] if values.dtype.names else values
        return rows


@dataclass(frozen=True)
class BetonLayout(_Tables):
    """Offsets of every region of a `.beton` holding ``num_samples`` pairs of fixed size."""

    def __post_init__(self) -> None:
        check_page_size(self.page_size)
        if self.schema.compressed:
            raise ValueError("a JPEG field varies in size: its samples are packed (PackedLayout)")
        ps = self.page_size
        if self.schema.slot_bytes > ps:
            need = 1 << (self.schema.slot_bytes - 1).bit_length()
            raise ValueError(
                f"one sample ({self.schema.slot_bytes} bytes of its arrays) does not fit a "
                f"page of {ps} bytes; use --page-size {need} or larger"
            )
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {self.num_samples}")

    @property
    def samples_per_page(self) -> int:
        return self.page_size // self.schema.slot_bytes

    @property
    def num_pages(self) -> int:
        return -(-self.num_samples // self.samples_per_page)

    def page_samples(self, page: int) -> tuple[int, int]:
        """Sample range ``[start, stop)`` stored on data page ``page``."""
        start = page * self.samples_per_page
        return start, min(self.num_samples, start + self.samples_per_page)

    def ptr_a(self, ids: np.ndarray) -> np.ndarray:
        """File offsets of image A for sample ids (uint64)."""
        ids = np.asarray(ids, dtype=np.uint64)
        spp = np.uint64(self.samples_per_page)
        return (
            np.uint64(self.data_start)
            + (ids // spp) * np.uint64(self.page_size)
            + (ids % spp) * np.uint64(self.schema.slot_bytes)
        )

    def metadata_rows(self, start: int, values: np.ndarray) -> np.ndarray:
        """Metadata rows for samples ``start .. start+len(values)`` (see ``_rows``)."""
        ptr = self.ptr_a(np.arange(start, start + len(values), dtype=np.uint64))
        offsets = self.schema.slot_offsets()
        return self._rows(values, {n: ptr + np.uint64(at) for n, at in offsets.items()})

    def alloc_rows(self, start: int, stop: int) -> np.ndarray:
        """Allocation-table rows of samples ``start:stop``, A, B then each array field,
        sorted by pointer."""
        ids = np.arange(start, stop, dtype=np.uint64)
        rows = np.zeros((stop - start, self.per_sample), dtype=ALLOC_TABLE_TYPE)
        ptr = self.ptr_a(ids)
        rows["sample_id"] = ids[:, None]
        sizes = [self.schema.a.nbytes, self.schema.b.nbytes]
        sizes += [spec.nbytes for spec in self.schema.arrays.values()]
        for t, at in enumerate(self.schema.slot_offsets().values()):
            rows["ptr"][:, t] = ptr + np.uint64(at)
            rows["size"][:, t] = sizes[t]
        return rows.reshape(-1)


@dataclass(frozen=True)
class PackedLayout(_Tables):
    """A `.beton` whose samples were packed into ``num_pages`` pages in order.

    Attributes:
        ptrs, sizes: ``(num_samples, 2 + arrays)`` uint64: where A, B and each array field
            of each sample start, and their sizes in bytes (rows of samples not yet packed
            are 0).
    """

    ptrs: np.ndarray = dataclasses.field(repr=False)
    sizes: np.ndarray = dataclasses.field(repr=False)
    pages: int = 0

    def __post_init__(self) -> None:
        check_page_size(self.page_size)
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {self.num_samples}")

    @classmethod
    def empty(cls, schema: PairSchema, num_samples: int, page_size: int) -> PackedLayout:
        """Before any page is packed."""
        zeros = np.zeros((num_samples, 2 + len(schema.arrays)), dtype=np.uint64)
        return cls(schema, num_samples, page_size, zeros, zeros.copy(), 0)

    @property
    def num_pages(self) -> int:
        return self.pages

    def metadata_rows(self, start: int, labels: np.ndarray) -> np.ndarray:
        """Metadata rows for samples ``start .. start+len(labels)``."""
        ptrs = self.ptrs[start : start + len(labels)]
        names = (*self.schema.IMAGE_FIELDS, *self.schema.arrays)
        return self._rows(labels, dict(zip(names, ptrs.T, strict=True)))

    def alloc_rows(self, start: int, stop: int) -> np.ndarray:
        """Allocation-table rows of samples ``start:stop``, A then B, sorted by pointer."""
        rows = np.zeros((stop - start, self.per_sample), dtype=ALLOC_TABLE_TYPE)
        rows["sample_id"] = np.arange(start, stop, dtype=np.uint64)[:, None]
        rows["ptr"] = self.ptrs[start:stop]
        rows["size"] = self.sizes[start:stop]
        return rows.reshape(-1)
