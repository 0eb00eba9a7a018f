"""POP consumption (RocketMQ 5's POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME)
against a real ``rmq broker`` process, over remoting as a 5.x proxy calls it.

Invisible times are short (1-2 s); outcomes are polled for with a deadline, never timed.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from rmq.client import pop_api
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import MessageExt, decode_records
from rmq.protocol.pop import INIT_MODE_MIN, PROPERTY_POP_CK, AckMessageRequestHeader, ExtraInfo
from tests.harness import broker_process
from tests.integration.broker_util import BrokerApi, props, restart_broker, uniq_key, unique, wait_until
from tests.integration.rigs import ns_and_broker
from tests.metrics_util import free_ports, scrape

pytestmark = pytest.mark.timeout(90)

BROKER = "broker-a"
METRICS_PORT = free_ports(1)[0]
cluster = ns_and_broker("broker-pop", {"metricsPromExporterPort": METRICS_PORT, "metricsPromExporterHost": "127.0.0.1"})


async def _send(api: BrokerApi, topic: str, body: bytes, *, queue_id: int = 0, tags: str = "A") -> str:
    uk = uniq_key()
    await api.send_ok(topic, body, queue_id=queue_id, properties=props(tags=tags, uniq=uk, wait="true"))
    return uk


async def _pop(api: BrokerApi, group: str, topic: str, **kw: Any) -> pop_api.PopResponse:
    kw.setdefault("invisible_ms", 1500)
    return await pop_api.pop(api.client, api.addr, BROKER, group, topic, **kw)


async def _pop_until(api: BrokerApi, group: str, topic: str, deadline_s: float = 20.0, **kw: Any) -> list[MessageExt]:
    """Pop (long polling 1 s at a time) until something comes or the deadline passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        r = await _pop(api, group, topic, poll_ms=1000, **kw)
        if r.found:
            return r.messages
        assert r.code == ResponseCode.POLLING_TIMEOUT, (r.code, r.remark)
    return []


async def _pop_n(api: BrokerApi, group: str, topic: str, n: int, **kw: Any) -> list[MessageExt]:
    """Pop until n messages came (each pop may return part of them)."""
    got: list[MessageExt] = []
    while len(got) < n:
        more = await _pop_until(api, group, topic, deadline_s=10, **kw)
        assert more, f"only {len(got)} of {n} popped"
        got += more
    return got


async def _ack(api: BrokerApi, group: str, topic: str, m: MessageExt) -> None:
    r = await pop_api.ack(api.client, api.addr, group, topic, m.properties[PROPERTY_POP_CK])
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


async def _group(api: BrokerApi, group: str, **cfg: Any) -> None:
    body = json.dumps({"groupName": group, **cfg}).encode()
    r = await api.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_pop_ack_nothing_redelivered(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopAck"), unique("GPopAck")
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=4)
        sent = {await _send(api, topic, b"m%d" % i, queue_id=i % 4) for i in range(6)}
        # a new group (initMode MAX, as the 5.x proxy sends) starts at 0: the sends before it count
        got = await _pop_n(api, group, topic, 6)
        assert {m.uniq_key for m in got} == sent
        for m in got:
            assert m.reconsume_times == 0
            ei = ExtraInfo.parse(m.properties[PROPERTY_POP_CK])
            assert (ei.queue_id, ei.queue_offset, ei.broker_name) == (m.queue_id, m.queue_offset, BROKER)
            await _ack(api, group, topic, m)
        # well past the invisible time: nothing comes back
        assert await _pop_until(api, group, topic, deadline_s=4) == []


async def test_unacked_message_is_redelivered_with_reconsume_count(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopRevive"), unique("GPopRevive")
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=2)
        uk = await _send(api, topic, b"again", queue_id=1)
        first = await _pop_until(api, group, topic)
        assert [m.uniq_key for m in first] == [uk]
        again = await _pop_until(api, group, topic)
        assert [m.uniq_key for m in again] == [uk]
        m = again[0]
        assert m.topic == topic and m.body == b"again"  # the original topic, restored
        assert m.reconsume_times == 1
        ei = ExtraInfo.parse(m.properties[PROPERTY_POP_CK])
        assert ei.topic_type == "1" and ei.real_topic(topic, group) == f"%RETRY%{group}_{topic}"
        assert "1ST_POP_TIME" in m.properties
        await _ack(api, group, topic, m)
        assert await _pop_until(api, group, topic, deadline_s=4) == []


