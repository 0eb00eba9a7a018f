"""Timer messages across a failover (controller mode, real processes): timers pending on a
SYNC_MASTER that is SIGKILLed are delivered by the promoted slave, which resumes from the
progress it copied from its master (a timer delivered and checkpointed before the kill is
not delivered again; the progress reaches the slave's config/timercheck through
GET_TIMER_CHECK_POINT, and no consumer offsets of an internal timer group exist)."""

from __future__ import annotations

import time

import pytest

from rmq.broker.timer import TIMER_CHECK_FILE, TIMER_GROUP, decode_timer_check
from rmq.protocol.bodies import loads_fastjson
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_records
from tests.cluster.failover_util import failover_group, wait_master, wait_slave
from tests.cluster.test_failover_consume import _ready
from tests.integration.broker_util import BrokerApi, props, uniq_key, unique, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def _keys(api: BrokerApi, topic: str) -> list[str]:
    out: list[str] = []
    offset = 0
    while True:
        r = await api.pull(topic, 0, offset)
        if r.code != ResponseCode.SUCCESS:
            return out
        out += [m.properties.get("UNIQ_KEY", "") for m in decode_records(r.body)]
        offset = int(r.ext_fields["nextBeginOffset"])


async def test_promoted_slave_delivers_pending_timers():
    topic = unique("TimerFailover")
    with failover_group("SYNC_MASTER") as g:
        await wait_master(g.a.addr)
        await wait_slave(g.b.addr)
        await _ready(g, topic)  # (its queues: the timers here go to queue 0)
        async with BrokerApi(g.a.addr) as api:
            early = uniq_key()
            await api.send_ok(topic, b"early", properties=props(uniq=early, wait="true", TIMER_DELAY_SEC="1"))

            async def early_delivered() -> bool:
                return early in await _keys(api, topic)

            await wait_until(early_delivered, 10, "the early timer on the master")
        # its checkpoint (every 1 s) reaches the slave's config/timercheck (slave sync,
        # 1 s): the lowest undelivered timer offset is past it
        async with BrokerApi(g.b.addr) as slave:

            async def progress_copied() -> bool:
                r = await slave.call(RequestCode.GET_TIMER_CHECK_POINT)
                return r.code == ResponseCode.SUCCESS and decode_timer_check(r.body or b"")[0].low == 1

            await wait_until(progress_copied, 15, "the timer progress on the slave")
            copied = decode_timer_check((await slave.call(RequestCode.GET_TIMER_CHECK_POINT)).body or b"")
            assert decode_timer_check((g.b.store_dir / "config" / TIMER_CHECK_FILE).read_bytes()) == copied
            # the progress is no consumer group's offsets, on either broker
            for addr in (g.a.addr, g.b.addr):
                async with BrokerApi(addr) as api:
                    r = await api.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
                    table = loads_fastjson(r.body or b"{}")["offsetTable"]
                    assert not [k for k in table if k.endswith("@" + TIMER_GROUP)], table
        async with BrokerApi(g.a.addr) as api:
            pending = [uniq_key() for _ in range(3)]
            deliver_at = int(time.time() * 1000) + 5000
            for uk in pending:
                await api.send_ok(
                    topic, uk.encode(), properties=props(uniq=uk, wait="true", TIMER_DELIVER_MS=str(deliver_at))
                )
            assert await _keys(api, topic) == [early]
        g.a.kill()
        await wait_master(g.b.addr)
        async with BrokerApi(g.b.addr) as api:

            async def all_there() -> bool:
                got = await _keys(api, topic)
                return all(uk in got for uk in pending)

            await wait_until(all_there, max(0.0, deliver_at / 1000 - time.time()) + 20, "timers on the new master")
            assert time.time() * 1000 >= deliver_at - 50
            got = await _keys(api, topic)
            assert got.count(early) == 1, got
            assert sorted(got) == sorted([early, *pending])
