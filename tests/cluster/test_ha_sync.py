"""SYNC_MASTER: a put is answered once the slave has it.

* 8 concurrent producers send 20 000 messages; every message answered SEND_OK is on
  the slave (the failover half of the issue's test 2, a SIGKILL of the master
  mid-stream, is built on the same produce() / uniq_keys_on() pieces).
* no slave: SLAVE_NOT_AVAILABLE (response code 11), stored on the master;
* the slave killed mid-stream (frozen, then SIGKILL): the puts it never acked are
  answered FLUSH_SLAVE_TIMEOUT (12) after slaveTimeout, later ones SLAVE_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import time

import pytest

from rmq.client import SendStatus
from rmq.protocol.codes import ResponseCode
from tests.cluster.ha_util import (
    acks,
    ha_group,
    ha_status,
    master_conf,
    produce,
    slave_conf,
    uniq_keys_on,
    wait_in_sync,
)
from tests.integration.broker_util import BrokerApi, wait_until

pytestmark = pytest.mark.timeout(240)

QUEUES = 8
SLAVE_TIMEOUT_MS = 1500


async def _topic(g, topic: str) -> None:
    async with BrokerApi(g.master.addr) as api:
        r = await api.create_topic(topic, QUEUES)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


@pytest.mark.slow
async def test_every_send_ok_of_8_producers_is_on_the_slave():
    topic = "HASync"
    with ha_group(master_conf("SYNC_MASTER"), slave_conf(slaveReadEnable="true", slaveSyncInterval=500)) as g:
        await _topic(g, topic)
        await wait_in_sync(g)
        t0 = time.monotonic()
        log = await produce(g.ns.addr, topic, producers=8, total=20_000)
        took = time.monotonic() - t0
        assert log.errors == [] and log.statuses == {"SEND_OK": 20_000}, (log.statuses, log.errors[:3])
        assert len(log.ok) == 20_000
        # The slave had each message before its producer heard SEND_OK: no wait needed
        # for the CommitLog (only for the slave's own dispatch into ConsumeQueues).
        m, s = await ha_status(g.master.addr), await ha_status(g.slave.addr)
        assert s["commitLogMaxOffset"] == m["commitLogMaxOffset"]
        assert list(acks(m).values()) == [m["commitLogMaxOffset"]]
        await wait_in_sync(g)
        on_slave = await uniq_keys_on(g.slave.addr, topic, QUEUES)
        assert len(on_slave) == len(set(on_slave)) == 20_000
        assert log.ok <= set(on_slave)
        print(f"\n[ha sync] 20000 SYNC_MASTER sends from 8 producers in {took:.1f} s")


async def test_sync_master_without_slave_answers_slave_not_available():
    with ha_group(master_conf("SYNC_MASTER", slaveTimeout=SLAVE_TIMEOUT_MS), slave_conf(), start_slave=False) as g:
        await _topic(g, "HANoSlave")
        async with BrokerApi(g.master.addr) as api:
            t0 = time.monotonic()
            r = await api.send("HANoSlave", b"alone")
            assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE == 11
            assert time.monotonic() - t0 < 1.0  # not a wait for a timeout
            # stored on the master all the same (RocketMQ: sendOK with this status)
            assert r.ext_fields["queueOffset"] == "0" and r.ext_fields["msgId"]
            data, _ = await api.pull_all("HANoSlave", 0)
            assert b"alone" in data
            # WAIT=false: no replication wait at all
            r = await api.send("HANoSlave", b"nowait", properties="WAIT\x01false\x02")
            assert r.code == ResponseCode.SUCCESS
        # with a slave the same put is PUT_OK
        g.slave.start()
        await wait_in_sync(g)
        async with BrokerApi(g.master.addr) as api:
            assert (await api.send("HANoSlave", b"replicated")).code == ResponseCode.SUCCESS


async def test_slave_killed_mid_stream_flush_slave_timeout_then_not_available():
    topic = "HAKilled"
    with ha_group(master_conf("SYNC_MASTER", slaveTimeout=SLAVE_TIMEOUT_MS), slave_conf()) as g:
        await _topic(g, topic)
        await wait_in_sync(g)
        codes: list[tuple[float, int, float]] = []  # (sent at, code, answer time)
        stop = asyncio.Event()

        async def sender(k: int) -> None:
            async with BrokerApi(g.master.addr) as api:
                i = 0
                while not stop.is_set():
                    t = time.monotonic()
                    r = await api.send(topic, b"m%d-%d" % (k, i), queue_id=k % QUEUES, timeout=10)
                    codes.append((t, r.code, time.monotonic() - t))
                    i += 1

        senders = [asyncio.create_task(sender(k)) for k in range(16)]
        await wait_until(lambda: len(codes) > 500, 30, "sends never got going")
        # Frozen first, so that puts are surely waiting for it when it dies (a slave
        # that acked everything an instant before its SIGKILL leaves nothing to time out).
        g.slave.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        await asyncio.sleep(0.3)
        g.slave.kill()
        killed = time.monotonic()
        await asyncio.sleep(SLAVE_TIMEOUT_MS / 1000 + 1.5)
        stop.set()
        await asyncio.gather(*senders)

        by_code = collections.Counter(c for _, c, _ in codes)
        assert set(by_code) <= {
            ResponseCode.SUCCESS,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
            ResponseCode.SLAVE_NOT_AVAILABLE,
        }, by_code
        timeouts = [(t, d) for t, c, d in codes if c == ResponseCode.FLUSH_SLAVE_TIMEOUT]
        assert timeouts, by_code  # the puts in flight at the kill
        for t, d in timeouts:
            assert stopped - 0.5 <= t <= killed + 0.5
            assert SLAVE_TIMEOUT_MS / 1000 * 0.9 <= d <= SLAVE_TIMEOUT_MS / 1000 + 1.0, d
        late = [c for t, c, _ in codes if t > killed + 0.5]
        assert late and set(late) == {ResponseCode.SLAVE_NOT_AVAILABLE}, collections.Counter(late)
        assert (await ha_status(g.master.addr))["haConnectionInfo"] == []
        print(
            f"\n[ha sync] slave SIGKILLed: {by_code[ResponseCode.FLUSH_SLAVE_TIMEOUT]} "
            f"FLUSH_SLAVE_TIMEOUT, then {by_code[ResponseCode.SLAVE_NOT_AVAILABLE]} "
            f"SLAVE_NOT_AVAILABLE"
        )


async def test_client_sees_slave_statuses():
    """rmq.client maps the codes to SendStatus as the Java client does (no retry)."""
    with ha_group(master_conf("SYNC_MASTER", slaveTimeout=SLAVE_TIMEOUT_MS), slave_conf(), start_slave=False) as g:
        await _topic(g, "HAClientStatus")
        log = await produce(g.ns.addr, "HAClientStatus", producers=2, total=10)
        assert log.statuses == {SendStatus.SLAVE_NOT_AVAILABLE.name: 10} and not log.ok
