"""Finding the ``.pt`` files of several splits in one directory scan.

At the users' scale a folder holds millions of files, so :func:`scan` reads the
directory once (``os.scandir``) for every split and keeps one int64 per matching
file, never a table as large as the largest index: a stray name such as
``train_labels_99999999999.pt`` costs eight bytes and then one line of error.

Names: ``{split}_A_images_{i}.pt``, ``{split}_B_images_{i}.pt``,
``{split}_labels_{i}.pt``, any ``{split}_{name}_{i}.pt`` (an extra field; per-sample) and
``{split}_batch_{k}.pt`` (batched).
Indices may be zero-padded (``train_A_images_0000042.pt``) if every name of the
same split and kind has the same number of digits.
"""

from __future__ import annotations

import os
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._fileio import NotRegularFileError, regular_size
from .sources import SourceError

__all__ = ["PER_SAMPLE_KINDS", "FileFamily", "SplitFiles", "scan"]

PER_SAMPLE_KINDS = ("A_images", "B_images", "labels")
_BATCH = "batch"
_EXTRA = r"[A-Za-z_][A-Za-z0-9_]*?"  # {split}_{name}_{i}.pt: an extra field of per-sample files
_MAX_DIGITS = 18  # larger indices do not fit an int64: out of range for any folder
_SHOW = 5  # missing indices listed in an error


@dataclass
class _Digits:
    """The names of one family with one number of digits: counts and first examples."""

    first: str
    count: int = 0
    padded: int = 0  # names with a leading zero
    first_padded: str = ""
    first_plain: str = ""

    def add(self, name: str, padded: bool) -> None:
        self.count += 1
        if padded:
            self.padded += 1
            self.first_padded = self.first_padded or name
        else:
            self.first_plain = self.first_plain or name


@dataclass
class FileFamily:
    """The files of one split and kind: their indices and how the names are padded.

    Attributes:
        root: The directory.
        prefix: The name before the index, e.g. ``train_A_images_``.
        indices: One int64 per file found, in directory order.
        width: Digits of every index when zero-padded, else 0.
    """

    root: Path
    prefix: str
    indices: array = field(default_factory=lambda: array("q"))
    width: int = 0
    _tally: dict[int, _Digits] = field(default_factory=dict)  # by number of digits

    def name(self, i: int) -> str:
        return f"{self.prefix}{str(i).zfill(self.width)}.pt"

    def path(self, i: int) -> Path:
        return self.root / self.name(i)

    def add(self, digits: str, name: str) -> None:
        if len(digits) > _MAX_DIGITS:
            raise SourceError(f"{self.root / name}: index {digits} is out of range")
        tally = self._tally.get(len(digits))
        if tally is None:
            tally = self._tally[len(digits)] = _Digits(name)
        tally.add(name, padded=len(digits) > 1 and digits[0] == "0")
        self.indices.append(int(digits))

    def check_padding(self) -> None:
        """Every name is padded to one width, or none is (checked once all names are in).

        Sets ``width``. When names disagree, the convention most of them follow wins, and
        the error names a file that breaks it, its index, and a file that follows it.
        """
        tally, total = self._tally, len(self.indices)
        padded = [d for d, t in tally.items() if t.padded]
        if not padded:
            return
        width = max(padded, key=lambda d: (tally[d].count, d))
        if tally[width].count == total:
            self.width = width
            return
        plain = total - sum(tally[d].padded for d in padded)
        if plain > tally[width].count:  # most names are not padded: a padded one is odd
            digits = min(padded, key=lambda d: (tally[d].padded, d))
            odd = tally[digits].first_padded
            follow = f"{plain} of the {total} {self.prefix}*.pt files are not zero-padded"
            example = next(tally[d].first_plain for d in sorted(tally) if tally[d].first_plain)
        else:
            digits = min((d for d in tally if d != width), key=lambda d: (tally[d].count, d))
            odd = tally[digits].first
            follow = (
                f"{tally[width].count} of the {total} {self.prefix}*.pt files are zero-padded "
                f"to {width} digits"
            )
            example = tally[width].first_padded
        index = odd[len(self.prefix) : -len(".pt")]
        if len(index) > 1 and index[0] == "0":
            how = f"zero-padded to {digits} digits"
        else:
            how = f"not zero-padded ({digits} digit{'s' * (digits > 1)})"
        raise SourceError(
            f"{self.root / odd}: index {int(index)} is {how}, but {follow} "
            f"(e.g. {example}); padding must be consistent"
        )

    def as_array(self) -> np.ndarray:
        """The indices found, without a copy."""
        return np.frombuffer(self.indices, dtype=np.int64)


