"""Broker: PULL_MESSAGE (11) / LITE_PULL_MESSAGE (361) — spec 2.5, 3.9.

* FOUND: the body is the CommitLog bytes at those offsets, byte for byte (read from the
  files under the store directory), with the response header of spec 2.5;
* the status table: OFFSET_OVERFLOW_ONE / OFFSET_OVERFLOW_BADLY / empty queue / tag filter
  dropping everything (NO_MATCHED_MESSAGE) / OFFSET_TOO_SMALL (after the first CommitLog
  file is gone), and the other pull errors;
* long polling: a SUSPEND pull on an empty queue is answered within ~0.2 s of a send to
  that queue, and at its timeout with PULL_NOT_FOUND when nothing arrives;
* commit offset piggy-backed on a pull.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode
from rmq.protocol.message import decode_records
from tests.harness import broker_process, start_namesrv
from tests.integration.broker_util import BrokerApi, commitlog_slice, props, restart_broker, unique
from tests.integration.rigs import ns_and_broker

pytestmark = pytest.mark.timeout(60)

CL_FILE = 4 * 1024 * 1024  # harness default mappedFileSizeCommitLog
SUB = PullSysFlag.SUBSCRIPTION
SUSPEND = PullSysFlag.SUSPEND
COMMIT = PullSysFlag.COMMIT_OFFSET


cluster = ns_and_broker("broker-pull")


def _hdr(r) -> dict[str, int]:
    return {k: int(v) for k, v in r.ext_fields.items()}


@pytest.mark.parametrize(
    "code", [RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE], ids=["PULL_MESSAGE", "LITE_PULL_MESSAGE"]
)
async def test_found_body_is_the_commitlog_bytes(cluster, code):
    ns, br = cluster
    topic = unique("PullBytes")
    async with BrokerApi(br.addr) as api:
        sent = []
        for i in range(7):
            r = await api.send_ok(
                topic,
                (b"payload-%d " % i) * (i + 1),
                queue_id=3,
                properties=props(tags=f"Tag{i % 2}", keys=f"key{i}", wait="true"),
            )
            sent.append(r)
        await api.wait_max_offset(topic, 3, 7)
        r = await api.pull(topic, 3, 2, code=code, max_nums=4)
        assert r.code == ResponseCode.SUCCESS and r.remark == "FOUND"
        assert set(r.ext_fields) == {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"}, r.ext_fields
        assert _hdr(r) == {"suggestWhichBrokerId": 0, "nextBeginOffset": 6, "minOffset": 0, "maxOffset": 7}
        msgs = decode_records(r.body, decompress=False)
        assert [m.queue_offset for m in msgs] == [2, 3, 4, 5]
        # the body is the stored records back to back, exactly as in the CommitLog files
        expected = b"".join(commitlog_slice(br.store_dir, m.commit_log_offset, m.store_size, CL_FILE) for m in msgs)
        assert r.body == expected
        assert [m.msg_id for m in msgs] == [s.ext_fields["msgId"] for s in sent[2:6]]
        # the whole queue, in one pull
        r = await api.pull(topic, 3, 0, code=code)
        msgs = decode_records(r.body)
        first, last = msgs[0], msgs[-1]
        assert r.body == commitlog_slice(
            br.store_dir,
            first.commit_log_offset,
            last.commit_log_offset + last.store_size - first.commit_log_offset,
            CL_FILE,
        )
        assert _hdr(r)["nextBeginOffset"] == 7


async def test_pull_status_table(api):
    topic = unique("PullStatus")
    assert (await api.create_topic(topic, 4)).code == ResponseCode.SUCCESS
    for i in range(3):
        await api.send_ok(topic, b"m%d" % i, queue_id=0)
    await api.wait_max_offset(topic, 0, 3)

    # offset == max: OFFSET_OVERFLOW_ONE -> PULL_NOT_FOUND, next = offset
    r = await api.pull(topic, 0, 3)
    assert (r.code, r.remark) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
    assert _hdr(r) == {"suggestWhichBrokerId": 0, "nextBeginOffset": 3, "minOffset": 0, "maxOffset": 3}
    assert r.body is None
    # offset > max: OFFSET_OVERFLOW_BADLY -> PULL_OFFSET_MOVED. 4.9.8's
    # DefaultMessageStore.getMessage corrects to minOffset when that is 0, else maxOffset
    r = await api.pull(topic, 0, 10)
    assert (r.code, r.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY")
    assert _hdr(r)["nextBeginOffset"] == 0 and _hdr(r)["maxOffset"] == 3
    assert r.body is None
    # a queue that never got a message: PULL_NOT_FOUND at offset 0, else PULL_OFFSET_MOVED; next 0
    r = await api.pull(topic, 1, 0)
    assert r.code == ResponseCode.PULL_NOT_FOUND
    assert r.remark in ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE")
    assert _hdr(r)["nextBeginOffset"] == 0
    r = await api.pull(topic, 1, 5)
    assert r.code == ResponseCode.PULL_OFFSET_MOVED
    assert r.remark in ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE")
    assert _hdr(r)["nextBeginOffset"] == 0
    # maxMsgNums caps the batch
    r = await api.pull(topic, 0, 0, max_nums=2)
    assert r.code == ResponseCode.SUCCESS and _hdr(r)["nextBeginOffset"] == 2
    assert len(decode_records(r.body)) == 2
    # other errors
    r = await api.pull(unique("NoSuchTopic"), 0, 0)
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    assert r.remark.startswith("topic[") and "not exist, apply first please!" in r.remark
    r = await api.pull(topic, 4, 0)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark.startswith("queueId[4] is illegal"), r.remark
    wo = unique("WriteOnly")
    assert (await api.create_topic(wo, 1, perm=2)).code == ResponseCode.SUCCESS
    r = await api.pull(wo, 0, 0)
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, f"the topic[{wo}] pulling message is forbidden")
    # no SUBSCRIPTION flag and no heartbeat for the group
    r = await api.pull(topic, 0, 0, group=unique("NoHb"), sys_flag=0, subscription=None)
    assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    assert r.remark == "the consumer's group info not exist"


async def test_tag_filter_and_no_matched_msg(api):
    topic = unique("Tags")
    tags = ["TagA", "TagB", "TagA", "TagB", "TagC", "TagA"]
    for i, t in enumerate(tags):
        await api.send_ok(topic, b"%s-%d" % (t.encode(), i), queue_id=0, properties=props(tags=t, wait="true"))
    await api.send_ok(topic, b"no-tag", queue_id=0, properties=props(wait="true"))
    await api.wait_max_offset(topic, 0, 7)
    r = await api.pull(topic, 0, 0, subscription="TagA")
    assert r.code == ResponseCode.SUCCESS
    ms = decode_records(r.body)
    assert [m.queue_offset for m in ms] == [0, 2, 5]
    assert _hdr(r)["nextBeginOffset"] == 7
    r = await api.pull(topic, 0, 0, subscription="TagB || TagC")
    assert [m.body for m in decode_records(r.body)] == [b"TagB-1", b"TagB-3", b"TagC-4"]
    r = await api.pull(topic, 0, 0, subscription="*")
    assert len(decode_records(r.body)) == 7
    # everything scanned, nothing matched: NO_MATCHED_MESSAGE -> PULL_RETRY_IMMEDIATELY
    r = await api.pull(topic, 0, 0, subscription="TagZ")
    assert (r.code, r.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE")
    assert _hdr(r) == {"suggestWhichBrokerId": 0, "nextBeginOffset": 7, "minOffset": 0, "maxOffset": 7}
    assert r.body is None
    r = await api.pull(topic, 0, 4, subscription="TagB")
    assert (r.code, _hdr(r)["nextBeginOffset"]) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 7)


async def test_pull_uses_the_heartbeat_subscription(api):
    topic, group = unique("HbSub"), unique("HbSubG")
    for t in ("TagA", "TagB", "TagA"):
        await api.send_ok(topic, t.encode(), queue_id=0, properties=props(tags=t, wait="true"))
    await api.wait_max_offset(topic, 0, 3)
    hb = await api.heartbeat("127.0.0.1@hbsub", [(group, [(topic, "TagB")])], sub_version=1000)
    assert hb.code == ResponseCode.SUCCESS
    # no SUBSCRIPTION flag: the broker filters with what the consumer registered
    r = await api.pull(topic, 0, 0, group=group, sys_flag=0, subscription=None, sub_version=1000)
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(r.body)] == [b"TagB"]
    r = await api.pull(topic, 0, 0, group=group, sys_flag=0, subscription=None, sub_version=2000)
    assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
    r = await api.pull(unique("Other"), 0, 0, group=group, sys_flag=0, subscription=None)
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    other = unique("OtherT")
    await api.send_ok(other, b"x")
    r = await api.pull(other, 0, 0, group=group, sys_flag=0, subscription=None)
    assert (r.code, r.remark) == (ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist")


async def test_long_poll_answered_when_a_message_arrives(cluster):
    ns, br = cluster
    topic = unique("LongPoll")
    async with BrokerApi(br.addr) as api, BrokerApi(br.addr) as producer:
        assert (await api.create_topic(topic, 2)).code == ResponseCode.SUCCESS
        loop = asyncio.get_running_loop()
        parked = asyncio.ensure_future(api.pull(topic, 0, 0, sys_flag=SUB | SUSPEND, suspend_ms=10000, timeout=20))
        await asyncio.sleep(0.3)
        assert not parked.done(), parked.result() if parked.done() else None
        # a message for another queue does not answer it
        await producer.send_ok(topic, b"other-queue", queue_id=1)
        await asyncio.sleep(0.3)
        assert not parked.done()
        r = await producer.send_ok(topic, b"wake-up", queue_id=0)
        acked = loop.time()
        p = await asyncio.wait_for(parked, 5)
        delay = loop.time() - acked
        assert p.code == ResponseCode.SUCCESS and p.remark == "FOUND"
        assert [m.body for m in decode_records(p.body)] == [b"wake-up"]
        assert decode_records(p.body)[0].msg_id == r.ext_fields["msgId"]
        assert _hdr(p)["nextBeginOffset"] == 1
        assert delay < 0.2, f"long poll answered {delay:.3f}s after the send was acknowledged"

        # parked at offset == max (OFFSET_OVERFLOW_ONE) and woken by the next message
        parked = asyncio.ensure_future(api.pull(topic, 0, 1, sys_flag=SUB | SUSPEND, suspend_ms=10000, timeout=20))
        await asyncio.sleep(0.2)
        assert not parked.done()
        await producer.send_ok(topic, b"second", queue_id=0)
        acked = loop.time()
        p = await asyncio.wait_for(parked, 5)
        assert loop.time() - acked < 0.2
        assert [m.queue_offset for m in decode_records(p.body)] == [1]


async def test_long_poll_timeout_answers_pull_not_found(api):
    topic = unique("LongPollTo")
    await api.send_ok(topic, b"x", queue_id=0)
    await api.wait_max_offset(topic, 0, 1)
    for offset, remark in ((1, "OFFSET_OVERFLOW_ONE"), (0, None)):
        qid = 0 if offset == 1 else 1
        t0 = time.monotonic()
        r = await api.pull(topic, qid, offset, sys_flag=SUB | SUSPEND, suspend_ms=1000, timeout=10)
        took = time.monotonic() - t0
        assert r.code == ResponseCode.PULL_NOT_FOUND
        if remark:
            assert r.remark == remark
        assert _hdr(r)["nextBeginOffset"] == offset
        assert 0.9 <= took <= 1.6, f"suspended pull answered after {took:.3f}s, expected ~1.0s"
    # without SUSPEND the same pull is answered at once
    t0 = time.monotonic()
    r = await api.pull(topic, 0, 1, suspend_ms=1000)
    assert r.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - t0 < 0.5


async def test_commit_offset_piggybacked_on_pull(api):
    topic, group = unique("Piggy"), unique("PiggyG")
    for i in range(5):
        await api.send_ok(topic, b"%d" % i, queue_id=0)
    await api.wait_max_offset(topic, 0, 5)
    r = await api.pull(topic, 0, 3, group=group, sys_flag=SUB | COMMIT, commit_offset=3)
    assert r.code == ResponseCode.SUCCESS
    q = await api.query_offset(group, topic, 0)
    assert q.code == ResponseCode.SUCCESS and q.ext_fields == {"offset": "3"}
    # without the COMMIT_OFFSET flag the field is ignored
    await api.pull(topic, 0, 4, group=group, sys_flag=SUB, commit_offset=4)
    q = await api.query_offset(group, topic, 0)
    assert q.ext_fields == {"offset": "3"}
    # a parked pull commits too (when it is parked, not again when it is answered)
    parked = asyncio.ensure_future(
        api.pull(topic, 0, 5, group=group, sys_flag=SUB | COMMIT | SUSPEND, commit_offset=5, suspend_ms=500, timeout=5)
    )
    await asyncio.sleep(0.1)
    q = await api.query_offset(group, topic, 0)
    assert q.ext_fields == {"offset": "5"}
    assert (await parked).code == ResponseCode.PULL_NOT_FOUND


@pytest.mark.slow
async def test_offset_too_small_after_the_first_commitlog_file_is_gone(tmp_path):
    """OFFSET_TOO_SMALL needs min offset > 0; with no expiry service in the broker, the
    first CommitLog file is removed while the broker is down (as the clean service would)."""
    size = 64 * 1024
    conf = {"mappedFileSizeCommitLog": size}
    topic = "TooSmall"
    with start_namesrv(tmp_path) as ns:
        br = broker_process(tmp_path, ns.addr, conf=conf).start()
        try:
            async with BrokerApi(br.addr) as api:
                for i in range(40):  # ~4 KiB each: a few CommitLog files
                    await api.send_ok(topic, bytes([65 + i % 26]) * 4000, queue_id=0)
                await api.wait_max_offset(topic, 0, 40)
        finally:
            br.stop()
        files = sorted((br.store_dir / "commitlog").iterdir())
        assert len(files) >= 3
        files[0].unlink()
        br2 = restart_broker(tmp_path, ns.addr, br, conf)
        try:
            async with BrokerApi(br2.addr) as api:
                mn = await api.min_offset(topic, 0)
                if mn == 0:
                    pytest.skip("the store does not correct the queue's min offset on start-up")
                assert 0 < mn < 40
                assert await api.max_offset(topic, 0) == 40
                r = await api.pull(topic, 0, 0)
                assert (r.code, r.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL")
                assert _hdr(r)["nextBeginOffset"] == mn and _hdr(r)["minOffset"] == mn
                r = await api.pull(topic, 0, mn)
                assert r.code == ResponseCode.SUCCESS
                assert decode_records(r.body)[0].queue_offset == mn
                # spec 2.6: no stored offset and message 0 gone -> QUERY_NOT_FOUND
                q = await api.query_offset(unique("Fresh"), topic, 0)
                assert q.code == ResponseCode.QUERY_NOT_FOUND == 22
                assert q.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        finally:
            br2.stop()


async def test_pull_batch_limits(api):
    """Spec 2.5 isTheBatchFull: in memory at most 32 messages and 256 KiB per pull."""
    topic = unique("Limits")
    for i in range(40):
        await api.send_ok(topic, bytes([48 + i % 10]) * 2000, queue_id=0)
    for i in range(30):
        await api.send_ok(topic, bytes([65 + i % 26]) * 20000, queue_id=1)
    await api.wait_max_offset(topic, 0, 40)
    await api.wait_max_offset(topic, 1, 30)
    r = await api.pull(topic, 0, 0, max_nums=64)
    assert len(decode_records(r.body)) == 32 and _hdr(r)["nextBeginOffset"] == 32
    r = await api.pull(topic, 1, 0, max_nums=64)
    msgs = decode_records(r.body)
    assert len(r.body) <= 256 * 1024
    assert len(msgs) == len(r.body) // msgs[0].store_size == 256 * 1024 // msgs[0].store_size
    assert _hdr(r)["nextBeginOffset"] == len(msgs)
