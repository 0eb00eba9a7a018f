"""POP across a failover: messages popped from a SYNC_MASTER and not acked are re-delivered
by the slave the controller promotes after the master is SIGKILLed (its revive loop starts
with the master role and reads the replicated revive log)."""

from __future__ import annotations

import time

import pytest

from rmq.client import pop_api
from rmq.protocol.codes import ResponseCode
from rmq.protocol.message import MessageExt
from tests.cluster.failover_util import create_topic, failover_group, wait_master
from tests.cluster.ha_util import GROUP, ha_status, wait_topic_on
from tests.integration.broker_util import BrokerApi, props, uniq_key, unique, wait_until

pytestmark = pytest.mark.timeout(180)


async def _pop_all(api: BrokerApi, group: str, topic: str, want: set[str], deadline_s: float) -> list[MessageExt]:
    got: list[MessageExt] = []
    end = time.monotonic() + deadline_s
    while {m.uniq_key for m in got} < want and time.monotonic() < end:
        try:
            r = await pop_api.pop(
                api.client, api.addr, GROUP, group, topic, invisible_ms=60_000, poll_ms=1000, timeout=5
            )
        except OSError:
            continue
        if r.found:
            got += r.messages
    return got


async def test_promoted_slave_revives_what_the_old_master_popped() -> None:
    topic, group = unique("PopFo"), unique("GPopFo")
    with failover_group("SYNC_MASTER") as g:
        await create_topic(g.a.addr, topic, 2)
        await wait_topic_on(g.b.addr, topic)

        async def in_sync() -> bool:
            return (await ha_status(g.a.addr))["inSyncSlaveNums"] == 1

        await wait_until(in_sync, 30, "the slave never got in sync", 0.05)
        async with BrokerApi(g.a.addr) as api:
            sent = set()
            for i in range(4):
                uk = uniq_key()
                r = await api.send(topic, b"fo%d" % i, queue_id=i % 2, properties=props(tags="A", uniq=uk))
                assert r.code == ResponseCode.SUCCESS, r.remark
                sent.add(uk)
            popped: list[MessageExt] = []
            end = time.monotonic() + 20
            while {m.uniq_key for m in popped} != sent and time.monotonic() < end:
                r = await pop_api.pop(api.client, api.addr, GROUP, group, topic, invisible_ms=3000, poll_ms=1000)
                popped += r.messages
            assert {m.uniq_key for m in popped} == sent
        g.a.kill()  # popped, not acked: the cks are on the slave (SYNC_MASTER waited for it)
        await wait_master(g.b.addr, 60)
        async with BrokerApi(g.b.addr) as api:
            back = await _pop_all(api, group, topic, sent, 60)
        # revived from the replicated cks (reconsume 1), or read again from the queue if the
        # slave's copy of the consumer offset was older than the pop
        assert {m.uniq_key for m in back} == sent, g.b.log_text()[-6000:]
        assert {m.reconsume_times for m in back} <= {0, 1}
