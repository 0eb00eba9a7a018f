"""INVOKE_BROKER_TO_RESET_OFFSET: offsets by time, committed and pushed to live consumers."""

from __future__ import annotations

import asyncio
import time

from rmq.protocol.bodies import loads_object_keyed_map
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import ResetOffsetRequestHeader
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, props, uniq_key, unique, wait_until


async def test_reset_offset_by_time_commits_and_notifies(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr) as br:
        async with BrokerApi(br.addr) as api, BrokerApi(br.addr) as consumer:
            topic, group = unique("ResetT"), unique("ResetG")
            await api.create_topic(topic, queues=2)
            for i in range(4):
                await api.send_ok(topic, b"early", queue_id=i % 2, properties=props(uniq=uniq_key()))
            await asyncio.sleep(0.05)
            mid = int(time.time() * 1000)
            await asyncio.sleep(0.05)
            for i in range(6):
                await api.send_ok(topic, b"late", queue_id=i % 2, properties=props(uniq=uniq_key()))
            for q in (0, 1):
                await api.update_offset(group, topic, q, 5)
            pushed: list[RemotingCommand] = []
            consumer.client.register_processor(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, lambda conn, cmd: pushed.append(cmd)
            )
            await consumer.heartbeat("127.0.0.1@reset", [(group, [(topic, "*")])])
            h = ResetOffsetRequestHeader(topic, group, mid, False)
            r = await api.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, h.to_ext_fields())
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            table = {k["queueId"]: v for k, v in loads_object_keyed_map(r.body, "offsetTable")}
            assert table == {0: 2, 1: 2}  # first message stored after `mid` in each queue
            for q in (0, 1):
                assert int((await api.query_offset(group, topic, q)).ext_fields["offset"]) == 2
            await wait_until(lambda: pushed, 5, "RESET_CONSUMER_CLIENT_OFFSET at the consumer")
            assert loads_object_keyed_map(pushed[0].body, "offsetTable") == loads_object_keyed_map(
                r.body, "offsetTable"
            )
            # without force a reset never moves an offset forward; -1 = the end of each queue
            h = ResetOffsetRequestHeader(topic, group, -1, False)
            r = await api.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, h.to_ext_fields())
            assert {k["queueId"]: v for k, v in loads_object_keyed_map(r.body, "offsetTable")} == {0: 2, 1: 2}
            h = ResetOffsetRequestHeader(topic, group, -1, True)
            r = await api.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, h.to_ext_fields())
            assert {k["queueId"]: v for k, v in loads_object_keyed_map(r.body, "offsetTable")} == {0: 5, 1: 5}
            h = ResetOffsetRequestHeader("NoSuchTopic", group, -1, True)
            r = await api.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, h.to_ext_fields())
            assert r.code == ResponseCode.SYSTEM_ERROR and "no topic in this broker" in r.remark
