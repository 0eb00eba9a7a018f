"""Issue 5, test 2: automatic failover of a SYNC_MASTER under load.

8 concurrent producers send 20 000 messages; the master is SIGKILLed mid-stream; the
controller (one NameServer, controllerMasterTimeout 2 s) promotes the slave and the
producers carry on there. Afterwards every message answered SEND_OK (by either
broker), and every one the new master answered as stored, can be pulled from the new
master; duplicates (by UNIQ_KEY) exist only for messages the application resent after
an error. Prints the failover time: SIGKILL -> first send the new master answered.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rmq.remoting.client import RemotingClient
from tests.cluster.failover_util import (
    SendLog,
    create_topic,
    duplicates,
    failover_group,
    produce_through,
    wait_dispatched,
    wait_master,
)
from tests.cluster.ha_util import ha_status, uniq_keys_on, wait_topic_on
from tests.integration.broker_util import route, wait_until

pytestmark = pytest.mark.timeout(240)

QUEUES = 8
TOTAL = 20_000
KILL_AFTER = 6_000  # SEND_OKs before the master dies


async def wait_confirmed_slave(master: str) -> None:
    async def one() -> bool:
        return (await ha_status(master))["inSyncSlaveNums"] == 1

    await wait_until(one, 30, "the slave never got in sync", 0.05)


@pytest.mark.slow
async def test_sync_master_killed_mid_stream_every_send_ok_is_on_the_new_master():
    topic = "FoSync"
    with failover_group("SYNC_MASTER") as g:
        await create_topic(g.a.addr, topic, QUEUES)
        await wait_topic_on(g.b.addr, topic)
        await wait_confirmed_slave(g.a.addr)

        log = SendLog()
        half = asyncio.Event()
        killed_at = 0.0

        def progress(lg: SendLog) -> None:
            if len(lg.acked) >= KILL_AFTER:
                half.set()

        routed_at = 0.0

        async def killer() -> None:
            nonlocal killed_at, routed_at
            await half.wait()
            g.a.kill()
            killed_at = time.monotonic()
            client = RemotingClient()
            try:
                while True:  # the NameServer's route names the new master
                    _, rd = await route(client, g.ns.addr, topic)
                    if rd is not None and rd.broker_datas[0].broker_addrs == {0: g.b.addr}:
                        routed_at = time.monotonic()
                        return
                    await asyncio.sleep(0.02)
            finally:
                await client.close()

        t0 = time.monotonic()
        kill = asyncio.create_task(killer())
        await produce_through(g.ns.addr, topic, producers=8, total=TOTAL, log=log, progress=progress)
        took = time.monotonic() - t0
        await kill
        await wait_master(g.b.addr)

        assert not log.lost_sends, log.lost_sends[:3]
        answered = len(log.acked) + len(log.stored)
        assert answered == TOTAL, answered
        on_a, on_b = log.stored_on(g.a.addr), log.stored_on(g.b.addr)
        assert len(on_a) >= KILL_AFTER and on_b, (len(on_a), len(on_b))
        failover_s = log.first_at[g.b.addr] - killed_at
        assert routed_at and routed_at <= log.first_at[g.b.addr] + 0.5

        await wait_dispatched(g.b.addr)
        keys = await uniq_keys_on(g.b.addr, topic, QUEUES)
        have = set(keys)
        missing_ok = set(log.acked) - have
        assert not missing_ok, f"{len(missing_ok)} SEND_OK messages are not on the new master"
        missing_stored = on_b - have
        assert not missing_stored, f"{len(missing_stored)} messages the new master stored are gone"
        dups = duplicates(keys)
        assert set(dups) <= log.resent, "a duplicate that no application retry explains"
        statuses: dict[str, int] = {"SEND_OK": len(log.acked)}
        for st, _ in log.stored.values():
            statuses[st] = statuses.get(st, 0) + 1
        print(
            f"\n[failover sync] {TOTAL} messages from 8 producers in {took:.1f} s; master "
            f"SIGKILLed after {KILL_AFTER} SEND_OK; failover (SIGKILL -> first send answered "
            f"by the new master) {failover_s:.2f} s (route at brokerId 0 after "
            f"{routed_at - killed_at:.2f} s); answers {statuses}; send errors "
            f"during the failover {dict(log.errors)}; resent {len(log.resent)}; on the new "
            f"master {len(keys)} messages, {len(dups)} duplicates (all resent messages)"
        )
