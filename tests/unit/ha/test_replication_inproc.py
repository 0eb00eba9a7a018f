"""HAService + HAClient in one event loop over 127.0.0.1 (two real stores, small files):
streaming, SYNC waits, heartbeats and housekeeping, and stopping/starting both sides at
runtime (what a role change does), without broker processes."""

from __future__ import annotations

import asyncio
import os

from ha.client import HAClient
from ha.service import HAService
from rmq.store.config import BrokerRole
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageStatus
from tests.unit.waiting import wait_until

from ..store.conftest import msg, small_config

FAST = dict(haSendHeartbeatInterval=200, haHousekeepingInterval=1000, slaveTimeout=500)


async def _open(root, **cfg) -> MessageStore:
    st = MessageStore(small_config(root, **FAST, **cfg))
    st.load()
    await st.start()
    return st


def _same_files(a: MessageStore, b: MessageStore) -> bool:
    da, db = a.config.commitlog_dir, b.config.commitlog_dir
    names = sorted(os.listdir(db))
    return bool(names) and all(
        open(os.path.join(da, n), "rb").read() == open(os.path.join(db, n), "rb").read() for n in names
    )


async def test_stream_sync_waits_heartbeats_and_runtime_restart(tmp_path):
    m = await _open(tmp_path / "m", brokerRole=BrokerRole.SYNC_MASTER)
    s = await _open(tmp_path / "s", brokerRole=BrokerRole.SLAVE)
    svc = HAService(m, cluster="C", broker_name="b", host="127.0.0.1")
    client = HAClient(s, cluster="C", broker_name="b", broker_id=1)
    try:
        await svc.start()
        await svc.start()  # idempotent
        m.replica_waiter = svc.replica_waiter
        # no slave yet: a SYNC put is stored and answered SLAVE_NOT_AVAILABLE at once
        r = await m.put(msg(body=b"alone"))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        client.update_master_address(f"127.0.0.1:{svc.port}")
        await client.start()
        await wait_until(lambda: client.connected and svc.slave_ack_offsets())
        for i in range(200):  # spans several 16 KiB files
            r = await m.put(msg(body=os.urandom(300), KEYS=f"k{i}"))
            assert r.status is PutMessageStatus.PUT_OK
            assert s.max_phy_offset >= r.end_offset  # the slave had it before PUT_OK
        assert list(svc.slave_ack_offsets().values()) == [m.max_phy_offset]
        assert svc.in_sync_replicas() == 2
        await wait_until(lambda: s.dispatch_behind_bytes == 0 and m.dispatch_behind_bytes == 0)
        assert _same_files(m, s)
        assert s.get_max_offset_in_queue("TopicA", 0) == m.get_max_offset_in_queue("TopicA", 0)

        # idle for longer than housekeeping: heartbeats both ways keep the connection
        await asyncio.sleep(1.6)
        assert client.connects == 1 and client.connected

        # the master's HA stops (a role change): waiting puts are answered, the slave
        # reconnects when it is back, and continues where it was
        await svc.stop()
        await svc.stop()  # idempotent
        r = await m.put(msg(body=b"no slave now"))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        port = svc.port
        svc2 = HAService(m, cluster="C", broker_name="b", host="127.0.0.1", port=port)
        await svc2.start()
        m.replica_waiter = svc2.replica_waiter
        await wait_until(lambda: client.connects == 2 and client.connected, 10)
        r = await m.put(msg(body=b"again"))
        assert r.status is PutMessageStatus.PUT_OK
        await wait_until(lambda: s.max_phy_offset == m.max_phy_offset)
        await svc2.stop()
    finally:
        await client.stop()
        await client.stop()  # idempotent
        await svc.stop()
        await s.shutdown()
        await m.shutdown()
    assert _same_files(m, s)


async def test_a_slave_of_another_group_is_refused(tmp_path):
    m = await _open(tmp_path / "m")
    s = await _open(tmp_path / "s", brokerRole=BrokerRole.SLAVE)
    svc = HAService(m, cluster="C", broker_name="b", host="127.0.0.1")
    client = HAClient(s, cluster="C", broker_name="other", broker_id=1)
    try:
        await svc.start()
        await m.put(msg(body=b"x"))
        client.update_master_address(f"127.0.0.1:{svc.port}")
        await client.start()
        await wait_until(lambda: client.last_reject is not None)
        assert "brokerName 'other'" in client.last_reject
        assert svc.slave_ack_offsets() == {} and s.max_phy_offset == 0
        assert svc.stats_rejected >= 1
    finally:
        await client.stop()
        await svc.stop()
        await s.shutdown()
        await m.shutdown()
