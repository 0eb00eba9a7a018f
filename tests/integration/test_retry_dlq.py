"""CONSUMER_SEND_MSG_BACK (spec 2.9, 7.2): retry topic with delay 3 + reconsumeTimes, DLQ."""

from __future__ import annotations

import pytest

from rmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from rmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from rmq.protocol.message import decode_records
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, props, uniq_key, unique, wait_until

# levels 1..6 all 1 s so the retry path (levels 3, 4, ...) is quick
CONF = {"messageDelayLevel": "1s 1s 1s 1s 1s 1s 1s 1s"}


async def _one(api: BrokerApi, topic: str, timeout: float = 10.0):
    found = []

    async def ready() -> bool:
        r = await api.pull(topic, 0, 0)
        if r.code == ResponseCode.SUCCESS:
            found[:] = decode_records(r.body)
            return True
        return False

    await wait_until(ready, timeout, f"a message in {topic}")
    return found


async def _send_back(api: BrokerApi, offset: int, group: str, delay: int, max_times: int | None):
    h = ConsumerSendMsgBackRequestHeader(offset, group, delay, None, None, False, max_times)
    return await api.call(RequestCode.CONSUMER_SEND_MSG_BACK, h.to_ext_fields())


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_send_back_retries_then_dead_letters(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, conf=CONF) as br:
        async with BrokerApi(br.addr) as api:
            topic, group = unique("RetryT"), unique("RetryG")
            await api.create_topic(topic, queues=1)
            uk = uniq_key()
            await api.send_ok(topic, b"payload", properties=props(uniq=uk, tags="TagR", keys="k1"))
            [orig] = await _one(api, topic)
            r = await _send_back(api, orig.commit_log_offset, group, 0, 2)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            retry_topic = f"%RETRY%{group}"
            [m1] = await _one(api, retry_topic)
            assert m1.reconsume_times == 1 and m1.body == b"payload"
            assert m1.properties["RETRY_TOPIC"] == topic
            assert m1.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
            assert m1.properties["UNIQ_KEY"] == uk and m1.properties["TAGS"] == "TagR"
            assert m1.properties["REAL_TOPIC"] == retry_topic  # went through SCHEDULE_TOPIC_XXXX
            # second failure: level 3 + 1 = 4
            r = await _send_back(api, m1.commit_log_offset, group, 0, 2)
            assert r.code == ResponseCode.SUCCESS

            async def two() -> bool:
                rr = await api.pull(retry_topic, 0, 1)
                return rr.code == ResponseCode.SUCCESS

            await wait_until(two, 10, "second retry")
            m2 = decode_records((await api.pull(retry_topic, 0, 1)).body)[0]
            assert m2.reconsume_times == 2
            assert m2.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id  # kept across retries
            # reconsumeTimes (2) >= maxReconsumeTimes (2): dead letter, no delay
            r = await _send_back(api, m2.commit_log_offset, group, 0, 2)
            assert r.code == ResponseCode.SUCCESS
            [d] = await _one(api, f"%DLQ%{group}", timeout=3)
            assert d.reconsume_times == 3 and d.body == b"payload"
            assert d.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
            assert "DELAY" not in d.properties
            topics = await api.topics()
            assert topics[f"%DLQ%{group}"].read_queue_nums == 1


async def test_delay_minus_one_goes_straight_to_dlq_and_errors(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, conf=CONF) as br:
        async with BrokerApi(br.addr) as api:
            topic, group = unique("DlqT"), unique("DlqG")
            await api.create_topic(topic, queues=1)
            await api.send_ok(topic, b"x", properties=props(uniq=uniq_key()))
            [orig] = await _one(api, topic)
            r = await _send_back(api, orig.commit_log_offset, group, -1, 16)
            assert r.code == ResponseCode.SUCCESS
            [d] = await _one(api, f"%DLQ%{group}", timeout=3)
            assert d.reconsume_times == 1
            r = await _send_back(api, 123456789, group, 0, 16)
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "look message by offset failed, 123456789")
            # maxReconsumeTimes comes from the header only for clients >= V3_4_9; an older
            # client gets the group's retryMaxTimes (16): header max 0 sends a new client's
            # message straight to the DLQ, an old client's to the retry topic
            from rmq.protocol.frame import RemotingCommand

            h = ConsumerSendMsgBackRequestHeader(orig.commit_log_offset, group, 0, None, None, False, 0)
            old = RemotingCommand(
                RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=h.to_ext_fields(), version=MQVersion.V3_4_9 - 1
            )
            assert (await api.client.invoke(api.addr, old, 5)).code == ResponseCode.SUCCESS
            [m] = await _one(api, f"%RETRY%{group}")
            assert m.reconsume_times == 1


async def test_group_retry_queue_nums_and_max_times_are_honoured(tmp_path):
    """The subscription group's retryQueueNums and retryMaxTimes (set with
    `rmq admin updateSubGroup`) decide the retry topic's queues and, for a client older
    than V3_4_9 (no maxReconsumeTimes in its header), when a message goes to the DLQ."""
    import subprocess
    import sys

    from rmq.protocol.frame import RemotingCommand

    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, conf=CONF) as br:
        async with BrokerApi(br.addr) as api:
            topic, group = unique("GrpT"), unique("GrpG")
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rmq.cli",
                    "admin",
                    "updateSubGroup",
                    "-n",
                    ns.addr,
                    "-b",
                    br.addr,
                    "-g",
                    group,
                    "-q",
                    "3",
                    "-r",
                    "1",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            await api.create_topic(topic, queues=1)
            await api.send_ok(topic, b"g", properties=props(uniq=uniq_key()))
            [orig] = await _one(api, topic)

            async def old_client_send_back(offset: int) -> None:
                h = ConsumerSendMsgBackRequestHeader(offset, group, 0, None, None, False, None)
                req = RemotingCommand(
                    RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=h.to_ext_fields(), version=MQVersion.V3_4_9 - 1
                )
                r = await api.client.invoke(api.addr, req, 5)
                assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)

            await old_client_send_back(orig.commit_log_offset)
            retry = f"%RETRY%{group}"
            assert (await api.topics())[retry].write_queue_nums == 3
            found = []

            async def retried() -> bool:
                for q in range(3):
                    rr = await api.pull(retry, q, 0)
                    if rr.code == ResponseCode.SUCCESS:
                        found[:] = decode_records(rr.body)
                        return True
                return False

            await wait_until(retried, 10, "the retried message")
            assert found[0].reconsume_times == 1
            # reconsumeTimes 1 >= the group's retryMaxTimes 1: dead letter
            await old_client_send_back(found[0].commit_log_offset)
            [d] = await _one(api, f"%DLQ%{group}", timeout=5)
            assert d.reconsume_times == 2 and d.body == b"g"
