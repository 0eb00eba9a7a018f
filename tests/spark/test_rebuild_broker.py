"""The Spark job on a store written by our real broker (local[2]).

The store (tests/spark/broker_store.py): 22 topics x 4 queues, batches, delay levels
1-3 (SCHEDULE_TOPIC_XXXX units and their delivered copies), transactions committed,
rolled back and decided by the broker's check, five 32 KiB CommitLog files, 6-unit
ConsumeQueue files, 400-entry index files.

Every test runs on the master's store and on its slave's (replicated over HA, ConsumeQueues
and index built by the slave's own dispatch).
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from rmq.protocol.message import SCHEDULE_TOPIC
from rmq.store.index import IndexFile
from tests.spark.broker_store import BROKER_CONF, TOPICS, BrokerStore, write_stores
from tests.spark.reference import cq_files
from tests.unit.store.test_index import stored_records

pytestmark = pytest.mark.timeout(300)

CQ_FILE = BROKER_CONF["mappedFileSizeConsumeQueue"]


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[BrokerStore, BrokerStore]:
    return write_stores(tmp_path_factory.mktemp("broker"))


@pytest.fixture(scope="module", params=["master", "slave"])
def store(request, written) -> BrokerStore:
    return written[0] if request.param == "master" else written[1]


def verified_against(store: BrokerStore, src: Path, out: Path) -> list[str]:
    """Arguments rebuilding src into out with store's broker config, checked against the
    queues store's broker wrote."""
    return [
        "--store",
        str(src),
        "--out",
        str(out),
        "--broker-conf",
        str(store.conf),
        "--verify",
        str(store.store / "consumequeue"),
    ]


@pytest.fixture(scope="module")
def full(store, rebuild, tmp_path_factory):
    """One rebuild with everything: queues, index, verify against the broker's."""
    out = tmp_path_factory.mktemp("full") / "out"
    code, report = rebuild(*verified_against(store, store.store, out), "--index")
    return code, report, out


