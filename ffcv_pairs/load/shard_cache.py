"""A node's cache of a remote dataset's shards, shared by the node's ranks through files.

One folder per dataset (under ``cache_dir``, named by the manifest's URL and digest) holds
``data/<k>.beton`` for each shard ``k`` present, and ``locks/``. Every rank of the node
(and every job that uses the same ``cache_dir``) works on the same files; what keeps them
apart is ``flock``, which the kernel drops when a process dies, so a killed rank leaves no
lock behind and nothing to clean:

* ``locks/<k>.fetch``, held exclusively while shard ``k`` is downloaded: a shard is
  fetched once per node however many ranks want it. The download goes to
  ``data/<k>.partial`` (overwritten by whoever fetches next, so a download cut short by
  SIGKILL is simply redone), is checked against the manifest entry (bytes, and the
  sidecar's whole-file digest, computed as the bytes arrive), and only then renamed to
  ``data/<k>.beton``. A download that does not match is refused by name and fetched
  again, up to :data:`ATTEMPTS` times.
* ``locks/<k>.use``, held shared by every rank that has shard ``k`` mapped: the per-node
  count of mappings, kept by the kernel. A shard is evicted only under an exclusive lock
  of it, taken without waiting, so a mapped shard is never evicted.
* ``locks/evict``, held while space is counted and made: every shard in ``data/`` counts,
  partial downloads too (their space is reserved with ``fallocate`` before they start), at
  the bytes it holds (:attr:`ShardCache.held`: a download is put together from the shard's
  skeleton and ranged reads of its samples and allocation table, :class:`Assembly`; the
  rest of the file is a hole).

Eviction is Belady's (:func:`~.cache_plan.choose_victims`) over the next uses the caller
gives; a shard whose remote copy is gone is never evicted.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FfcvPairsError
from ..format.objectstore import read_range
from ..format.reader import BetonError
from ..format.shards import ShardEntry
from .cache_plan import choose_victims

__all__ = ["ATTEMPTS", "Assembly", "CacheFullError", "ShardCache", "flocked"]

log = logging.getLogger(__name__)

#: Downloads of one shard before a mismatch is an error.
ATTEMPTS = 3
#: How long a fetch waits for ranks to release mapped shards before it gives up.
ROOM_WAIT_S = 300.0


class CacheFullError(FfcvPairsError, ValueError):
    """The cache cannot make room for a shard: everything it holds is mapped by a rank."""


@contextlib.contextmanager
def flocked(path: Path, exclusive: bool = True, wait: bool = True) -> Iterator[int | None]:
    """``flock`` on ``path`` (created if missing), released on leaving; yields the
    descriptor, or None when ``wait`` is False and another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        how = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Assembly:
    """How a shard's download is put together from fewer bytes than the whole object: the
    ``kept`` byte ranges ``[start, end)`` are copied from ``skeleton`` (a local sparse
    file of the shard's size, already checked), the ``fetched`` ones are ranged reads of
    the remote object, and every other byte is zero (as the writer leaves the rest of the
    header's page and of the last data page). The result is checked whole, as a full
    download is: a shard whose other bytes are not zeros fails its digest and is fetched
    again, whole."""

    skeleton: Path
    kept: tuple[tuple[int, int], ...]
    fetched: tuple[tuple[int, int], ...]