@dataclass
class SplitFiles:
    """What :func:`scan` found for one split."""

    root: Path
    split: str
    kinds: dict[str, FileFamily]

    @property
    def source_kinds(self) -> list[str]:
        """The kinds of source whose files were found: ``per-sample``, ``batched``."""
        found = []
        if any(k in self.kinds for k in PER_SAMPLE_KINDS):
            found.append("per-sample")
        if _BATCH in self.kinds:
            found.append("batched")
        return found

    @property
    def extra_kinds(self) -> list[str]:
        """Per-sample kinds beyond A, B and labels (extra fields), sorted by name."""
        return sorted(k for k in self.kinds if k not in (*PER_SAMPLE_KINDS, _BATCH))

    def family(self, kind: str) -> FileFamily:
        return self.kinds.get(kind) or FileFamily(self.root, f"{self.split}_{kind}_")

    def complete_count(self, kinds: tuple[str, ...], what: str) -> int:
        """The ``n`` for which every kind has exactly indices ``0..n-1``, or a SourceError.

        ``n`` is one past the largest index found, unless that index is at least twice
        the most files found of one kind: such a name is out of range (a stray), not
        the end of a range with half its files missing. Both errors name a file, as does
        inconsistent zero-padding (:meth:`FileFamily.check_padding`), and memory stays
        bounded by the number of files found.
        """
        families = [self.family(k) for k in kinds]
        for fam in families:
            fam.check_padding()
        most = max(len(f.indices) for f in families)
        if most == 0:
            raise SourceError(f"{self.root}: no {what} files for split {self.split!r}")
        top, fam = max(
            ((int(f.as_array().max()), f) for f in families if len(f.indices)),
            key=lambda pair: pair[0],
        )
        if top >= 2 * most:
            raise SourceError(
                f"{fam.path(top)}: index {top} is out of range: at most {most} {what} files "
                f"of each kind were found, so indices should stop at {most - 1}"
            )
        n = top + 1
        if all(len(f.indices) == n for f in families):
            return n  # n distinct indices below n (names are unique once padding is): 0..n-1
        missing: list[tuple[int, FileFamily]] = []
        total = 0
        for fam in families:
            gaps = np.setdiff1d(np.arange(n, dtype=np.int64), fam.as_array())
            total += len(gaps)
            missing += [(int(i), fam) for i in gaps[:_SHOW]]
        if total:
            missing.sort(key=lambda m: m[0])
            shown = ", ".join(f"{f.prefix}{i}" for i, f in missing[:_SHOW])
            more = ", ..." if total > _SHOW else ""
            raise SourceError(
                f"{missing[0][1].path(missing[0][0])}: missing; {total} {what} file(s) missing "
                f"in all ({shown}{more}); {what} files must cover indices 0..{n - 1} "
                f"for {', '.join(kinds)}"
            )
        return n


def _not_regular(path: str) -> SourceError:
    """The error for a matching name that is not a regular file (a FIFO, a device, ...)."""
    try:
        regular_size(path)
    except NotRegularFileError as e:
        return SourceError(str(e))
    except OSError as e:
        return SourceError(f"{path}: cannot be read ({e.strerror}; a broken symlink?)")
    return SourceError(f"{path}: was not a regular file when the directory was scanned")


def scan(
    root: str | os.PathLike[str], splits: list[str] | tuple[str, ...]
) -> dict[str, SplitFiles]:
    """One ``os.scandir`` pass over ``root`` for every split in ``splits``.

    Raises:
        SourceError: ``root`` is not a directory, a name has an index of more than
            18 digits, or a matching name is not a regular file (a FIFO, a device, a
            broken symlink; a symlink to a regular file is fine). Inconsistent
            zero-padding is found by :meth:`SplitFiles.complete_count`, once every name
            is in.
    """
    root = Path(root)
    if not root.is_dir():
        raise SourceError(f"{root}: not a directory")
    if not splits:
        raise ValueError("scan: give at least one split")
    alternatives = "|".join(re.escape(s) for s in sorted(set(splits), key=len, reverse=True))
    kinds = "|".join((*PER_SAMPLE_KINDS, _BATCH, _EXTRA))
    pattern = re.compile(rf"^({alternatives})_({kinds})_(\d+)\.pt$")
    found = {s: SplitFiles(root, s, {}) for s in splits}
    with os.scandir(root) as entries:
        for entry in entries:
            m = pattern.match(entry.name)
            if m is None:
                continue
            try:
                regular = entry.is_file()  # d_type alone, but a symlink is followed (stat)
            except OSError:  # a symlink loop (ELOOP): _not_regular names it
                regular = False
            if not regular:
                raise _not_regular(entry.path)
            split, kind, digits = m.groups()
            families = found[split].kinds
            fam = families.get(kind)
            if fam is None:
                fam = families[kind] = FileFamily(root, f"{split}_{kind}_")
            fam.add(digits, entry.name)
    return found
