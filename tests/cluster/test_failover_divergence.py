"""Issue 5, test 3: a returning old master truncates what no one else has.

An ASYNC_MASTER keeps writing while its slave is frozen (SIGSTOP), so it holds a tail
the slave never received (more than the socket buffers between them can carry).
The master is SIGKILLed, the slave thawed and promoted, writes go on there, and the
old master comes back on its old address: it joins as a slave, the HA handshake finds
where the two epoch histories part, it truncates its tail (log line), catches up, and
ends with the new master's CommitLog byte for byte and the same ConsumeQueues.
"""

from __future__ import annotations

import os
import re
import signal

import pytest

from rmq.client import Message, Producer
from tests.cluster.failover_util import create_topic, failover_group, restart, wait_master, wait_slave
from tests.cluster.ha_util import acks, assert_commitlogs_identical, consume_queue_digests, ha_status, wait_topic_on
from tests.integration.broker_util import wait_until

pytestmark = pytest.mark.timeout(240)

QUEUES = 4
TAIL = 24 << 20  # written while the slave is frozen: beyond what sockets buffer


async def _send_batches(ns: str, topic: str, group: str, nbytes: int, body: int = 4000) -> int:
    per_batch = 64
    batches = max(nbytes // (body * per_batch), 1)
    async with Producer(group, ns, instance_name=group) as p:
        for i in range(batches):
            msgs = [
                Message(topic, os.urandom(body // 2).hex().encode(), keys=f"{group}-{i}-{j}") for j in range(per_batch)
            ]
            await p.send_batch(msgs)
    return batches * per_batch


@pytest.mark.slow
async def test_returning_master_truncates_its_unreplicated_tail_and_ends_identical():
    topic = "FoDiverge"
    with failover_group("ASYNC_MASTER") as g:
        old, new = g.a, g.b
        await create_topic(old.addr, topic, QUEUES)
        await wait_topic_on(new.addr, topic)
        await _send_batches(g.ns.addr, topic, "fo_before", 2 << 20)

        async def replicated() -> bool:
            m = await ha_status(old.addr)
            return list(acks(m).values()) == [m["commitLogMaxOffset"]]

        await wait_until(replicated, 30, "the slave never caught up", 0.05)

        os.kill(new.pid, signal.SIGSTOP)
        try:
            await _send_batches(g.ns.addr, topic, "fo_tail", TAIL)
            old_end = (await ha_status(old.addr))["commitLogMaxOffset"]
            old.kill()
        finally:
            os.kill(new.pid, signal.SIGCONT)
        await wait_master(new.addr)
        s = await ha_status(new.addr)
        start = s["epochStartOffset"]
        assert s["epoch"] == 2 and old_end - start > (1 << 20), (
            f"no real unreplicated tail: old master ended at {old_end}, the new epoch starts at {start}"
        )

        await _send_batches(g.ns.addr, topic, "fo_after", 2 << 20)
        restart(old)
        await wait_slave(old.addr)

        async def same_end() -> bool:
            a, b = await ha_status(old.addr), await ha_status(new.addr)
            return (
                a["commitLogMaxOffset"] == b["commitLogMaxOffset"]
                and a["dispatchBehindBytes"] == 0
                and b["dispatchBehindBytes"] == 0
            )

        await wait_until(same_end, 60, "the old master never caught up", 0.1)
        text = old.log_text()
        m = re.search(r"agree up to offset (\d+); truncating the (\d+) bytes", text)
        assert m, "the old master logged no truncation"
        point, cut = int(m.group(1)), int(m.group(2))
        assert point == start and cut == old_end - start, (point, cut, start, old_end)
        a_status = await ha_status(old.addr)
        assert (a_status["epoch"], a_status["epochStartOffset"]) == (2, start)

        files = assert_commitlogs_identical(new.store_dir, old.store_dir)
        assert consume_queue_digests(old.store_dir) == consume_queue_digests(new.store_dir)
        print(
            f"\n[failover divergence] old master ended at {old_end}, new epoch 2 from "
            f"{start}: {cut} bytes truncated on return; {files} CommitLog files identical, "
            f"ConsumeQueues equal"
        )