@dataclass
class ShardCache:
    """The on-disk cache of one remote dataset on one node (see the module docstring).

    Attributes:
        root: The dataset's folder under ``cache_dir``.
        fs: Its fsspec file system.
        remote: Each shard's path in ``fs``.
        entries: Each shard's manifest entry.
        limit: Bytes the cache may hold (None: no limit).
        assembly: Each shard's :class:`Assembly` (None: shards are downloaded whole). Its
            first download is put together so; a retry downloads the whole object.
    """

    root: Path
    fs: Any
    remote: list[str]
    entries: list[ShardEntry]
    limit: int | None
    assembly: list[Assembly] | None = None

    def __post_init__(self) -> None:
        for folder in ("data", "locks"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)

    def local(self, k: int) -> Path:
        """Where shard ``k`` lies once fetched."""
        return self.root / "data" / f"{k:06d}.beton"

    def lock(self, k: int, kind: str) -> Path:
        return self.root / "locks" / f"{k:06d}.{kind}"

    def url(self, k: int) -> str:
        return str(self.fs.unstrip_protocol(self.remote[k]))

    def present(self, k: int) -> bool:
        return self.local(k).exists()

    @property
    def held(self) -> list[int]:
        """Bytes each shard takes in the cache, what the limit counts: the bytes its
        :class:`Assembly` writes (the rest of the file is a hole), or its size."""
        if self.assembly is None:
            return [e.bytes for e in self.entries]
        return [sum(end - start for start, end in (*a.kept, *a.fetched)) for a in self.assembly]

    def cached(self) -> dict[int, int]:
        """Shard -> bytes held (:attr:`held`), of the shards present."""
        held, out = self.held, {}
        for path in (self.root / "data").glob("*.beton"):
            with contextlib.suppress(ValueError, IndexError):
                if path.exists():
                    out[int(path.stem)] = held[int(path.stem)]
        return out

    def used(self) -> int:
        """Bytes in the cache (:attr:`held`), partial downloads (their reservations)
        included."""
        held, total = self.held, 0
        for path in (self.root / "data").iterdir():
            try:
                total += held[int(path.name.split(".")[0])]
            except (ValueError, IndexError):  # not a shard's file: counted as it is
                with contextlib.suppress(FileNotFoundError):
                    total += path.stat().st_size
        return total

    # -- fetching ------------------------------------------------------------------------
    def fetch(self, k: int, uses: np.ndarray, ahead: bool = False) -> bool:
        """Make shard ``k`` present, downloading it if no rank of the node has.

        Args:
            k: The shard.
            uses: Each shard's next use in the node's plan (:func:`~.cache_plan.next_uses`).
            ahead: A fetch ahead of need: only evicts shards used later than ``k``, and
                returns False instead of waiting when there are none.

        Raises:
            BetonError: every attempt downloaded bytes that do not match the manifest.
            CacheFullError: no room within :data:`ROOM_WAIT_S` (every shard mapped).
        """
        if self.present(k):
            return True
        with flocked(self.lock(k, "fetch")):
            if self.present(k):
                return True
            # A killed fetcher's partial download: not to be counted as room taken.
            (self.root / "data" / f"{k:06d}.partial").unlink(missing_ok=True)
            problems = []
            for attempt in range(ATTEMPTS):
                partial = self._make_room(k, uses, ahead)
                if partial is None:
                    return False
                problem = self._download(k, partial, assemble=attempt == 0)
                if problem is None:
                    os.replace(partial, self.local(k))
                    return True
                partial.unlink(missing_ok=True)
                log.warning("%s: download refused: %s; fetching it again", self.url(k), problem)
                problems.append(problem)
            raise BetonError(
                f"{self.url(k)}: {ATTEMPTS} downloads failed or did not match the manifest "
                f"entry (last: {problems[-1]}); nothing of it was used"
            )

    def _download(self, k: int, partial: Path, assemble: bool = True) -> str | None:
        """Stream shard ``k`` into ``partial`` (put together by its :class:`Assembly` when
        ``assemble`` and it has one, else the whole object): None when its bytes and
        digest match the manifest entry, else what differs."""
        if assemble and self.assembly is not None:
            return self._assemble(k, partial, self.assembly[k])
        entry = self.entries[k]
        kind, _, want = entry.digest.partition(":")
        block = int(entry.page_size)
        whole, tops, size = hashlib.sha256(), hashlib.sha256(), 0
        fd = os.open(partial, os.O_WRONLY)
        try:
            with self.fs.open(self.remote[k], "rb", block_size=block) as f:
                while chunk := _read_block(f, block):
                    os.pwrite(fd, chunk, size)
                    size += len(chunk)
                    whole.update(chunk)
                    tops.update(hashlib.sha256(chunk).digest())
                    if size > entry.bytes:
                        break
            os.fsync(fd)
        except Exception as e:  # each store's client raises its own kinds (botocore's too)
            return f"the download failed ({type(e).__name__}: {e})"
        finally:
            os.close(fd)
        if size != entry.bytes:
            return f"{size} bytes arrived, the manifest lists {entry.bytes}"
        got = (whole if kind == "sha256" else tops).hexdigest()
        if got != want:
            return f"digest {kind}:{got[:16]}.. differs from the manifest's {want[:16]}.."
        return None

    def _assemble(self, k: int, partial: Path, how: Assembly) -> str | None:
        """Put shard ``k`` together in ``partial`` as ``how`` says, then check it as
        :meth:`_download` does: None when its size and digest match the manifest entry,
        else what differs."""
        entry = self.entries[k]
        block = int(entry.page_size)
        fd = os.open(partial, os.O_RDWR)
        try:
            with open(how.skeleton, "rb") as skeleton:
                for start, end in how.kept:
                    skeleton.seek(start)
                    os.pwrite(fd, skeleton.read(end - start), start)
            for start, end in how.fetched:
                for at in range(start, end, block):
                    stop = min(end, at + block)
                    os.pwrite(fd, read_range(self.fs, self.remote[k], at, stop), at)
            os.fsync(fd)
            return _check_whole(fd, entry)
        except Exception as e:  # each store's client raises its own kinds (botocore's too)
            return f"the download failed ({type(e).__name__}: {e})"
        finally:
            os.close(fd)

    # -- eviction ------------------------------------------------------------------------
    def _make_room(self, k: int, uses: np.ndarray, ahead: bool) -> Path | None:
        """Evict until shard ``k`` fits, then reserve its bytes as ``data/<k>.partial``."""
        need = self.held[k]
        deadline = time.monotonic() + ROOM_WAIT_S
        while True:
            with flocked(self.root / "locks" / "evict"):
                if self._evict_for(k, need, uses, ahead):
                    partial = self.root / "data" / f"{k:06d}.partial"
                    how = None if self.assembly is None else self.assembly[k]
                    held = None if how is None else (*how.kept, *how.fetched)
                    with open(partial, "wb") as f:
                        _reserve(f.fileno(), self.entries[k].bytes, partial, held)
                    return partial
            if ahead:
                return None
            if time.monotonic() > deadline:
                raise CacheFullError(
                    f"{self.url(k)}: cache_limit {self.limit} bytes cannot take its {need} bytes: "
                    f"for {ROOM_WAIT_S:.0f} s every cached shard was mapped by a rank; raise "
                    f"cache_limit"
                )
            time.sleep(0.05)

    def _evict_for(self, k: int, need: int, uses: np.ndarray, ahead: bool) -> bool:
        """Evict shards (under the evict lock) so ``need`` more bytes fit; False if they
        cannot now."""
        if self.limit is None:
            return True
        self._drop_stale_partials()
        cached = self.cached()
        cached.pop(k, None)
        pinned = {j for j in cached if ahead and uses[j] <= uses[k]}
        while True:
            free = self.limit - self.used()
            victims = choose_victims(cached, pinned, free, need, uses)
            if victims is None:
                return False
            if not victims:
                return True
            for j in victims:
                if not self._evict(j):
                    pinned.add(j)
                    break

    def _drop_stale_partials(self) -> None:
        """Delete the partial downloads nobody is fetching (left by a killed process)."""
        for path in (self.root / "data").glob("*.partial"):
            with (
                contextlib.suppress(ValueError),
                flocked(self.lock(int(path.stem), "fetch"), wait=False) as held,
            ):
                if held is not None:
                    path.unlink(missing_ok=True)

    def _evict(self, j: int) -> bool:
        """Delete shard ``j`` unless a rank has it mapped or its remote copy is gone."""
        with flocked(self.lock(j, "use"), wait=False) as held:
            if held is None:
                return False
            if not self._remote_intact(j):
                log.warning("%s: not evicted: its remote copy is missing or changed", self.url(j))
                return False
            self.local(j).unlink(missing_ok=True)
            return True

    def _remote_intact(self, j: int) -> bool:
        try:
            return int(self.fs.size(self.remote[j])) == self.entries[j].bytes
        except Exception:  # unreachable or gone: kept, as if it had no remote copy
            return False


