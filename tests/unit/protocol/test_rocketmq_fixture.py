"""Our codec against a store written by the real Apache RocketMQ 4.9.8 broker.

The fixture (see /work/shared/fixtures/README.md): 2000 messages from the official C++
client 2.1.0 to one topic ``InteropCpp…`` with 4 queues, three 1 MiB CommitLog files,
RocketMQ's own ConsumeQueues. Everything asserted here was written by Java, not by us.
"""

from __future__ import annotations

import calendar
import struct
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MessageExt,
    SysFlag,
    UniqueIdGenerator,
    create_message_id,
    decode_message_id,
    decode_record,
    decode_records,
    read_record_head,
    record_length,
    string_to_properties,
    tags_string_to_tags_code,
    unpack_host,
)

COMMITLOG_FILE_SIZE = 1 << 20  # mappedFileSizeCommitLog=1048576
CQ_FILE_SIZE = 300_000 * 20  # default ConsumeQueue file
CQ_UNIT = struct.Struct(">qiq")  # phys offset, size, tag code
N_MESSAGES = 2000
BODY_SIZES = {1, 100, 1024, 4000, 8192}


@dataclass
class Walked:
    messages: list[MessageExt]  # commit-log order, bodies inflated
    raw_bodies: dict[int, bytes]  # phys offset -> body as stored
    raw_props: dict[int, bytes]  # phys offset -> properties bytes as stored
    by_offset: dict[int, MessageExt]
    files: list[tuple[int, int, str]]  # (start offset, data end, how it ends)
    blanks: list[tuple[int, int]]  # (absolute position, declared size)
    first_record_size: dict[int, int]  # file start offset -> size of its first record


def _props_bytes(data: bytes, pos: int) -> bytes:
    head = read_record_head(data, pos)
    # body starts after: 48 fixed bytes, born host, store time, store host,
    # reconsume times, prepared offset, body length
    p = pos + 48 + len(head.born_host) + 8 + len(head.store_host) + 4 + 8 + 4 + head.body_len
    topic_len = data[p]
    p += 1 + topic_len
    (plen,) = struct.unpack_from(">h", data, p)
    return data[p + 2 : p + 2 + plen]


def walk_commitlog(store: Path) -> Walked:
    files = sorted((store / "commitlog").iterdir())
    assert files, "no commit-log files"
    messages: list[MessageExt] = []
    raw_bodies: dict[int, bytes] = {}
    raw_props: dict[int, bytes] = {}
    file_info: list[tuple[int, int, str]] = []
    blanks: list[tuple[int, int]] = []
    first_size: dict[int, int] = {}
    for i, f in enumerate(files):
        assert len(f.name) == 20 and f.name.isdigit()
        base = int(f.name)
        assert base == i * COMMITLOG_FILE_SIZE, "file names are consecutive 1 MiB offsets"
        data = f.read_bytes()
        assert len(data) == COMMITLOG_FILE_SIZE
        pos = 0
        while True:
            if pos == len(data):
                file_info.append((base, pos, "full"))
                break
            assert pos + 8 <= len(data), f"{f.name}: {len(data) - pos} stray bytes at {pos}"
            size, magic = struct.unpack_from(">ii", data, pos)
            if magic == BLANK_MAGIC_CODE:
                blanks.append((base + pos, size))
                # the BLANK size is the remaining space: it reaches exactly the file end
                assert pos + size == len(data), f"{f.name}: BLANK at {pos} size {size}"
                assert size >= 8
                assert not any(data[pos + 8 :]), "blank region of a fresh file is zeros"
                with pytest.raises(ProtocolError):
                    read_record_head(data, pos)
                with pytest.raises(ProtocolError):
                    decode_record(data, pos)
                file_info.append((base, pos, "blank"))
                break
            if size == 0 and magic == 0:
                assert not any(data[pos:]), f"{f.name}: data after the write position"
                file_info.append((base, pos, "zeros"))
                break
            assert magic == MESSAGE_MAGIC_CODE, f"{f.name}: magic {magic:#x} at {pos}"
            head = read_record_head(data, pos)
            assert head.total_size == size
            assert pos + size <= len(data), "a record never spans two files"
            m = decode_record(data, pos, check_crc=True, decompress=True)
            stored = decode_record(data, pos, check_crc=True)
            assert m.store_size == size
            assert size == record_length(
                m.sys_flag, head.body_len, len(m.topic.encode("utf-8")), len(_props_bytes(data, pos))
            )
            assert m.commit_log_offset == base + pos, "PHYSICALOFFSET = absolute position"
            assert head.physical_offset == base + pos
            if pos == 0:
                first_size[base] = size
            messages.append(m)
            raw_bodies[base + pos] = stored.body
            raw_props[base + pos] = _props_bytes(data, pos)
            pos += size
    by_offset = {m.commit_log_offset: m for m in messages}
    return Walked(messages, raw_bodies, raw_props, by_offset, file_info, blanks, first_size)


@pytest.fixture(scope="module")
def walked(rocketmq_store_pristine: Path) -> Walked:
    return walk_commitlog(rocketmq_store_pristine)


