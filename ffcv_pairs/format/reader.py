"""Open a `.beton` safely: validate every region first, then memory-map the tables.

Upstream's ``ffcv.reader.Reader`` trusts the file: a truncated or unfinished
file gives an ``AssertionError``, a numpy error, a hang in a loader thread or a
segfault in a JIT kernel that reads past the end of the mapping. And it copies
the metadata and allocation tables into private memory with ``np.fromfile``.
:class:`PairReader` subclasses it to check the header, the field table and
every data pointer before anything reads through them, and maps both tables
read-only so that all ranks on a node share one copy in the page cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from ffcv.reader import Reader
from ffcv.types import ALLOC_TABLE_TYPE, CURRENT_VERSION, FieldDescType, HeaderType

from ..errors import FfcvPairsError
from .schema import PairSchema

__all__ = ["BetonError", "PairReader", "require_file"]

_MAX_FIELDS = 64
_CHECK_SLICE = 1 << 16  # pointers checked at once


class BetonError(FfcvPairsError, ValueError):
    """A file that is not a readable `.beton`; the message names the file and the problem."""


def require_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`~pathlib.Path` when it names a regular file.

    Raises:
        BetonError: saying what ``path`` is instead: a directory, nothing, or
            another kind of file.
    """
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        raise BetonError(f"{path}: is a directory, not a .beton file")
    if not path.exists():
        raise BetonError(f"{path}: no such file")
    raise BetonError(f"{path}: not a regular file, so not a .beton")