def test_the_store_has_what_the_rules_care_about(store):
    recs = stored_records(store.store)
    assert len(os.listdir(store.store / "commitlog")) >= 3
    topics = {m.topic for m in recs}
    assert set(TOPICS) <= topics and len(TOPICS) >= 20
    assert {SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"} <= topics
    assert any(m.tags == "Batch" for m in recs)
    delayed = [m for m in recs if m.tags == "Delayed"]
    assert {m.topic for m in delayed} >= {SCHEDULE_TOPIC} and any(
        m.topic != SCHEDULE_TOPIC for m in delayed
    )  # delivered too
    assert any(m.sys_flag & 0xC == 8 for m in recs)  # commits
    queues = [d for t in os.listdir(store.store / "consumequeue") for d in os.listdir(store.store / "consumequeue" / t)]
    assert len(queues) > 80
    assert any(
        len(os.listdir(store.store / "consumequeue" / t / q)) > 1
        for t in os.listdir(store.store / "consumequeue")
        for q in os.listdir(store.store / "consumequeue" / t)
    )


def test_rebuilt_consume_queues_are_byte_identical(store, full):
    code, report, out = full
    assert code == 0, report
    assert "verify: 0 of " in report and " queues differ (0 units)" in report
    want = cq_files(str(store.store / "consumequeue"))
    got = cq_files(str(out / "consumequeue"))
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == want[k], k
    assert all(len(b) == CQ_FILE for b in got.values())
    # schedule units carry delivery times: store time + the level's delay (1s 2s 3s)
    recs = {m.commit_log_offset: m for m in stored_records(store.store)}
    sched = [k for k in got if k.startswith(SCHEDULE_TOPIC)]
    assert sched
    for k in sched:
        level = int(k.split(os.sep)[1]) + 1
        for i in range(0, CQ_FILE, 20):
            phy, size, tags = struct.unpack_from(">qiq", got[k], i)
            if size:
                assert tags == recs[phy].store_timestamp + 1000 * level


def test_rebuilt_index_is_the_brokers(store, full):
    code, _report, out = full
    assert code == 0
    mine = sorted(os.listdir(out / "index"))
    theirs = sorted(os.listdir(store.store / "index"))
    assert len(mine) == len(theirs) >= 2
    for a, b in zip(mine, theirs, strict=True):
        assert (out / "index" / a).read_bytes() == (store.store / "index" / b).read_bytes()
    slots, num = BROKER_CONF["maxHashSlotNum"], BROKER_CONF["maxIndexNum"]
    files_mine = [IndexFile.load(str(out / "index" / n), slots, num) for n in mine]
    files_theirs = [IndexFile.load(str(store.store / "index" / n), slots, num) for n in theirs]
    try:
        recs = stored_records(store.store)
        keys = {(m.topic, m.uniq_key) for m in recs if m.uniq_key} | {
            (m.topic, k) for m in recs for k in (m.keys or "").split(" ") if k
        }
        assert len(keys) > 300

        def query(files, full_key):
            return [o for f in reversed(files) for o in f.select_phy_offsets(full_key, 64, 0, 2**62)]

        for topic, key in sorted(keys):
            full_key = f"{topic}#{key}"
            got = query(files_mine, full_key)
            assert got == query(files_theirs, full_key)
            assert any(
                m.commit_log_offset in got
                for m in recs
                if m.topic == topic and (m.uniq_key == key or key in (m.keys or "").split(" "))
            )
    finally:
        for f in files_mine + files_theirs:
            f.close()


@pytest.mark.parametrize("split", ["64", "4099"])
def test_split_smaller_than_a_record_and_inside_records(store, rebuild, tmp_path, split):
    out = tmp_path / "out"
    code, report = rebuild(
        "--store", str(store.store), "--out", str(out), "--broker-conf", str(store.conf), "--split-size", split
    )
    assert code == 0, report
    assert " ranges" in report and "rescanned" not in report
    assert cq_files(str(out / "consumequeue")) == cq_files(str(store.store / "consumequeue"))


def test_verify_names_the_queue_and_unit_of_a_corrupted_byte(store, rebuild, tmp_path):
    existing = tmp_path / "consumequeue"
    shutil.copytree(store.store / "consumequeue", existing)
    victim = existing / TOPICS[3] / "2"
    names = sorted(os.listdir(victim))
    f = victim / names[-1]
    data = bytearray(f.read_bytes())
    units = [i for i in range(0, len(data), 20) if data[i : i + 20] != bytes(20)]
    at = units[len(units) // 2]
    data[at + 10] ^= 0x01  # a byte of the size field
    f.write_bytes(bytes(data))
    offset = int(names[-1]) // 20 + at // 20
    code, report = rebuild("--store", str(store.store), "--broker-conf", str(store.conf), "--verify", str(existing))
    assert code == 1, report
    diffs = [line for line in report.splitlines() if line.startswith("DIFF ")]
    assert diffs == [
        f"DIFF {TOPICS[3]} queue 2: 1 unit(s) differ; first at offset {offset} "
        f"({names[-1]} byte {at}): existing {diffs[0].split('existing ')[1]}"
    ]
    assert "verify: 1 of " in report


def test_torn_tail_rebuilds_everything_before_it(store, rebuild, tmp_path):
    torn = tmp_path / "store"
    shutil.copytree(store.store / "commitlog", torn / "commitlog")
    recs = stored_records(store.store)
    last_file = sorted(os.listdir(torn / "commitlog"))[-1]
    victim = [m for m in recs if m.commit_log_offset >= int(last_file)][-4]
    cut = victim.commit_log_offset + victim.store_size // 2
    os.truncate(torn / "commitlog" / last_file, cut - int(last_file))
    out = tmp_path / "out"
    code, report = rebuild(*verified_against(store, torn, out))
    assert f"torn tail at offset {victim.commit_log_offset} in {last_file}" in report
    # what the broker has, minus the units of the torn record and after it
    want = {}
    for k, b in cq_files(str(store.store / "consumequeue")).items():
        b = bytearray(b)
        for i in range(0, len(b), 20):
            phy, size, _ = struct.unpack_from(">qiq", b, i)
            if size and size != 0x7FFFFFFF and phy >= victim.commit_log_offset:
                b[i : i + 20] = bytes(20)
        want[k] = bytes(b)
    got = cq_files(str(out / "consumequeue"))
    assert got.keys() <= want.keys()
    for k, b in want.items():
        if k in got:
            assert got[k] == b, k
        else:  # a file (or queue) that only held units past the tail
            assert all(struct.unpack_from(">qiq", b, i)[1] in (0, 0x7FFFFFFF) for i in range(0, len(b), 20)), k
    assert len(got) > 50
    # --verify against the broker's queues names the units past the tail
    assert code == 1
    assert "DIFF " in report and "rebuilt none" in report


def test_hadoop_path_and_writing_on_the_driver(store, rebuild, tmp_path):
    out = tmp_path / "out"
    code, report = rebuild(
        "--store",
        store.store.resolve().as_uri(),
        "--out",
        str(out),
        "--broker-conf",
        str(store.conf),
        "--split-size",
        "8k",
        "--write-on",
        "driver",
        "--index",
    )
    assert code == 0, report
    assert "records across Hadoop splits" in report  # read by the driver, in the chain
    assert cq_files(str(out / "consumequeue")) == cq_files(str(store.store / "consumequeue"))
    mine = sorted(os.listdir(out / "index"))
    theirs = sorted(os.listdir(store.store / "index"))
    assert [(out / "index" / a).read_bytes() for a in mine] == [
        (store.store / "index" / b).read_bytes() for b in theirs
    ]