@pytest.fixture(scope="module")
def topic(walked: Walked) -> str:
    topics = {m.topic for m in walked.messages}
    assert len(topics) == 1
    (t,) = topics
    return t


# ---------------------------------------------------------------------------
# CommitLog
# ---------------------------------------------------------------------------
def test_commitlog_files_and_rolls(walked: Walked):
    assert len(walked.files) == 3
    # every file but the last is ended by a BLANK record; the last ends at the write
    # position with nothing but zeros after it
    assert [how for _, _, how in walked.files] == ["blank", "blank", "zeros"]
    assert len(walked.blanks) == 2
    for (blank_pos, blank_size), (base, _, _) in zip(walked.blanks, walked.files[1:], strict=True):
        assert blank_pos + blank_size == base
        # spec 3.7: the roll happened because the next record plus 8 did not fit
        assert walked.first_record_size[base] + 8 > blank_size
    last_base, last_end, _ = walked.files[-1]
    last = walked.messages[-1]
    assert last.commit_log_offset + last.store_size == last_base + last_end


def test_records_are_contiguous(walked: Walked):
    expected = 0
    blank_at = dict(walked.blanks)
    for m in walked.messages:
        if expected in blank_at:
            expected += blank_at[expected]
        assert m.commit_log_offset == expected
        expected += m.store_size


def test_exactly_2000_messages_one_topic_four_queues(walked: Walked, topic: str):
    assert len(walked.messages) == N_MESSAGES
    assert topic.startswith("InteropCpp")
    assert {m.queue_id for m in walked.messages} == {0, 1, 2, 3}
    assert sum(Counter(m.queue_id for m in walked.messages).values()) == N_MESSAGES


def test_queue_offsets_consecutive_per_queue(walked: Walked):
    next_offset: dict[int, int] = defaultdict(int)
    for m in walked.messages:
        assert m.queue_offset == next_offset[m.queue_id]
        next_offset[m.queue_id] += 1
    assert sum(next_offset.values()) == N_MESSAGES


def test_fixed_fields(walked: Walked):
    store_hosts = {m.store_host for m in walked.messages}
    assert len(store_hosts) == 1
    for m in walked.messages:
        assert len(m.born_host) == 8 and len(m.store_host) == 8  # IPv4 only
        assert m.sys_flag & (SysFlag.BORNHOST_V6 | SysFlag.STOREHOSTADDRESS_V6) == 0
        assert m.flag == 0 and m.reconsume_times == 0 and m.prepared_transaction_offset == 0
        assert m.born_host_str.startswith("127.0.0.1:")
        assert m.store_host_str.startswith("127.0.0.1:")
    # store time is stamped under the put lock: never decreases in log order
    ts = [m.store_timestamp for m in walked.messages]
    assert ts == sorted(ts)
    assert all(m.store_timestamp >= m.born_timestamp for m in walked.messages)


def test_sysflags_seen(walked: Walked):
    # only NOT_TYPE transactions, IPv4 hosts; COMPRESSED (zlib, type bits 0) on big bodies
    assert {m.sys_flag for m in walked.messages} == {0, SysFlag.COMPRESSED}


def test_properties_tags_keys_user_props(walked: Walked):
    idxs = []
    for m in walked.messages:
        p = m.properties
        # what the C++ client sent plus the broker's CLUSTER; the broker strips WAIT
        assert set(p) == {"KEYS", "TAGS", "UNIQ_KEY", "idx", "uprop", "CLUSTER"}
        idx = int(p["idx"])
        idxs.append(idx)
        assert p["TAGS"] in {"Tag0", "Tag1", "Tag2"}
        assert p["TAGS"] == f"Tag{idx % 3}"
        assert p["KEYS"] == f"key-{idx} key2-{idx}"
        assert p["KEYS"].split(" ") == [f"key-{idx}", f"key2-{idx}"]
        assert p["uprop"] == f"v-{idx}"
        assert p["CLUSTER"]
    assert sorted(idxs) == list(range(N_MESSAGES))
    assert Counter(m.tags for m in walked.messages) == {"Tag0": 667, "Tag1": 667, "Tag2": 666}


def test_properties_string_as_stored(walked: Walked):
    # RocketMQ 4.9.8 stored these properties strings WITHOUT a trailing \x02
    # separator; the parser must tolerate it (spec 3.4), and does.
    for off, raw in walked.raw_props.items():
        s = raw.decode("utf-8")
        assert not s.endswith("\x02")
        assert s.count("\x02") == 5 and s.count("\x01") == 6
        assert string_to_properties(s) == walked.by_offset[off].properties


def test_bodies_and_compression(walked: Walked):
    sizes = Counter(len(m.body) for m in walked.messages)
    assert sizes == {n: 400 for n in BODY_SIZES}
    for m in walked.messages:
        raw = walked.raw_bodies[m.commit_log_offset]
        assert m.body_crc == zlib.crc32(raw) & 0x7FFFFFFF  # CRC over the stored bytes
        assert m.body.isascii()
        compressed = bool(m.sys_flag & SysFlag.COMPRESSED)
        assert compressed == (len(m.body) > 4096)  # client threshold 4 KiB
        if compressed:
            assert len(m.body) == 8192
            assert len(raw) < len(m.body)
            assert zlib.decompress(raw) == m.body
            assert raw[0] == 0x78  # zlib stream header
        else:
            assert raw == m.body
        # body size follows the sender's round robin over the five sizes
        idx = int(m.properties["idx"])
        assert len(m.body) == [1, 100, 1024, 4000, 8192][idx % 5]


