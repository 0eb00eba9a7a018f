"""The driver's proof that the tasks' ranges join up, record by record.

Every task proved its own first record boundary; here the boundaries are checked against
each other: within a file, the range that owns the record at position p must be the
one whose walk starts at p, and each range's walk must end exactly where the next range
begins its own. Where they disagree (a range that took a look-alike inside a record
body for a record, which its proof makes vanishingly unlikely but a crafted body could
do), the range is scanned again from the position the chain dictates. A range a single
record spans entirely owns nothing. A record cut by the end of a Hadoop split is read
by the driver (`read_spill`). The walk ends at each file's BLANK; the first invalid
record (or end of data) ends the whole CommitLog, as RocketMQ's recovery would cut it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spark.scan import ScanResult, Split, Stop


@dataclass
class FileEnd:
    """How the chain left one CommitLog file."""

    file_idx: int
    kind: str  # "blank", "full" (walked to its length), "end", "invalid", "skipped"
    pos: int  # file position where it ended (or file length)
    reason: str = ""


@dataclass
class Chain:
    """Which scan results make up the CommitLog, in order."""

    accepted: set[int] = field(default_factory=set)  # seg ids of task results
    extra: list[ScanResult] = field(default_factory=list)  # results made on the driver
    order: list[int] = field(default_factory=list)  # seg ids in CommitLog order
    ends: list[FileEnd] = field(default_factory=list)
    stop_file: int | None = None  # the file whose invalid record / early end stops all
    rescans: int = 0
    spills: int = 0

    @property
    def stop(self) -> FileEnd | None:
        return None if self.stop_file is None else self.ends[self.stop_file]


def assemble(
    splits: Sequence[Split],
    results: Sequence[ScanResult],
    rescan: Callable[[Split, int, int], ScanResult],
    read_spill: Callable[[Split, int, int], ScanResult],
    first_extra_id: int,
) -> Chain:
    """Join the results (one per split) into the chain of the CommitLog.

    rescan(split, start, seg_id) scans split from a known boundary; read_spill(split,
    pos, seg_id) reads the one record at pos that a split's buffer cut off.
    """
    by_id = {r.seg_id: r for r in results}
    files: dict[int, list[Split]] = {}
    for s in splits:
        files.setdefault(s.file_idx, []).append(s)
    chain = Chain()
    next_id = first_extra_id
    stopped = False
    for fi in sorted(files):
        fsplits = sorted(files[fi], key=lambda s: s.lo)
        file_len = fsplits[-1].hi
        if stopped:
            chain.ends.append(FileEnd(fi, "skipped", 0, "after the end of the data"))
            continue
        expected = 0
        end: FileEnd | None = None
        if file_len == 0:
            end = FileEnd(fi, "end", 0, "empty file")
        for s in fsplits:
            if end is not None or expected >= s.hi:
                continue  # past this file's BLANK, or inside one record
            r = by_id[s.split_id]
            if r.first == expected:
                chain.accepted.add(r.seg_id)
            else:
                r = rescan(s, expected, next_id)
                next_id += 1
                chain.extra.append(r)
                chain.rescans += 1
            chain.order.append(r.seg_id)
            while r.stop is not None and r.stop.kind == "spill":
                r = read_spill(s, r.stop.pos, next_id)
                next_id += 1
                chain.extra.append(r)
                chain.order.append(r.seg_id)
                chain.spills += 1
            st: Stop | None = r.stop
            if st is not None:
                end = FileEnd(fi, st.kind, st.pos, st.reason)
            else:
                assert r.next is not None
                expected = r.next
        if end is None:
            end = FileEnd(fi, "full", min(expected, file_len))
        chain.ends.append(end)
        if end.kind in ("end", "invalid"):
            stopped = True
            chain.stop_file = fi
    return chain
