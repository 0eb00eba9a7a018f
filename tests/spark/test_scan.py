"""The scan (byte ranges, boundary proofs, vectorised classification) and the chain,
without Spark: for any split size they must dispatch exactly what record-by-record
dispatch with the broker's own check does (tests/spark/reference.py)."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.message import (
    MESSAGE_MAGIC_CODE_V2,
    SCHEDULE_TOPIC,
    SysFlag,
    encode_record,
    host_sysflag,
    properties_to_string,
)
from rmq.store.config import parse_delay_levels
from spark.commitlog_files import RebuildError, check_files, list_local, make_splits
from spark.scan import ScanOptions, scan_local_split
from tests.spark.commitlog_gen import BORN_HOST, STORE_HOST, CommitLogWriter
from tests.spark.reference import rebuild_in_process, reference_dispatch

LEVELS = tuple(parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"))
OPTS = ScanOptions(LEVELS, None, True)
FILE = 16 * 1024


def varied_messages(w: CommitLogWriter, rng: random.Random, n: int) -> None:
    """Everything the dispatch rules care about: tags (also non-ASCII and empty),
    keys, delay levels in range, beyond it and unparsable, transaction types."""
    for i in range(n):
        kind = rng.random()
        props = {"UNIQ_KEY": f"U{i:08d}", "WAIT": "true"}
        topic, qid, flag = f"T{rng.randrange(5)}", rng.randrange(3), 0
        if rng.random() < 0.7:
            props["TAGS"] = rng.choice(["TagA", "TagB", "标签", "tag with space", "x"])
        if rng.random() < 0.5:
            props["KEYS"] = rng.choice(["k1", "k1 k2", " k3  k4 ", f"order-{i}"])
        if kind < 0.15:
            topic, qid = SCHEDULE_TOPIC, rng.randrange(4)
            props["DELAY"] = rng.choice(["1", "3", "18", "40", "0", "x"])
            props["REAL_TOPIC"] = "T0"
        elif kind < 0.25:
            flag = rng.choice(
                [SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE]
            )
        body = os.urandom(rng.randrange(0, 600))
        w.append(topic, qid, body, props, sys_flag=flag, store_timestamp=1_700_000_000_000 + i * 7)


def write_store(root: Path, n: int, seed: int, file_size: int = FILE) -> CommitLogWriter:
    w = CommitLogWriter(str(root / "commitlog"), file_size)
    varied_messages(w, random.Random(seed), n)
    w.close()
    return w


def assert_same(store: Path, split_size: int, opts: ScanOptions = OPTS, **kw):
    want = reference_dispatch(str(store), opts, **kw)
    got, chain = rebuild_in_process(str(store), opts, split_size, **kw)
    assert dict(got.queues) == dict(want.queues)
    assert got.keys == want.keys
    assert got.stop == want.stop
    return got, chain


@pytest.mark.parametrize("split_size", [7, 100, 333, 1000, 4099, FILE, 1 << 30])
def test_any_split_size_dispatches_what_the_broker_does(tmp_path, split_size):
    w = write_store(tmp_path, 300, seed=1)
    got, chain = assert_same(tmp_path, split_size)
    assert len(os.listdir(tmp_path / "commitlog")) >= 4
    # what the broker would put in ConsumeQueues: NOT and COMMIT types only
    dispatched = [x for x in w.written if x.sys_flag & 0xC in (0, 8)]
    assert sum(len(v) for v in got.queues.values()) == len(dispatched)
    assert chain.rescans == 0


def test_prepared_and_rollback_records_get_no_unit_and_rollback_no_key(tmp_path):
    w = CommitLogWriter(str(tmp_path / "commitlog"), FILE)
    for flag in (
        0,
        SysFlag.TRANSACTION_PREPARED_TYPE,
        SysFlag.TRANSACTION_COMMIT_TYPE,
        SysFlag.TRANSACTION_ROLLBACK_TYPE,
    ):
        w.append("Tx", 0, b"b", {"UNIQ_KEY": f"u{flag}", "KEYS": f"k{flag}"}, sys_flag=flag)
    w.close()
    got, _ = assert_same(tmp_path, 50)
    assert [u[1] for u in got.queues[("Tx", 0)]] == [w.written[0].phys, w.written[2].phys]
    assert [u[0] for u in got.queues[("Tx", 0)]] == [0, 1]
    assert len(got.keys) == 6  # two keys each, none for the rollback record


def test_schedule_topic_tag_code_is_delivery_time(tmp_path):
    w = CommitLogWriter(str(tmp_path / "commitlog"), FILE)
    ts = 1_700_000_000_000
    for delay in ("1", "2", "99", "0", "junk"):
        w.append(SCHEDULE_TOPIC, 0, b"d", {"DELAY": delay, "TAGS": "T"}, store_timestamp=ts)
    w.close()
    levels = (1000, 2500, 7000)
    got, _ = assert_same(tmp_path, 64, ScanOptions(levels))
    tags = [u[3] for u in got.queues[(SCHEDULE_TOPIC, 0)]]
    from rmq.protocol.message import java_hash

    assert tags == [ts + 1000, ts + 2500, ts + 7000, java_hash("T"), java_hash("T")]


def test_topic_filter(tmp_path):
    write_store(tmp_path, 120, seed=2)
    got, _ = assert_same(tmp_path, 500, ScanOptions(LEVELS, frozenset({"T1", "T3"}), True))
    assert {t for t, _ in got.queues} == {"T1", "T3"}


def record(
    topic: bytes, body: bytes, props: bytes, qoff: int, phys: int, queue_id: int = 0, host: bytes = b""
) -> bytes:
    """A version-1 record stored at 2, born at 1; host: both hosts (default: the writer's)."""
    born, store = (host, host) if host else (BORN_HOST, STORE_HOST)
    return encode_record(
        topic=topic,
        body=body,
        properties=props,
        queue_id=queue_id,
        flag=0,
        queue_offset=qoff,
        physical_offset=phys,
        sys_flag=host_sysflag(born, store),
        born_timestamp=1,
        born_host=born,
        store_timestamp=2,
        store_host=store,
    )


def v2_record(topic: bytes, phys: int, qoff: int) -> bytes:
    """A message-version-2 record (2-byte topic length) from a version-1 one."""
    props = properties_to_string({"TAGS": "v2"}).encode()
    v1 = record(topic, b"body", props, qoff, phys)
    head_len = len(v1) - (1 + len(topic) + 2 + len(props))
    out = bytearray(v1[:head_len]) + struct.pack(">h", len(topic)) + topic + struct.pack(">h", len(props)) + props
    struct.pack_into(">ii", out, 0, len(out), MESSAGE_MAGIC_CODE_V2)
    return bytes(out)


def test_version_2_records_and_ipv6_hosts_take_the_exact_path(tmp_path):
    w = CommitLogWriter(str(tmp_path / "commitlog"), FILE)
    w.append("A", 0, b"x", {"TAGS": "a"})
    w.append_raw(v2_record(b"V2Topic", w.offset, 0))
    v6 = bytes(16) + (1).to_bytes(4, "big")
    w.append_raw(record(b"A", b"y", b"TAGS\x01b\x02", 1, w.offset, host=v6))
    w.append("A", 0, b"z", {"TAGS": "c"}, queue_offset=2)
    w.close()
    got, _ = assert_same(tmp_path, 30)
    assert len(got.queues[("A", 0)]) == 3 and len(got.queues[("V2Topic", 0)]) == 1


def test_look_alike_record_inside_a_body_is_caught_by_the_chain(tmp_path):
    """A body holding a complete, valid record whose PHYSICALOFFSET is its own position:
    a range that starts before it takes it for a boundary; the chain disagrees and the
    range is scanned again from where the previous range's last record ends."""
    w = CommitLogWriter(str(tmp_path / "commitlog"), 1 << 20)
    w.append("A", 0, b"first", {})
    at = w.offset
    topic = b"A"
    props = b""
    pad = 400
    # body starts at record + 88 (IPv4 hosts); the fake sits `pad` bytes into it
    fake = record(b"Fake", b"evil", b"", 0, at + 88 + pad, queue_id=7)
    body = b"\x00" * pad + fake + b"\x00" * 300
    w.append_raw(record(topic, body, props, 1, at))
    w.queue_offsets[("A", 0)] = 2
    w.append("A", 0, b"last", {})
    w.close()
    big_end = w.written[-1].phys
    fake_at = at + 88 + pad
    # the second range starts inside the big record, before the fake, and ends after it
    split = fake_at - 10
    assert at < split and 2 * split > big_end
    got, chain = assert_same(tmp_path, split)
    assert ("Fake", 7) not in got.queues
    assert chain.rescans >= 1
    # the fake is a proof-grade record: the task itself cannot tell
    files, size, _ = check_files(list_local(str(tmp_path)), "x", None)
    s = make_splits(files, size, split, False, True)[1]
    assert scan_local_split(s, OPTS).first == fake_at


def test_torn_tail_stops_there_and_keeps_everything_before(tmp_path):
    w = write_store(tmp_path, 200, seed=3)
    last = sorted(os.listdir(tmp_path / "commitlog"))[-1]
    p = tmp_path / "commitlog" / last
    victim = [x for x in w.written if x.phys >= int(last)][-3]
    cut = victim.phys - int(last) + victim.size // 2
    with open(p, "r+b") as f:
        f.truncate(cut)  # cut in the middle of a record
    got, chain = assert_same(tmp_path, 777)
    assert got.stop == ("invalid", len(os.listdir(tmp_path / "commitlog")) - 1, victim.phys - int(last))
    kept = {x.phys for x in w.written if x.phys < victim.phys and x.sys_flag & 0xC in (0, 8)}
    assert {u[1] for q in got.queues.values() for u in q} == kept
    # and zeroed instead of cut (a torn write into a preallocated file)
    with open(p, "r+b") as f:
        f.truncate(FILE)
    got2, _ = assert_same(tmp_path, 777)
    assert got2.queues == got.queues


def test_damaged_records(tmp_path):
    """CRC damage in the last three files ends the data there (recovery); a record whose
    fields do not add up in an older file is skipped (dispatch); a bad magic anywhere
    ends the data."""
    w = write_store(tmp_path, 400, seed=4, file_size=8 * 1024)
    files = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(files) >= 6
    by_file = {}
    for x in w.written:
        by_file.setdefault(x.phys // (8 * 1024), []).append(x)
    # 1. a body byte of a record in an old file: not checked -> no effect
    x = by_file[0][3]
    flip(tmp_path, x.phys + 88, 0x01)
    assert_same(tmp_path, 300)
    # 2. the TOPIC LENGTH of a record in an old file: fields do not add up -> skipped
    y = by_file[1][2]
    body_len = struct.unpack_from(">i", read(tmp_path, y.phys + 84, 4))[0]
    flip(tmp_path, y.phys + 88 + body_len, 0x01)
    got, _ = assert_same(tmp_path, 300)
    assert all(u[1] != y.phys for q in got.queues.values() for u in q)
    # 3. CRC in the last three files: the data ends there, with --check-crc all earlier
    z = by_file[len(files) - 2][1]
    flip(tmp_path, z.phys + 88, 0x01)
    got, _ = assert_same(tmp_path, 300)
    assert got.stop == ("invalid", len(files) - 2, z.phys % (8 * 1024))
    assert_same(tmp_path, 300, crc_all=True)
    assert_same(tmp_path, 300, check_crc_on_recover=False)


def flip(store: Path, offset: int, mask: int, size: int = 8 * 1024) -> None:
    p = store / "commitlog" / f"{offset - offset % size:020d}"
    with open(p, "r+b") as f:
        f.seek(offset % size)
        b = f.read(1)[0]
        f.seek(offset % size)
        f.write(bytes([b ^ mask]))


def read(store: Path, offset: int, n: int, size: int = 8 * 1024) -> bytes:
    p = store / "commitlog" / f"{offset - offset % size:020d}"
    with open(p, "rb") as f:
        f.seek(offset % size)
        return f.read(n)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 120),
    split=st.integers(1, 5000),
    damage=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=3),
)
def test_fuzz_against_record_by_record_dispatch(tmp_path_factory, seed, n, split, damage):
    root = tmp_path_factory.mktemp("fuzz")
    w = CommitLogWriter(str(root / "commitlog"), 4096)
    varied_messages(w, random.Random(seed), n)
    w.close()
    total = w.offset
    for where, mask in damage:
        if total:
            flip(root, int(where * (total - 1)), mask, 4096)
    assert_same(root, split)


def test_layout_errors(tmp_path):
    with pytest.raises(RebuildError, match="does not exist"):
        list_local(str(tmp_path / "nope"))
    with pytest.raises(RebuildError, match="has no CommitLog"):
        list_local(str(tmp_path))
    d = tmp_path / "commitlog"
    d.mkdir()
    with pytest.raises(RebuildError, match="no CommitLog files"):
        check_files(list_local(str(tmp_path)), str(d), None)
    (d / f"{0:020d}").write_bytes(bytes(4096))
    (d / f"{4096:020d}").write_bytes(bytes(2048))
    (d / f"{8192:020d}").write_bytes(bytes(4096))
    with pytest.raises(RebuildError, match="inconsistent sizes.*00000000000000004096 is 2048"):
        check_files(list_local(str(tmp_path)), str(d), None)
    os.unlink(d / f"{4096:020d}")
    with pytest.raises(RebuildError, match="not contiguous"):
        check_files(list_local(str(tmp_path)), str(d), None)
    with pytest.raises(RebuildError, match="inconsistent sizes"):
        check_files(list_local(str(tmp_path)), str(d), 8192 * 2)
