"""The writer's last steps: tables, header, sidecar, renames; and finishing them on resume.

Order, chosen so that a kill at any point leaves either the old ``OUT`` or the new
one, never a mix, and a ``--resume`` that can tell which step was reached:

1. allocation table, fsync, header, fsync (only now is ``OUT.partial`` readable);
2. digest the header/metadata and allocation-table blocks (read back: about 72
   bytes per sample) and derive the whole-file digest from all block digests;
   with image statistics, write the header of ``OUT.stats.partial`` (it names that
   digest), fsync it and hash it (32 bytes per sample);
3. ``OUT.json.partial``, fsynced; remove the old ``OUT.json`` and ``OUT.stats``;
4. rename ``OUT.partial`` to ``OUT``, then ``OUT.json.partial`` to ``OUT.json``,
   then ``OUT.stats.partial`` to ``OUT.stats``; fsync the directory; the caller
   then removes the journal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._fileio import pread_exact, pwrite_all
from ..format.layout import BetonLayout, PackedLayout
from ..format.sidecar import Manifest, block_digest, manifest_path, root_digest
from ..format.stats import field_stats_kinds, hash_stats, stats_header, stats_path, stats_size
from .testhook import hook

__all__ = [
    "Outputs",
    "complete_renames",
    "finish_file",
    "fsync_dir",
    "open_stats_partial",
    "up_to_date",
]

PageDigests = dict[int, tuple[int, bytes]]
AnyLayout = BetonLayout | PackedLayout
_ALLOC_CHUNK = 1 << 20  # samples per slice of the allocation table


@dataclass(frozen=True)
class Outputs:
    """The files of one conversion to ``out``."""

    out: Path
    partial: Path
    sidecar: Path
    sidecar_partial: Path
    stats: Path
    stats_partial: Path

    @classmethod
    def of(cls, out: Path) -> Outputs:
        sidecar, stats = manifest_path(out), stats_path(out)
        return cls(
            out,
            out.with_name(out.name + ".partial"),
            sidecar,
            sidecar.with_name(sidecar.name + ".partial"),
            stats,
            stats.with_name(stats.name + ".partial"),
        )


def fsync_dir(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_stats_partial(files: Outputs, layout: AnyLayout, resumed: bool) -> int | None:
    """``OUT.stats.partial`` opened for the page phase: created at its full size, or on
    resume the one the interrupted run was filling. None when no field is uint8, or when a
    resumed run has none (it began before the writer kept statistics): that file is then
    finished without them."""
    path, size = files.stats_partial, stats_size(layout.num_samples)
    if not any(field_stats_kinds(layout.schema).values()):
        return None
    if resumed and not (path.exists() and path.stat().st_size == size):
        path.unlink(missing_ok=True)
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if not resumed:
        os.ftruncate(fd, 0)
        os.ftruncate(fd, size)
    return fd


def _table_blocks(layout: AnyLayout) -> list[int]:
    """Blocks that hold the header, field table, metadata and allocation table."""
    ps = layout.page_size
    head = range(layout.data_start // ps)
    tail = range(layout.alloc_table_ptr // ps, -(-layout.file_size // ps))
    return [*head, *tail]


def finish_file(
    fd: int,
    files: Outputs,
    layout: AnyLayout,
    manifest: Manifest,
    pages: PageDigests,
    stats_fd: int | None = None,
) -> None:
    """Steps 1-4 of the module docstring; ``pages`` holds every data page's digests;
    ``stats_fd``: ``OUT.stats.partial``, all records written (None: no statistics)."""
    for start in range(0, layout.num_samples, _ALLOC_CHUNK):
        stop = min(layout.num_samples, start + _ALLOC_CHUNK)
        rows = layout.alloc_rows(start, stop)
        pwrite_all(fd, rows, layout.alloc_table_ptr + layout.per_sample * start * rows.itemsize)
    os.fsync(fd)
    pwrite_all(fd, layout.header(), 0)
    os.fsync(fd)
    hook("finish")
    ps = layout.page_size
    blocks: PageDigests = {}
    for b in _table_blocks(layout):
        size = min(ps, layout.file_size - b * ps)  # the last block ends with the file
        d = block_digest(pread_exact(fd, size, b * ps, str(files.partial)))
        blocks[b] = (d.crc32, d.sha256)
    first_page = layout.data_start // ps
    blocks |= {first_page + p: d for p, d in pages.items()}
    order = sorted(blocks)
    assert order == list(range(len(order))), "a block of the file has no digest"
    manifest.block_crc32 = Manifest.encode_crcs([blocks[b][0] for b in order])
    manifest.root_sha256 = root_digest(blocks[b][1] for b in order)
    if stats_fd is not None and manifest.stats is not None:
        pwrite_all(stats_fd, stats_header(manifest.root_sha256, layout.num_samples), 0)
        os.fsync(stats_fd)
        manifest.stats["sha256"] = hash_stats(files.stats_partial)
    else:
        manifest.stats = None
    manifest.save(files.sidecar_partial)
    # A stale sidecar must never sit next to the new file: drop it first.
    files.sidecar.unlink(missing_ok=True)
    files.stats.unlink(missing_ok=True)
    os.replace(files.partial, files.out)
    hook("rename")
    os.replace(files.sidecar_partial, files.sidecar)
    hook("stats")
    if manifest.stats is not None:
        os.replace(files.stats_partial, files.stats)
    fsync_dir(files.out)


def _matches(manifest_file: Path, files: Outputs, layout: AnyLayout, pages: PageDigests) -> bool:
    """Whether ``manifest_file`` describes the file this journal's run renamed to ``OUT``."""
    try:
        m = Manifest.load(manifest_file)
    except ValueError:
        return False
    if m.file_size != files.out.stat().st_size or m.num_samples != layout.num_samples:
        return False
    if len(pages) != layout.num_pages:
        return False
    crcs = m.crcs()
    first = layout.data_start // layout.page_size
    return all(crcs[first + p] == crc for p, (crc, _) in pages.items())


def complete_renames(files: Outputs, layout: AnyLayout, pages: PageDigests) -> bool:
    """Finish step 4 of a run killed after renaming ``OUT.partial``; False if it was not."""
    if not files.out.exists():
        return False
    if files.sidecar_partial.exists():
        if not _matches(files.sidecar_partial, files, layout, pages):
            return False
        os.replace(files.sidecar_partial, files.sidecar)
    elif not (files.sidecar.exists() and _matches(files.sidecar, files, layout, pages)):
        return False
    if files.stats_partial.exists():  # complete: written before OUT.json.partial
        os.replace(files.stats_partial, files.stats)
    fsync_dir(files.out)
    return True


def up_to_date(files: Outputs, fingerprint: dict[str, Any]) -> bool:
    """Whether ``OUT`` is a finished conversion with this fingerprint (its sidecar says so)."""
    try:
        m = Manifest.load(files.sidecar)
    except ValueError:
        return False
    return m.fingerprint == fingerprint and m.file_size == files.out.stat().st_size