class PairReader(Reader):
    """A validating, memory-mapping :class:`ffcv.reader.Reader` for pair files.

    Args:
        path: The `.beton` file.

    Raises:
        BetonError: the path is missing or a directory, or the file is not a `.beton`,
            is unfinished, truncated, has pointers outside the file, or lacks the
            ``A``/``B``/``label`` fields.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self._sizes: np.ndarray | None = None
        #: The sidecar as :func:`~.integrity.load_manifest` first read it (or None: none),
        #: in a 1-tuple; None until then. One reader reads its sidecar once.
        self.sidecar_read: tuple[Any] | None = None
        self._rows: np.ndarray | None = None
        self.path = require_file(path)
        self.file_size = self.path.stat().st_size
        super().__init__(str(self.path))
        try:
            arguments = {
                name: self.field_descriptors[i]["arguments"].tobytes()
                for i, name in enumerate(self.field_names)
            }
            self.schema = PairSchema.from_handlers(self.handlers, str(self.path), arguments)
        except ValueError as e:
            raise BetonError(str(e)) from None
        self._check_pointers()

    def _fail(self, what: str) -> BetonError:
        return BetonError(f"{self.path}: {what}")

    def read_header(self) -> None:
        if self.file_size < HeaderType.itemsize:
            raise self._fail(f"too small to be a .beton ({self.file_size} bytes)")
        header = np.fromfile(self._fname, dtype=HeaderType, count=1)[0]
        if not np.frombuffer(header.tobytes(), dtype=np.uint8).any():
            raise self._fail("header is empty: an unfinished or interrupted write")
        if header["version"] != CURRENT_VERSION:
            raise self._fail(
                f"not a .beton (format version {int(header['version'])}, "
                f"expected {CURRENT_VERSION})"
            )
        page_size, ptr = int(header["page_size"]), int(header["alloc_table_ptr"])
        num_fields, n = int(header["num_fields"]), int(header["num_samples"])
        if page_size < 1 or page_size & (page_size - 1):
            raise self._fail(f"corrupt header: page_size {page_size} is not a power of two")
        if not 1 <= num_fields <= _MAX_FIELDS:
            raise self._fail(f"corrupt header: {num_fields} fields")
        if ptr == 0:
            raise self._fail("no allocation table: an unfinished or interrupted write")
        meta_start = HeaderType.itemsize + num_fields * FieldDescType.itemsize
        if not meta_start <= ptr <= self.file_size:
            raise self._fail(
                f"truncated or corrupt: allocation table at byte {ptr}, file is "
                f"{self.file_size} bytes"
            )
        if (self.file_size - ptr) % ALLOC_TABLE_TYPE.itemsize:
            raise self._fail(
                f"truncated: allocation table of {self.file_size - ptr} bytes is not a "
                f"multiple of {ALLOC_TABLE_TYPE.itemsize}"
            )
        if n < 1:
            raise self._fail("holds no samples")
        self.num_samples, self.page_size, self.num_fields = n, page_size, num_fields
        self.header = header

    def read_field_descriptors(self) -> None:
        try:
            super().read_field_descriptors()
        except (KeyError, ValueError, UnicodeDecodeError, IndexError, AssertionError) as e:
            raise self._fail(f"corrupt field table ({type(e).__name__}: {e})") from None

    def read_metadata(self) -> None:
        offset, end = self.metadata_offset, self.metadata_end
        if end > int(self.header["alloc_table_ptr"]):
            raise self._fail(
                f"truncated or corrupt: {self.num_samples} metadata rows end at byte {end}, "
                f"past the allocation table at {int(self.header['alloc_table_ptr'])}"
            )
        # A plain ndarray view of the mapping: upstream's pipeline takes its fields every
        # batch, and np.memmap's Python-level __getitem__/__array_finalize__ cost that
        # thread (which holds up the batch) about 4% of its time at 224x224.
        self.metadata: np.ndarray[Any, Any] = np.memmap(
            self._fname,
            dtype=self.metadata_type,
            mode="r",
            offset=offset,
            shape=(self.num_samples,),
        ).view(np.ndarray)

    def read_allocation_table(self) -> None:
        ptr = int(self.header["alloc_table_ptr"])
        count = (self.file_size - ptr) // ALLOC_TABLE_TYPE.itemsize
        if count == 0:
            self.alloc_table = np.zeros(0, dtype=ALLOC_TABLE_TYPE)
            return
        self.alloc_table = np.memmap(
            self._fname, dtype=ALLOC_TABLE_TYPE, mode="r", offset=ptr, shape=(count,)
        ).view(np.ndarray)

    def stand_in_sizes(self, sizes: np.ndarray) -> None:
        """Answer :meth:`image_sizes` with ``sizes`` (``(num_samples, 2)`` uint64, A's and
        B's stored bytes) instead of the allocation table, which is then not read: for a
        remote shard's skeleton of raw fields, which holds no allocation table (the shard,
        its table included, is checked against its digest before it is read)."""
        if sizes.shape != (self.num_samples, 2):
            raise ValueError(f"sizes of shape {sizes.shape}, expected ({self.num_samples}, 2)")
        self._sizes = sizes
        self.alloc_table = np.zeros(0, dtype=ALLOC_TABLE_TYPE)

    @property
    def files(self) -> list[Path]:
        """The files read: this one."""
        return [self.path]

    def mapped_tables(self) -> list[np.ndarray]:
        """The arrays that map the file (a bus error there names the file)."""
        return [self.metadata, self.alloc_table]

    @property
    def page_shift(self) -> np.uint64:
        """``log2(page_size)``: a pointer's page is ``ptr >> page_shift``."""
        return np.uint64(int(self.page_size).bit_length() - 1)

    @property
    def metadata_offset(self) -> int:
        """Byte offset of the metadata table."""
        return HeaderType.itemsize + self.field_descriptors.nbytes

    @property
    def metadata_end(self) -> int:
        return self.metadata_offset + self.num_samples * self.metadata_type.itemsize

    def field_index(self, name: str) -> int:
        return self.field_names.index(name)

    def image_pointers(self, name: str) -> np.ndarray:
        """The data pointer of field ``name`` (an image or an array) for every sample (a
        memmap view)."""
        column = self.metadata[f"f{self.field_index(name)}"]
        return column["data_ptr"] if column.dtype.names else column

    def stored_bytes(self, name: str) -> int | np.ndarray:
        """The bytes image field ``name`` takes in the file: one size, or (JPEG) each
        sample's."""
        spec = self.schema.spec(name)
        if spec.jpeg is None:
            return spec.nbytes
        return self.image_sizes()[:, PairSchema.IMAGE_FIELDS.index(name)]

    def image_sizes(self) -> np.ndarray:
        """``(num_samples, 2)`` uint64: the stored bytes of A and B of every sample, from the
        allocation table (one numpy pass; JPEG fields vary, raw ones are their size)."""
        if self._sizes is None:
            n, table, per = self.num_samples, self.alloc_table, 2 + len(self.schema.arrays)
            if len(table) == per * n and self._in_writer_order(table.reshape(n, per)):
                pairs = table.reshape(n, per)
                self._sizes = pairs["size"][:, :2]  # a view of the mapping: no copy
                # id, ptr, size of each row
                self._rows = pairs.reshape(-1).view("<u8").reshape(n, per, 3)[:, :2]
                return self._sizes
            ids = table["sample_id"]
            if len(table) != per * n or int(ids.max()) >= n:
                raise self._fail(
                    f"corrupt allocation table: {len(table)} rows for {n} samples of {per} "
                    f"stored fields"
                )
            sizes = np.zeros((n, 2), dtype=np.uint64)
            for t, name in enumerate(PairSchema.IMAGE_FIELDS):
                mine = table["ptr"] == self.image_pointers(name)[ids]
                sizes[ids[mine], t] = table["size"][mine]
                if int(np.count_nonzero(mine)) != n:
                    raise self._fail(f"corrupt allocation table: not one row for each {name}")
            self._sizes = sizes
        return self._sizes

    def _check_pointers(self) -> None:
        """Every image and array field must lie inside the data region: JIT kernels do not
        bounds-check."""
        data_start = self.metadata_end
        data_end = int(self.header["alloc_table_ptr"])
        region = (data_start, data_end)
        for t, name in enumerate(PairSchema.IMAGE_FIELDS):
            ptrs = self.image_pointers(name)
            spec = self.schema.spec(name)
            if spec.jpeg is not None:
                sizes = self.image_sizes()[:, t]
                if self._rows is not None:  # the same pointers, aligned: checked faster
                    ptrs = self._rows[:, t, 1]
                self._check_spans(name, ptrs, sizes, data_start, data_end)
                continue
            size = np.uint64(spec.nbytes)
            lo, hi = int(ptrs.min()), int((ptrs + size).max())
            if lo < data_start or hi > data_end:
                bad = int(np.argmax((ptrs < data_start) | (ptrs + size > data_end)))
                self._outside(name, bad, int(ptrs[bad]), data_start, data_end)
        for name, field in self.schema.arrays.items():
            ptrs = self.image_pointers(name)
            self._check_spans(name, ptrs, np.full(len(ptrs), field.nbytes, np.uint64), *region)

    def _outside(self, name: str, bad: int, ptr: int, start: int, end: int) -> None:
        raise self._fail(
            f"corrupt metadata: sample {bad} field {name!r} points at byte {ptr}, outside the "
            f"data region [{start}, {end})"
        )

    def _check_spans(
        self, name: str, ptrs: np.ndarray, sizes: np.ndarray, start: int, end: int
    ) -> None:
        """Each JPEG inside the data region and within one page (the process cache holds
        pages), in slices that stay in the CPU's cache (whole-column temporaries of 3M
        pointers cost ten times as much)."""
        mask, page = np.uint64(self.page_size - 1), np.uint64(self.page_size)
        for i in range(0, len(ptrs), _CHECK_SLICE):
            p, n = ptrs[i : i + _CHECK_SLICE], sizes[i : i + _CHECK_SLICE]
            reach = p & mask
            reach += n
            if int(p.min()) < start or int((p + n).max()) > end:
                bad = int(np.argmax((p < start) | (p + n > end)))
                self._outside(name, i + bad, int(p[bad]), start, end)
            if (reach > page).any():
                bad = int(np.argmax(reach > page))
                raise self._fail(
                    f"corrupt metadata: sample {i + bad} field {name!r} ({int(n[bad])} bytes "
                    f"at byte {int(p[bad])}) straddles a page"
                )

    def _in_writer_order(self, pairs: np.ndarray) -> bool:
        """Whether the allocation table's rows are A and B of sample 0, 1, ... (as this
        project's writer puts them)."""
        a, b = (self.image_pointers(name) for name in PairSchema.IMAGE_FIELDS)
        rows = pairs.reshape(-1).view("<u8").reshape(*pairs.shape, 3)  # id, ptr, size
        for i in range(0, len(rows), _CHECK_SLICE):
            part, j = rows[i : i + _CHECK_SLICE], slice(i, i + _CHECK_SLICE)
            ids = np.arange(i, i + len(part), dtype=np.uint64)
            if not (
                (part[:, 0, 0] == ids).all()
                and (part[:, 1, 0] == ids).all()
                and (part[:, 0, 1] == a[j]).all()
                and (part[:, 1, 1] == b[j]).all()
            ):
                return False
        return True
