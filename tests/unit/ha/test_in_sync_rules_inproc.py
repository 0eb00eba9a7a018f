"""In-sync replica rules (inSyncReplicas, minInSyncReplicas, enableAutoInSyncReplicas,
allAckInSyncStateSet) on a real HAService with two real HAClients in one event loop
(three stores, small files): what a SYNC_MASTER's put waits for and when it is refused."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from ha.client import HAClient
from ha.service import HAService
from rmq.broker.config import BrokerConfig, apply_broker_properties
from rmq.broker.runtime_config import all_config_properties
from rmq.protocol.message import BatchItem, MessageExtBatch
from rmq.store.config import BrokerRole, ConfigError, MessageStoreConfig
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageStatus
from tests.unit.waiting import wait_until

from ..store.conftest import msg, small_config

FAST = dict(haSendHeartbeatInterval=200, haHousekeepingInterval=1000, slaveTimeout=400)
OK = PutMessageStatus.PUT_OK
NOT_AVAILABLE = PutMessageStatus.SLAVE_NOT_AVAILABLE
TIMEOUT = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
NOT_ENOUGH = PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH


@dataclass
class Group:
    master: MessageStore
    svc: HAService
    slaves: list[MessageStore]
    clients: list[HAClient]

    async def connect(self, i: int) -> None:
        c = self.clients[i]
        c.update_master_address(f"127.0.0.1:{self.svc.port}")
        await c.start()
        bid = c.broker_id
        await wait_until(lambda: any(s.hello and s.hello.broker_id == bid and s.ack >= 0 for s in self.svc.slaves))

    async def disconnect(self, i: int) -> None:
        bid = self.clients[i].broker_id
        await self.clients[i].stop()
        await wait_until(lambda: all(s.hello and s.hello.broker_id != bid for s in self.svc.slaves))

    def have(self, end: int) -> list[bool]:
        return [s.max_phy_offset >= end for s in self.slaves]


@contextlib.asynccontextmanager
async def group(tmp_path, confirm_reads: bool = False, **cfg: object) -> AsyncIterator[Group]:
    m = MessageStore(small_config(tmp_path / "m", brokerRole=BrokerRole.SYNC_MASTER, **{**FAST, **cfg}))
    m.load()
    await m.start()
    slaves = []
    for i in (1, 2):
        s = MessageStore(small_config(tmp_path / f"s{i}", brokerRole=BrokerRole.SLAVE, **FAST))
        s.load()
        await s.start()
        slaves.append(s)
    svc = HAService(m, cluster="C", broker_name="b", host="127.0.0.1", confirm_reads=confirm_reads)
    clients = [HAClient(s, cluster="C", broker_name="b", broker_id=i + 1) for i, s in enumerate(slaves)]
    await svc.start()
    m.replica_waiter = svc.replica_waiter
    try:
        yield Group(m, svc, slaves, clients)
    finally:
        for c in clients:
            await c.stop()
        await svc.stop()
        for s in (*slaves, m):
            await s.shutdown()


async def test_in_sync_replicas_3_waits_for_two_different_slaves(tmp_path):
    async with group(tmp_path, inSyncReplicas=3) as g:
        assert (await g.master.put(msg(body=b"alone"))).status is NOT_AVAILABLE
        await g.connect(0)
        # one slave is not enough to ever complete: stored, SLAVE_NOT_AVAILABLE at once
        r = await g.master.put(msg(body=b"one slave"))
        assert r.status is NOT_AVAILABLE and g.master.max_phy_offset == r.end_offset
        await g.connect(1)
        for i in range(50):
            r = await g.master.put(msg(body=b"x" * 300, KEYS=f"k{i}"))
            assert r.status is OK
            assert g.have(r.end_offset) == [True, True]  # both had it before PUT_OK
        info = g.svc.runtime_info()
        assert info["needAckNums"] == 3 and info["inSyncReplicasNums"] == 3 and info["inSyncSlaveNums"] == 2
        await g.disconnect(1)
        assert (await g.master.put(msg(body=b"one left"))).status is NOT_AVAILABLE
        assert g.svc.runtime_info()["inSyncReplicasNums"] == 2


async def test_in_sync_replicas_1_answers_without_a_slave(tmp_path):
    async with group(tmp_path, inSyncReplicas=1) as g:
        r = await g.master.put(msg(body=b"alone"))
        assert r.status is OK
        assert g.svc.runtime_info()["needAckNums"] == 1


async def test_auto_in_sync_replicas_degrades_to_what_is_in_sync(tmp_path):
    async with group(tmp_path, inSyncReplicas=3, enableAutoInSyncReplicas=True, minInSyncReplicas=1) as g:
        # no slave: durability on this master alone, SEND_OK
        assert (await g.master.put(msg(body=b"alone"))).status is OK
        await g.connect(0)
        r = await g.master.put(msg(body=b"one"))
        assert r.status is OK and g.have(r.end_offset)[0]
        await g.connect(1)
        assert g.svc.need_ack_nums(g.master.max_phy_offset) == 3
        for _ in range(20):
            r = await g.master.put(msg(body=b"two"))
            assert r.status is OK and g.have(r.end_offset) == [True, True]
        await g.disconnect(0)
        await g.disconnect(1)
        assert g.svc.need_ack_nums(g.master.max_phy_offset) == 1
        assert (await g.master.put(msg(body=b"gone"))).status is OK


async def test_min_in_sync_replicas_refuses_before_storing(tmp_path):
    async with group(tmp_path, minInSyncReplicas=2) as g:
        assert g.master.replica_gate == g.svc.refuse_put
        end = g.master.max_phy_offset
        r = await g.master.put(msg(body=b"refused"))
        assert r.status is NOT_ENOUGH and not r.status.stored
        assert "minInSyncReplicas is 2" in r.remark
        batch = MessageExtBatch(topic="TopicA", items=[BatchItem(0, b"b", "")])
        assert (await g.master.put_batch(batch)).status is NOT_ENOUGH
        assert g.master.max_phy_offset == end  # nothing stored
        # WAIT=false asks no replica (RocketMQ's needHandleHA): stored as usual
        assert (await g.master.put(msg(body=b"nowait", WAIT="false"))).status is OK
        await g.connect(0)
        r = await g.master.put(msg(body=b"replicated"))
        assert r.status is OK and g.have(r.end_offset)[0]
        await g.disconnect(0)
        assert (await g.master.put(msg(body=b"refused again"))).status is NOT_ENOUGH
    assert g.master.replica_gate is None  # the stopped service took its gate away


async def test_all_ack_in_sync_state_set_controller_mode(tmp_path):
    async with group(tmp_path, confirm_reads=True, allAckInSyncStateSet=True) as g:
        # only this master in the set: answered at once
        assert (await g.master.put(msg(body=b"alone"))).status is OK
        await g.connect(0)
        await g.connect(1)
        await wait_until(lambda: len(g.svc.synced_acks()) == 2)
        assert g.svc.runtime_info()["needAckNums"] == 3
        for _ in range(20):
            r = await g.master.put(msg(body=b"x"))
            assert r.status is OK and g.have(r.end_offset) == [True, True]
        # slave 2 leaves; the controller has not heard the smaller set yet: it is
        # still waited for (a put racing the shrink times out, is not acked by one)
        generation = g.svc.shrink_generation
        await g.disconnect(1)
        assert g.svc.shrink_generation == generation + 1
        assert g.svc.in_sync_set_size(g.master.max_phy_offset) == 3
        assert (await g.master.put(msg(body=b"racing"))).status is TIMEOUT
        # the controller confirmed the smaller set: slave 1 alone is the set now
        g.svc.release_departed(g.svc.shrink_generation)
        assert g.svc.in_sync_set_size(g.master.max_phy_offset) == 2
        r = await g.master.put(msg(body=b"smaller set"))
        assert r.status is OK and g.have(r.end_offset)[0]


async def test_all_ack_a_put_waiting_completes_when_the_shrink_is_confirmed(tmp_path):
    async with group(tmp_path, confirm_reads=True, allAckInSyncStateSet=True, slaveTimeout=3000) as g:
        await g.connect(0)
        await g.connect(1)
        await wait_until(lambda: len(g.svc.synced_acks()) == 2)
        await g.disconnect(1)
        result, waiter = g.master.put_nowait(msg(body=b"waiting"))
        assert waiter is not None
        await wait_until(lambda: g.slaves[0].max_phy_offset >= result.end_offset)
        g.svc.release_departed(g.svc.shrink_generation)
        assert await waiter is OK


async def test_all_ack_is_ignored_by_a_static_master(tmp_path):
    async with group(tmp_path, allAckInSyncStateSet=True) as g:
        # the one-slave rule as without the key
        assert (await g.master.put(msg(body=b"alone"))).status is NOT_AVAILABLE
        await g.connect(0)
        assert (await g.master.put(msg(body=b"one"))).status is OK


# ----------------------------------------------------------------------------- config
def test_config_keys_defaults_and_checks():
    c = MessageStoreConfig()
    assert (c.inSyncReplicas, c.minInSyncReplicas, c.allAckInSyncStateSet, c.enableAutoInSyncReplicas) == (
        0,
        1,
        False,
        False,
    )
    assert c.effective_in_sync_replicas == 2
    assert MessageStoreConfig(inSyncReplicas=1).effective_in_sync_replicas == 1
    for bad, key in (
        (dict(inSyncReplicas=-1), "inSyncReplicas"),
        (dict(minInSyncReplicas=0), "minInSyncReplicas"),
        (dict(minInSyncReplicas=3), "minInSyncReplicas"),
        (dict(inSyncReplicas=1, minInSyncReplicas=2), "minInSyncReplicas"),
    ):
        with pytest.raises(ConfigError, match=f"^{key}:"):
            MessageStoreConfig(**bad).validate()  # type: ignore[arg-type]
    MessageStoreConfig(minInSyncReplicas=3, allAckInSyncStateSet=True).validate()
    MessageStoreConfig(inSyncReplicas=3, minInSyncReplicas=2, enableAutoInSyncReplicas=True).validate()


def test_broker_conf_sets_the_keys_and_get_broker_config_lists_them():
    bc, sc = BrokerConfig(), MessageStoreConfig()
    props = {
        "inSyncReplicas": "3",
        "minInSyncReplicas": "2",
        "allAckInSyncStateSet": "true",
        "enableAutoInSyncReplicas": "true",
    }
    assert apply_broker_properties(bc, sc, props) == []
    assert (sc.inSyncReplicas, sc.minInSyncReplicas, sc.allAckInSyncStateSet, sc.enableAutoInSyncReplicas) == (
        3,
        2,
        True,
        True,
    )
    listed = all_config_properties(bc, sc)
    assert {k: listed[k] for k in props} == props