async def test_pop_metrics(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopMetrics"), unique("GPopMetrics")
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=1)
        await _send(api, topic, b"counted")
        assert await _pop_until(api, group, topic, invisible_ms=1000)  # never acked

        async def revived() -> bool:
            s = await asyncio.to_thread(scrape, METRICS_PORT)
            assert s.types.get("rocketmq_pop_revive_backlog") == "gauge"
            assert s.types.get("rocketmq_pop_dlq_messages_total") == "counter"
            return s.value("rocketmq_pop_retry_messages_total") >= 1 and s.value("rocketmq_pop_checkpoints_total") >= 1

        await wait_until(revived, 20, "no POP retry counted", 0.2)


async def test_change_invisible_time(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopCit"), unique("GPopCit")
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=1)
        uk = await _send(api, topic, b"later")
        got = await _pop_until(api, group, topic, invisible_ms=60_000)
        assert [m.uniq_key for m in got] == [uk]
        r, handle = await pop_api.change_invisible_time(
            api.client, api.addr, group, topic, got[0].properties[PROPERTY_POP_CK], 1000
        )
        assert r.code == ResponseCode.SUCCESS and handle is not None, r.remark
        assert set(r.ext_fields) >= {"popTime", "invisibleTime", "reviveQid"}
        # visible again after 1 s instead of 60 s
        again = await _pop_until(api, group, topic, deadline_s=20)
        assert [m.uniq_key for m in again] == [uk] and again[0].reconsume_times == 1
        await _ack(api, group, topic, again[0])


