"""The CommitLog files of a store, checked the way RocketMQ checks them on load, and cut
into the byte ranges the tasks scan (driver side; pure apart from listing a directory)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from spark.scan import Split


class RebuildError(Exception):
    """Bad input to the rebuild: the message says what and where, in one line."""


@dataclass(frozen=True)
class CommitLogFile:
    name: str
    path: str  # local path or Hadoop URI
    start: int  # absolute offset of its first byte (= its name)
    length: int  # bytes on disk


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'128m', '1g', '64k', '4096' -> bytes (powers of 1024)."""
    m = _SIZE.match(text)
    if not m:
        raise RebuildError(f"not a size: {text!r} (examples: 128m, 1g, 64k, 4096)")
    n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if n <= 0:
        raise RebuildError(f"size must be positive: {text!r}")
    return n


def list_local(store: str) -> list[tuple[str, str, int]]:
    """(name, path, length) of every entry of STORE/commitlog (clear errors if absent)."""
    if not os.path.exists(store):
        raise RebuildError(f"store directory {store} does not exist")
    if not os.path.isdir(store):
        raise RebuildError(f"store path {store} is not a directory")
    d = os.path.join(store, "commitlog")
    if not os.path.isdir(d):
        raise RebuildError(f"{store} has no CommitLog: {d} does not exist")
    out = []
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            out.append((name, p, os.path.getsize(p)))
    return out


def check_files(
    entries: Sequence[tuple[str, str, int]], where: str, configured_size: int | None
) -> tuple[list[CommitLogFile], int, list[str]]:
    """The CommitLog files in order, the file size, and notes (ignored names, a short
    last file). RebuildError when RocketMQ could not load them either: no files, a file
    of another size than the others (only the last may be shorter: the tail of a copy or
    a cut), names that are not consecutive multiples of the file size."""
    notes: list[str] = []
    files: list[CommitLogFile] = []
    for name, path, length in entries:
        if len(name) == 20 and name.isdigit():
            files.append(CommitLogFile(name, path, int(name), length))
        else:
            notes.append(f"ignored {path}: not a 20-digit CommitLog file name")
    if not files:
        raise RebuildError(f"{where} has no CommitLog files (20-digit names)")
    files.sort(key=lambda f: f.start)
    if configured_size is not None:
        size = configured_size
        src = f"mappedFileSizeCommitLog = {size} (from the broker config)"
    elif len(files) > 1:
        size = files[0].length
        src = f"{size} bytes, the size of {files[0].name}"
    else:
        size = max(files[0].length, 1)
        src = f"{size} bytes, the size of the only file"
    for i, f in enumerate(files):
        last = i == len(files) - 1
        if f.length > size or (not last and f.length != size):
            sizes = ", ".join(f"{g.name}: {g.length}" for g in files[:8])
            more = f" ... ({len(files)} files)" if len(files) > 8 else ""
            raise RebuildError(
                f"CommitLog files in {where} have inconsistent sizes: {f.name} is {f.length} "
                f"bytes, expected {src} (only the last file may be shorter) [{sizes}{more}]"
            )
        if f.start % size:
            raise RebuildError(f"CommitLog file {f.path}: name {f.name} is not a multiple of the file size {size}")
        if i and f.start != files[i - 1].start + size:
            raise RebuildError(
                f"CommitLog files in {where} are not contiguous: {files[i - 1].name} is "
                f"followed by {f.name} (expected {files[i - 1].start + size:020d})"
            )
    if files[-1].length < size:
        notes.append(
            f"the last CommitLog file {files[-1].name} is {files[-1].length} bytes, "
            f"shorter than {size}: read to its end"
        )
    return files, size, notes


def make_splits(
    files: Sequence[CommitLogFile], file_size: int, split_size: int, crc_all: bool, check_crc_on_recover: bool
) -> list[Split]:
    """Byte ranges of at most split_size, never across a file boundary.

    CRC: RocketMQ's recovery checks records of the last three files (with
    checkCRCOnRecover) and cuts the CommitLog at the first bad one; crc_all checks
    every record. Files before the last three get the dispatch rules (a record whose
    fields do not add up is skipped, as the broker's dispatch skips it).
    """
    out: list[Split] = []
    n = len(files)
    for i, f in enumerate(files):
        recovery = i >= n - 3
        crc = crc_all or (recovery and check_crc_on_recover)
        lo = 0
        while True:
            hi = min(lo + split_size, f.length)
            out.append(Split(len(out), i, f.path, f.start, f.length, file_size, lo, hi, crc, recovery or crc_all))
            lo = hi
            if lo >= f.length:
                break
    return out