def test_offset_msg_id_round_trip(walked: Walked):
    ids = set()
    for m in walked.messages:
        mid = m.msg_id
        assert len(mid) == 32 and mid == mid.upper()
        assert mid == create_message_id(m.store_host, m.commit_log_offset)
        ip, port = unpack_host(m.store_host)
        assert decode_message_id(mid) == (ip, port, m.commit_log_offset)
        ids.add(mid)
    assert len(ids) == N_MESSAGES


def test_uniq_keys_from_the_cpp_client(walked: Walked):
    keys = [m.uniq_key for m in walked.messages]
    assert len(set(keys)) == N_MESSAGES
    prefixes = {k[:20] for k in keys}
    assert len(prefixes) == 1
    (prefix,) = prefixes
    assert prefix[:8] == "7F000001"  # client IP 127.0.0.1
    for m in walked.messages:
        k = m.uniq_key
        assert len(k) == 32 and k == k.upper()
        bytes.fromhex(k)
        # counter = send sequence number (one id per message, starting at 0)
        assert int(k[28:], 16) == int(m.properties["idx"])
        # time part = ms since the start of the month (the client ran in UTC), taken
        # just before the born timestamp
        born = time.gmtime(m.born_timestamp / 1000)
        month_start = calendar.timegm((born.tm_year, born.tm_mon, 1, 0, 0, 0)) * 1000
        assert 0 <= (m.born_timestamp - month_start) - int(k[20:28], 16) < 1000
    # our generator lays out the same prefix from ip + pid + seed
    pid = int(prefix[8:12], 16)
    seed = int.from_bytes(bytes.fromhex(prefix[12:20]), "big", signed=True)
    gen = UniqueIdGenerator(ip=bytes.fromhex(prefix[:8]), pid=pid, seed=seed)
    assert gen.next_id()[:20] == prefix


def test_decode_records_over_a_whole_file(rocketmq_store_pristine: Path, walked: Walked):
    # a commit-log file is records back to back; decode_records stops at the BLANK
    data = (rocketmq_store_pristine / "commitlog" / "00000000000000000000").read_bytes()
    got = decode_records(data)
    in_first = [m for m in walked.messages if m.commit_log_offset < COMMITLOG_FILE_SIZE]
    assert [m.commit_log_offset for m in got] == [m.commit_log_offset for m in in_first]
    assert [m.body for m in got] == [m.body for m in in_first]
    assert (
        decode_records(memoryview(data)[: walked.blanks[0][0]], decompress=False)[-1].body
        == walked.raw_bodies[in_first[-1].commit_log_offset]
    )


# ---------------------------------------------------------------------------
# RocketMQ's own ConsumeQueues
# ---------------------------------------------------------------------------
def read_cq_units(path: Path) -> list[tuple[int, int, int]]:
    data = path.read_bytes()
    assert len(data) == CQ_FILE_SIZE
    units = []
    pos = 0
    while pos + 20 <= len(data):
        off, size, tag = CQ_UNIT.unpack_from(data, pos)
        if not (off >= 0 and size > 0):  # spec 4.1.2 validity rule
            break
        units.append((off, size, tag))
        pos += 20
    assert not any(data[pos:]), "zero units past the end"
    return units


def test_consume_queues(rocketmq_store_pristine: Path, walked: Walked, topic: str):
    cq_root = rocketmq_store_pristine / "consumequeue"
    assert [p.name for p in cq_root.iterdir()] == [topic]
    qdirs = sorted((cq_root / topic).iterdir(), key=lambda p: int(p.name))
    assert [p.name for p in qdirs] == ["0", "1", "2", "3"]
    covered: list[int] = []
    for qdir in qdirs:
        qid = int(qdir.name)
        assert [p.name for p in qdir.iterdir()] == ["00000000000000000000"]
        units = read_cq_units(qdir / "00000000000000000000")
        in_queue = [m for m in walked.messages if m.queue_id == qid]
        assert len(units) == len(in_queue)
        prev = -1
        for n, (off, size, tag) in enumerate(units):
            m = walked.by_offset.get(off)
            assert m is not None, f"queue {qid} unit {n} points at {off}: no record starts there"
            assert m.topic == topic and m.queue_id == qid
            assert m.queue_offset == n  # queue-offset order
            assert m.store_size == size
            assert tag == tags_string_to_tags_code(m.tags)
            assert off > prev
            prev = off
            covered.append(off)
    assert len(covered) == N_MESSAGES
    assert sorted(covered) == sorted(walked.by_offset)  # every message exactly once
    assert {tags_string_to_tags_code(f"Tag{i}") for i in range(3)} == {2598902, 2598903, 2598904}
