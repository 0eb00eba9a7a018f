"""`rmq store-check DIR`: walk a store read-only and report what it holds.

Validates every CommitLog record (CRC, length, PHYSICALOFFSET) with the shared record
check and compares every ConsumeQueue unit with the record it points at. Works on
stores written by rmq and by RocketMQ 4.x.
"""

from __future__ import annotations

import collections
import os
import struct
import sys

from rmq.protocol.record import check_message_and_return_size, diagnose_record
from rmq.store.config import DEFAULT_DELAY_LEVELS, parse_delay_levels

_UNIT = struct.Struct(">qiq")


def _file_size(d: str, names: list[str], given: int | None) -> int:
    if given:
        return given
    sizes = {os.path.getsize(os.path.join(d, n)) for n in names}
    if len(sizes) != 1:
        raise SystemExit(f"{d}: files of different sizes {sorted(sizes)}; pass the size explicitly")
    return sizes.pop()


def run_store_check(root: str, commitlog_size: int | None, cq_size: int | None) -> int:
    cl_dir = os.path.join(root, "commitlog")
    if not os.path.isdir(cl_dir):
        print(f"rmq store-check: {root} has no commitlog/ directory", file=sys.stderr)
        return 2
    names = sorted(n for n in os.listdir(cl_dir) if n.isdigit())
    if not names:
        print(f"rmq store-check: {cl_dir} holds no CommitLog files", file=sys.stderr)
        return 2
    size = _file_size(cl_dir, names, commitlog_size)
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    records: dict[int, tuple[str, int, int, int, int]] = {}
    per_queue: collections.Counter[tuple[str, int]] = collections.Counter()
    problems = 0
    for n in names:
        base = int(n)
        with open(os.path.join(cl_dir, n), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 8 <= len(data):
            rsize, req = check_message_and_return_size(data, pos, True, levels)
            if req is None:
                if rsize == 0:
                    break
                why = diagnose_record(data, pos, True)
                if not why.startswith("end of data"):
                    print(f"  {n}: invalid record at offset {base + pos}: {why}")
                    problems += 1
                break
            if req.commit_log_offset != base + pos:
                print(f"  record at {base + pos} says PHYSICALOFFSET {req.commit_log_offset}")
                problems += 1
            records[base + pos] = (req.topic, req.queue_id, req.consume_queue_offset, req.msg_size, req.tags_code)
            per_queue[(req.topic, req.queue_id)] += 1
            pos += rsize
    print(f"CommitLog: {len(names)} file(s) of {size} bytes, {len(records)} records, {len(per_queue)} topic-queue(s)")
    cq_root = os.path.join(root, "consumequeue")
    units = 0
    if os.path.isdir(cq_root):
        for topic in sorted(os.listdir(cq_root)):
            for q in sorted(os.listdir(os.path.join(cq_root, topic)), key=lambda s: int(s) if s.isdigit() else -1):
                qdir = os.path.join(cq_root, topic, q)
                qnames = sorted(os.listdir(qdir))
                for qn in qnames:
                    with open(os.path.join(qdir, qn), "rb") as f:
                        data = f.read()
                    for i in range(0, len(data) - 19, 20):
                        off, sz, tag = _UNIT.unpack_from(data, i)
                        if sz == 0 and off == 0:
                            break
                        if sz == 0x7FFFFFFF:
                            continue
                        units += 1
                        r = records.get(off)
                        if r is None or (r[0], r[1], r[3], r[4]) != (topic, int(q), sz, tag):
                            print(f"  {topic}/{q}/{qn} unit {i // 20}: ({off}, {sz}, {tag}) does not match record {r}")
                            problems += 1
                            continue
                        expect_q = int(qn) // 20 + i // 20
                        if r[2] != expect_q:
                            print(f"  {topic}/{q}: unit {expect_q} points at queue offset {r[2]}")
                            problems += 1
    print(f"ConsumeQueues: {units} units checked")
    for (topic, qid), count in sorted(per_queue.items())[:50]:
        print(f"  {topic:<40} queue {qid:<3} {count} records")
    print("OK" if not problems else f"{problems} problem(s)")
    return 0 if not problems else 1