async def test_dlq_after_max_attempts(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopDlq"), unique("GPopDlq")
    async with BrokerApi(br.addr) as api:
        await _group(api, group, retryMaxTimes=1)
        await api.create_topic(topic, queues=1)
        uk = await _send(api, topic, b"poison")
        attempts = []
        for _ in range(2):  # retryMaxTimes + 1 deliveries, none acked
            got = await _pop_until(api, group, topic, invisible_ms=1000)
            assert [m.uniq_key for m in got] == [uk]
            attempts.append(got[0].reconsume_times)
        assert attempts == [0, 1]
        dlq = f"%DLQ%{group}"
        end = time.monotonic() + 20
        found: list[MessageExt] = []
        while time.monotonic() < end and not found:
            r = await api.pull(dlq, 0, 0)
            if r.code == ResponseCode.SUCCESS:
                found = decode_records(r.body)
            else:
                await asyncio.sleep(0.3)
        assert [m.uniq_key for m in found] == [uk]
        assert found[0].properties.get("DLQ_ORIGIN_TOPIC") == topic
        # and it is not delivered a third time
        assert await _pop_until(api, group, topic, deadline_s=3) == []


async def test_tag_filter(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopTag"), unique("GPopTag")
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=1)
        want = set()
        for i in range(6):
            uk = await _send(api, topic, b"t%d" % i, tags="keep" if i % 2 else "drop")
            if i % 2:
                want.add(uk)
        got = await _pop_n(api, group, topic, 3, exp="keep", invisible_ms=30_000)
        assert {m.uniq_key for m in got} == want
        assert all(m.properties["TAGS"] == "keep" for m in got)


async def test_long_polling_returns_when_a_message_arrives(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopPoll"), unique("GPopPoll")
    async with BrokerApi(br.addr) as api, BrokerApi(br.addr) as sender:
        await api.create_topic(topic, queues=4)
        r = await _pop(api, group, topic)  # the group starts here (empty queues)
        assert r.code == ResponseCode.POLLING_TIMEOUT
        started = time.monotonic()
        pending = asyncio.ensure_future(_pop(api, group, topic, poll_ms=15_000))
        await asyncio.sleep(0.5)
        assert not pending.done()
        uk = await _send(sender, topic, b"wake", queue_id=2)
        r = await asyncio.wait_for(pending, 20)
        assert r.found and [m.uniq_key for m in r.messages] == [uk]
        assert time.monotonic() - started < 15  # answered by the arrival, not the poll timeout


async def test_fifo_holds_the_queue(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopFifo"), unique("GPopFifo")
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=1)
        uks = [await _send(api, topic, b"f%d" % i) for i in range(3)]
        first = await _pop_until(api, group, topic, order=True, max_nums=1, invisible_ms=2000)
        assert [m.uniq_key for m in first] == uks[:1]
        assert ExtraInfo.parse(first[0].properties[PROPERTY_POP_CK]).is_order
        # the queue is held: nothing while the first is neither acked nor expired
        r = await _pop(api, group, topic, order=True, max_nums=1, invisible_ms=2000)
        assert r.code == ResponseCode.POLLING_TIMEOUT
        # expired: the same message again, consumed count + 1
        again = await _pop_until(api, group, topic, order=True, max_nums=1, invisible_ms=2000)
        assert [m.uniq_key for m in again] == uks[:1] and again[0].reconsume_times == 1
        await _ack(api, group, topic, again[0])
        nxt = await _pop_until(api, group, topic, order=True, max_nums=1, invisible_ms=2000)
        assert [m.uniq_key for m in nxt] == uks[1:2] and nxt[0].reconsume_times == 0
        # the consumer offset moved only on ack
        r = await api.query_offset(group, topic, 0)
        assert int(r.ext_fields["offset"]) == 1


async def test_init_mode_min_and_bad_input(cluster: Any) -> None:
    _, br = cluster
    topic, group = unique("PopMin"), unique("GPopMin")
    async with BrokerApi(br.addr) as api:
        await api.create_topic(topic, queues=1)
        uk = await _send(api, topic, b"x")
        got = await _pop_until(api, group, topic, init_mode=INIT_MODE_MIN, queue_id=0)
        assert [m.uniq_key for m in got] == [uk]
        bad = AckMessageRequestHeader(group, topic, 0, "not a handle", got[0].queue_offset)
        r = await api.call(RequestCode.ACK_MESSAGE, bad.to_ext_fields())
        assert r.code == ResponseCode.SYSTEM_ERROR and "extraInfo" in (r.remark or "")
        r = await api.call(RequestCode.POP_MESSAGE, {"consumerGroup": group, "topic": topic})
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in (r.remark or "")


async def test_popped_unacked_survive_sigkill(tmp_path: Any) -> None:
    br = broker_process(tmp_path, None, "broker-pop-kill", {"flushDiskType": "SYNC_FLUSH"}).start()
    topic, group = unique("PopKill"), unique("GPopKill")
    try:
        async with BrokerApi(br.addr) as api:
            await api.create_topic(topic, queues=2)
            sent = {await _send(api, topic, b"k%d" % i, queue_id=i % 2) for i in range(4)}
            got = await _pop_n(api, group, topic, 4, invisible_ms=3000)
            assert {m.uniq_key for m in got} == sent
        br.kill()
        br = restart_broker(tmp_path, None, br)
        async with BrokerApi(br.addr) as api:
            back: list[MessageExt] = []
            end = time.monotonic() + 30
            while {m.uniq_key for m in back} != sent and time.monotonic() < end:
                back += await _pop_until(api, group, topic, invisible_ms=30_000, deadline_s=2)
            # each comes back: revived from the ck (reconsume 1), or read again from its queue
            # when the consumer offset had not been written to disk before the kill (0)
            assert {m.uniq_key for m in back} == sent
            assert {m.reconsume_times for m in back} <= {0, 1}
    finally:
        br.stop()


async def test_group_marked_orderly_is_stored_and_read_back(cluster: Any) -> None:
    """consumeMessageOrderly (RocketMQ 5's SubscriptionGroupConfig key) is accepted by
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and kept; a wrong type is refused naming it."""
    _, br = cluster
    group = unique("GPopOrderly")
    async with BrokerApi(br.addr) as api:
        await _group(api, group, consumeMessageOrderly=True, retryMaxTimes=3)
        r = await api.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert r.code == ResponseCode.SUCCESS, r.remark
        cfg = json.loads(r.body)["subscriptionGroupTable"][group]
        assert (cfg["consumeMessageOrderly"], cfg["retryMaxTimes"]) == (True, 3)
        body = json.dumps({"groupName": group, "consumeMessageOrderly": "yes"}).encode()
        bad = await api.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        assert bad.code == ResponseCode.SYSTEM_ERROR and "consumeMessageOrderly" in (bad.remark or ""), bad.remark
