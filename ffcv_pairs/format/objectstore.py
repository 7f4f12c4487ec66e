"""Files named by URL (``s3://``, ``gs://``, ``file://``, ``memory://``, any protocol the
installed fsspec knows), read and written through fsspec.

No client of our own: fsspec picks the implementation, and the ones that need another
package (``s3fs`` for ``s3://``, ``gcsfs`` for ``gs://``) are optional extras, imported
only when a URL of theirs is used. A missing one is one line naming the URL and what to
install. Credentials and endpoints come from the implementation's usual environment
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...).
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from ..errors import FfcvPairsError

__all__ = [
    "REMOTE_EXTRA",
    "StoreError",
    "is_url",
    "open_url",
    "path_or_url",
    "put_new",
    "read_range",
    "sibling",
]

#: What ``pip install`` needs for the object stores: ``ffcv-pairs[remote]``.
REMOTE_EXTRA = "ffcv-pairs[remote]"


class StoreError(FfcvPairsError, OSError):
    """An object store refused or failed a request; the message names the URL."""


def is_url(path: Any) -> bool:
    """Whether ``path`` is a URL with a protocol (``s3://b/x.json``), not a local path."""
    return isinstance(path, str) and "://" in path and not path.startswith("/")


def path_or_url(text: str) -> Any:
    """A command's file argument: a URL as it is (``Path`` would fold its ``//``), else a
    local :class:`~pathlib.Path`."""
    from pathlib import Path

    return text if is_url(text) else Path(text)


def open_url(url: str) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path in it.

    Raises:
        ValueError: a protocol fsspec does not know, or whose package is not installed
            (naming the URL and what to install).
    """
    try:
        import fsspec
    except ImportError:
        raise ValueError(
            f"{url}: reading URLs needs fsspec; pip install '{REMOTE_EXTRA}'"
        ) from None
    protocol = url.split("://", 1)[0]
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as e:
        raise ValueError(
            f"{url}: {protocol}:// needs a package that is not installed ({e}); "
            f"pip install '{REMOTE_EXTRA}'"
        ) from None
    except ValueError as e:
        raise ValueError(f"{url}: {e}") from None


def sibling(path: str, relative: str) -> str:
    """``relative`` (POSIX separators, no ``..``) resolved against the folder of ``path``,
    in the store's path space.

    Raises:
        ValueError: ``relative`` climbs out of the folder.
    """
    parts = relative.split("/")
    if ".." in parts or relative.startswith("/"):
        raise ValueError(f"{relative!r}: a remote dataset's shards lie under its manifest's folder")
    return posixpath.join(posixpath.dirname(path), relative)


def read_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of ``path`` (a ranged GET on an object store).

    Raises:
        StoreError: the store failed, or sent fewer bytes than asked.
    """
    try:
        data = fs.cat_file(path, start=start, end=end)
    except Exception as e:  # each store's client raises its own kinds (botocore's too)
        raise StoreError(f"{fs.unstrip_protocol(path)}: reading bytes {start}-{end}: {e}") from e
    if len(data) != end - start:
        raise StoreError(
            f"{fs.unstrip_protocol(path)}: bytes {start}-{end} came back as {len(data)} bytes: "
            f"the object is shorter than its manifest says"
        )
    return bytes(data)


def put_new(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` only if nothing is there yet: a conditional put
    (``If-None-Match: *``) on S3; exclusive creation on a local file system.

    Raises:
        FileExistsError: ``path`` exists (naming it).
        StoreError: the store failed.
    """
    where = fs.unstrip_protocol(path)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    try:
        if protocol in ("file", "local"):
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # atomic, and refuses an existing name
            finally:
                os.unlink(tmp)
        elif protocol in ("s3", "s3a"):
            fs.pipe_file(path, data, IfNoneMatch="*")
        else:
            if fs.exists(path):
                raise FileExistsError(path)
            fs.pipe_file(path, data)
    except FileExistsError:
        raise FileExistsError(f"{where} already exists; nothing was written over it") from None
    except Exception as e:  # each store's client raises its own kinds (botocore's too)
        raise StoreError(f"{where}: writing it: {e}") from e
