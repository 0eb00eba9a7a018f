"""The Spark job on a store written by the real Apache RocketMQ 4.9.8 broker
(/work/shared/fixtures: three 1 MiB CommitLog files ending in BLANKs, 2000 messages from
the C++ client, compressed bodies, default ConsumeQueue and index sizes)."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from rmq.protocol.message import decode_record
from rmq.store.index import IndexFile
from tests.spark.reference import cq_files

pytestmark = pytest.mark.timeout(300)

SLOTS, NUM = 5_000_000, 20_000_000  # RocketMQ's defaults, as the fixture was written


@pytest.fixture(scope="module")
def rebuilt(rocketmq_store_pristine, rebuild, tmp_path_factory):
    out = tmp_path_factory.mktemp("rocketmq") / "out"
    store = rocketmq_store_pristine
    code, report = rebuild("--store", str(store), "--out", str(out), "--index", "--verify", str(store / "consumequeue"))
    return code, report, out


def test_consume_queues_of_rocketmq_4_9_8_rebuilt_byte_for_byte(rocketmq_store_pristine, rebuilt):
    code, report, out = rebuilt
    assert code == 0, report
    assert "2,000 records, 2,000 units" in report
    assert "verify: 0 of 4 queues differ (0 units)" in report
    want = cq_files(str(rocketmq_store_pristine / "consumequeue"))
    got = cq_files(str(out / "consumequeue"))
    assert got.keys() == want.keys() and len(want) == 4
    for k in want:
        assert got[k] == want[k], k


def test_index_of_rocketmq_4_9_8_rebuilt_with_the_same_entries(rocketmq_store_pristine, rebuilt):
    code, _report, out = rebuilt
    assert code == 0
    [mine] = os.listdir(out / "index")
    [theirs] = os.listdir(rocketmq_store_pristine / "index")
    a = np.memmap(out / "index" / mine, dtype=np.uint8, mode="r")
    b = np.memmap(rocketmq_store_pristine / "index" / theirs, dtype=np.uint8, mode="r")
    count = struct.unpack_from(">i", b, 36)[0]
    assert count > 4000  # UNIQ_KEY + two keys per message
    used = 40 + SLOTS * 4 + count * 20
    assert a.shape == b.shape
    assert np.array_equal(a[:used], b[:used])
    assert not a[used:].any()
    del a, b
    f_mine = IndexFile.load(str(out / "index" / mine), SLOTS, NUM)
    f_theirs = IndexFile.load(str(rocketmq_store_pristine / "index" / theirs), SLOTS, NUM)
    try:
        data = b"".join(
            (rocketmq_store_pristine / "commitlog" / n).read_bytes()
            for n in sorted(os.listdir(rocketmq_store_pristine / "commitlog"))
        )
        m = decode_record(data, 0)
        for key in (m.uniq_key, *m.keys.split(" "), "key-1999", "key2-777", "no-such-key"):
            q = f"{m.topic}#{key}"
            assert f_mine.select_phy_offsets(q, 32, 0, 2**62) == f_theirs.select_phy_offsets(q, 32, 0, 2**62)
        assert f_mine.select_phy_offsets(f"{m.topic}#{m.uniq_key}", 32, 0, 2**62) == [0]
    finally:
        f_mine.close()
        f_theirs.close()