def _check_whole(fd: int, entry: ShardEntry) -> str | None:
    """``fd``'s bytes against ``entry``: None when its size and digest match, else what
    differs."""
    kind, _, want = entry.digest.partition(":")
    block = int(entry.page_size)
    size = os.fstat(fd).st_size
    if size != entry.bytes:
        return f"{size} bytes put together, the manifest lists {entry.bytes}"
    whole, tops = hashlib.sha256(), hashlib.sha256()
    for at in range(0, size, block):
        chunk = os.pread(fd, min(block, size - at), at)
        whole.update(chunk)
        tops.update(hashlib.sha256(chunk).digest())
    got = (whole if kind == "sha256" else tops).hexdigest()
    if got != want:
        return f"digest {kind}:{got[:16]}.. differs from the manifest's {want[:16]}.."
    return None


def _read_block(f: Any, size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at the end of the object."""
    parts, got = [], 0
    while got < size:
        part = f.read(size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _reserve(
    fd: int, size: int, path: Path, held: tuple[tuple[int, int], ...] | None = None
) -> None:
    """Make ``fd`` ``size`` bytes long, with disk space for the ``held`` byte ranges (all
    of it when None); the rest stays a hole until written."""
    try:
        os.ftruncate(fd, size)
        for start, end in held if held is not None else ((0, size),):
            if end > start:
                os.posix_fallocate(fd, start, end - start)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise OSError(e.errno, f"{path}: no room on the cache disk for {size} bytes") from None
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)
