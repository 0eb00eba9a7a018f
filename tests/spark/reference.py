"""Two ways to read a CommitLog without Spark, for checking the Spark job.

`reference_dispatch` is the obvious one: record after record from each file's start
with the broker's own check (check_message_and_return_size), as the broker's dispatch
and recovery would. `rebuild_in_process` is the job's own pipeline (byte ranges,
boundary proofs, the chain) run in one process: the two must agree for any split size.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from rmq.protocol.record import check_message_and_return_size
from rmq.store.index_codec import index_key_hash
from spark.chain import Chain, assemble
from spark.commitlog_files import check_files, list_local, make_splits
from spark.scan import ScanOptions, ScanResult, scan_local_split

Unit = tuple[int, int, int, int]  # queue offset, phy offset, size, tag code


@dataclass
class Dispatched:
    queues: dict[tuple[str, int], list[Unit]] = field(default_factory=lambda: defaultdict(list))
    keys: list[tuple[int, int, int]] = field(default_factory=list)  # hash, phy, store ts
    stop: tuple[str, int, int] | None = None  # kind, file index, position


def reference_dispatch(
    store: str, opts: ScanOptions, crc_all: bool = False, check_crc_on_recover: bool = True
) -> Dispatched:
    files, _size, _notes = check_files(list_local(store), store, None)
    out = Dispatched()
    n = len(files)
    for fi, f in enumerate(files):
        recovery = crc_all or fi >= n - 3
        crc = crc_all or (fi >= n - 3 and check_crc_on_recover)
        with open(f.path, "rb") as fh:
            data = fh.read()
        pos = 0
        while pos < len(data):
            if pos + 8 > len(data):
                out.stop = ("end", fi, pos)
                break
            size, req = check_message_and_return_size(data, pos, crc, opts.delay_levels_ms)
            if size == 0:
                break  # BLANK: next file
            if size > 0 and pos + size > len(data):
                out.stop = ("invalid", fi, pos)
                break
            if req is not None:
                if req.commit_log_offset != f.start + pos:
                    out.stop = ("invalid", fi, pos)
                    break
                want = opts.topics is None or req.topic in opts.topics
                tran = req.sys_flag & 0xC
                if want and tran in (0, 8):
                    out.queues[(req.topic, req.queue_id)].append(
                        (req.consume_queue_offset, req.commit_log_offset, req.msg_size, req.tags_code)
                    )
                if want and tran != 0xC:
                    ks = ([req.uniq_key] if req.uniq_key is not None else []) + [
                        k for k in (req.keys or "").split(" ") if k
                    ]
                    for k in ks:
                        out.keys.append(
                            (index_key_hash(f"{req.topic}#{k}"), req.commit_log_offset, req.store_timestamp)
                        )
                pos += size
            elif size > 0 and not recovery:
                pos += size  # dispatch skips it
            else:
                out.stop = ("end" if data[pos : pos + 8] == bytes(8) else "invalid", fi, pos)
                break
        if out.stop is not None:
            break
    return out


def rebuild_in_process(
    store: str, opts: ScanOptions, split_size: int, crc_all: bool = False, check_crc_on_recover: bool = True
) -> tuple[Dispatched, Chain]:
    files, size, _notes = check_files(list_local(store), store, None)
    splits = make_splits(files, size, split_size, crc_all, check_crc_on_recover)
    results = [scan_local_split(s, opts) for s in splits]

    def rescan(s, start, seg):
        return scan_local_split(s, opts, seg_id=seg, forced_start=start)

    def spill(s, pos, seg):
        raise AssertionError("no spills from local files")

    chain = assemble(splits, [r.summary() for r in results], rescan, spill, 1 << 62)
    full: dict[int, ScanResult] = {r.seg_id: r for r in results}
    full.update({r.seg_id: r for r in chain.extra})
    out = Dispatched()
    for seg in chain.order:
        r = full[seg]
        for k, rows in r.queues.items():
            out.queues[k].extend(
                zip(
                    rows["qoff"].tolist(),
                    rows["phy"].tolist(),
                    rows["size"].tolist(),
                    rows["tags"].tolist(),
                    strict=True,
                )
            )
        if r.index is not None:
            h, phy, ts = r.index
            out.keys.extend(zip(h.tolist(), phy.tolist(), ts.tolist(), strict=True))
    st = chain.stop
    if st is not None:
        out.stop = (st.kind, st.file_idx, st.pos)
    return out, chain


def cq_files(root: str) -> dict[str, bytes]:
    """relative path -> bytes of every ConsumeQueue file under root (a consumequeue/)."""
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def as_array(units: list[Unit]) -> np.ndarray:
    from spark.scan import UNIT_ROW

    a = np.empty(len(units), UNIT_ROW)
    if units:
        a["qoff"], a["phy"], a["size"], a["tags"] = zip(*units, strict=True)
    return a
