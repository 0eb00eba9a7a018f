"""Issue 5, test 5, and the manual switch.

* A push consumer (rmq.client) keeps consuming while its SYNC_MASTER is SIGKILLed and
  the slave takes over: it ends with every message that was answered SEND_OK, and
  every one the new master stored (duplicates allowed, counted and printed).
* ``rmq admin electMaster --brokerAddr <slave>`` switches a live SYNC_MASTER pair under
  load: the old master steps down to a slave (brokerId 1), no SEND_OK message is lost,
  and the old master ends with the new master's CommitLog and ConsumeQueues.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter

import pytest

from rmq.client import ConsumeFromWhere, ConsumeResult, PushConsumer
from tests.cluster.failover_util import (
    SendLog,
    create_topic,
    duplicates,
    failover_group,
    produce_through,
    role_of,
    wait_dispatched,
    wait_master,
    wait_slave,
)
from tests.cluster.ha_util import (
    assert_commitlogs_identical,
    consume_queue_digests,
    ha_status,
    uniq_keys_on,
    wait_topic_on,
)
from tests.integration.broker_util import wait_until

pytestmark = pytest.mark.timeout(240)

QUEUES = 4


async def _ready(g, topic: str) -> None:
    await create_topic(g.a.addr, topic, QUEUES)
    await wait_topic_on(g.b.addr, topic)

    async def confirmed() -> bool:
        return (await ha_status(g.a.addr))["inSyncSlaveNums"] == 1

    await wait_until(confirmed, 30, "the slave never got in sync", 0.05)


def _after(log: SendLog, n: int, event: asyncio.Event):
    def progress(lg: SendLog) -> None:
        if len(lg.acked) >= n:
            event.set()

    return progress


@pytest.mark.slow
async def test_push_consumer_loses_nothing_across_a_failover():
    topic = "FoConsume"
    with failover_group("SYNC_MASTER") as g:
        await _ready(g, topic)
        got: Counter[str] = Counter()

        def listener(msgs, ctx) -> ConsumeResult:
            for m in msgs:
                got[m.uniq_key] += 1
            return ConsumeResult.SUCCESS

        c = PushConsumer(
            "fo_cg",
            g.ns.addr,
            listener=listener,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            poll_name_server_interval=1000,
            instance_name="fo-consumer",
        )
        c.subscribe(topic, "*")
        await c.start()
        try:
            log = SendLog()
            half = asyncio.Event()

            async def killer() -> None:
                await half.wait()
                g.a.kill()

            kill = asyncio.create_task(killer())
            await produce_through(
                g.ns.addr, topic, producers=2, total=4000, log=log, progress=_after(log, 1500, half), pace=0.002
            )
            await kill
            await wait_master(g.b.addr)
            must = set(log.acked) | log.stored_on(g.b.addr)

            async def all_consumed() -> bool:
                return must <= set(got)

            try:
                await wait_until(all_consumed, 60, "consumption", 0.1)
            except AssertionError:
                raise AssertionError(
                    f"{len(must - set(got))} of {len(must)} stored messages were never consumed"
                ) from None
        finally:
            await c.shutdown()
        assert not log.lost_sends, log.lost_sends[:3]
        dups = {k: n for k, n in got.items() if n > 1}
        on_b = await uniq_keys_on(g.b.addr, topic, QUEUES)
        print(
            f"\n[failover consume] {len(log.acked)} SEND_OK + {len(log.stored)} other stored "
            f"answers; consumed {len(got)} distinct messages, {len(dups)} more than once "
            f"({sum(dups.values()) - len(dups)} extra deliveries); the new master holds "
            f"{len(duplicates(on_b))} stored duplicates from {len(log.resent)} resends"
        )


def _admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rmq.cli", "admin", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.slow
async def test_elect_master_switches_a_live_pair_without_losing_acked_messages():
    topic = "FoElect"
    with failover_group("SYNC_MASTER") as g:
        await _ready(g, topic)
        log = SendLog()
        half = asyncio.Event()
        switched_at = 0.0

        async def switch() -> subprocess.CompletedProcess[str]:
            nonlocal switched_at
            await half.wait()
            switched_at = time.monotonic()
            return await asyncio.to_thread(
                _admin, "electMaster", "-n", g.ns.addr, "-b", "broker-a", "--brokerAddr", g.b.addr
            )

        sw = asyncio.create_task(switch())
        await produce_through(
            g.ns.addr, topic, producers=4, total=6000, log=log, progress=_after(log, 1500, half), pace=0.001
        )
        r = await sw
        assert r.returncode == 0, r.stdout + r.stderr
        await wait_master(g.b.addr)
        await wait_slave(g.a.addr)
        assert await role_of(g.a.addr) == ("SLAVE", 1)

        async def same_end() -> bool:
            a, b = await ha_status(g.a.addr), await ha_status(g.b.addr)
            return (
                a["commitLogMaxOffset"] == b["commitLogMaxOffset"]
                and a["dispatchBehindBytes"] == 0
                and b["dispatchBehindBytes"] == 0
            )

        await wait_until(same_end, 60, "the old master never caught up", 0.1)

        assert not log.lost_sends, log.lost_sends[:3]
        await wait_dispatched(g.b.addr)
        keys = await uniq_keys_on(g.b.addr, topic, QUEUES)
        missing = set(log.acked) - set(keys)
        assert not missing, f"{len(missing)} SEND_OK messages lost in the switch"
        assert set(duplicates(keys)) <= log.resent
        assert_commitlogs_identical(g.b.store_dir, g.a.store_dir)
        assert consume_queue_digests(g.a.store_dir) == consume_queue_digests(g.b.store_dir)
        assert log.stored_on(g.b.addr) <= set(keys)
        # stored by the old master but never acked (SLAVE_NOT_AVAILABLE once its slave
        # had gone to lead): its tail after the new epoch's start, truncated on return
        dropped = log.stored_on(g.a.addr) - set(log.acked) - set(keys)
        statuses: Counter[str] = Counter(st for st, _ in log.stored.values())
        first_b = log.first_at.get(g.b.addr, switched_at) - switched_at
        print(
            f"\n[electMaster] switch under load: first answer from the new master "
            f"{first_b:.2f} s after electMaster was run; {len(log.acked)} SEND_OK, other "
            f"answers {dict(statuses)}, send errors {dict(log.errors)}; "
            f"{len(duplicates(keys))} duplicates from {len(log.resent)} resends; "
            f"{len(dropped)} messages the old master stored without SEND_OK were "
            f"truncated on its return ({'truncating the' in g.a.log_text()})"
        )
