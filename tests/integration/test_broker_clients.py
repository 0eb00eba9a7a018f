"""Broker: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
NOTIFY_CONSUMER_IDS_CHANGED (40) — spec 2.7, 2.8.

A consumer heartbeat creates `%RETRY%<group>` (visible in GET_ALL_TOPIC_CONFIG and in the
NameServer route); each consumer connection of a group is told (oneway request, code 40)
when another one joins, unregisters or goes away.
"""

from __future__ import annotations

import asyncio

import pytest

from rmq.protocol.bodies import ConsumerIdList
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.headers import GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader
from rmq.remoting.client import RemotingClient
from tests.integration.broker_util import BrokerApi, broker_in_route, unique, wait_until
from tests.integration.rigs import ns_and_broker

pytestmark = pytest.mark.timeout(60)


cluster = ns_and_broker("broker-clients")


async def consumer_list(api: BrokerApi, group: str):
    return await api.call(
        RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader(group).to_ext_fields()
    )


async def test_consumer_heartbeat_creates_retry_topic(cluster):
    ns, br = cluster
    group, topic = unique("HbG"), unique("HbT")
    async with BrokerApi(br.addr) as api:
        retry = f"%RETRY%{group}"
        assert retry not in await api.topics()
        r = await api.heartbeat("127.0.0.1@hb1", [(group, [(topic, "*")])], producers=["HbPG"])
        assert r.code == ResponseCode.SUCCESS and r.remark is None
        tc = (await api.topics())[retry]
        assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, 6)
        took = await wait_until(
            lambda: broker_in_route(api.client, ns.addr, retry, br.addr),
            1.0,
            f"{retry} not in the NameServer route within 1 s",
        )
        rd = await broker_in_route(api.client, ns.addr, retry, br.addr)
        assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in rd.queue_datas] == [
            ("broker-a", 1, 1, 6)
        ]
        assert took < 1.0
        # a producer-only heartbeat creates nothing
        pg = unique("OnlyProducer")
        r = await api.heartbeat("127.0.0.1@hb2", producers=[pg])
        assert r.code == ResponseCode.SUCCESS
        assert f"%RETRY%{pg}" not in await api.topics()
        # a malformed body is an error, not a crash
        r = await api.call(RequestCode.HEART_BEAT, body=b"{not json")
        assert r.code == ResponseCode.SYSTEM_ERROR


async def test_consumer_list_and_unregister_client(cluster):
    ns, br = cluster
    group, topic = unique("ListG"), unique("ListT")
    async with BrokerApi(br.addr) as a, BrokerApi(br.addr) as b:
        r = await consumer_list(a, group)
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        assert (await a.heartbeat("10.0.0.1@A", [(group, [(topic, "*")])])).code == ResponseCode.SUCCESS
        assert (await b.heartbeat("10.0.0.2@B", [(group, [(topic, "*")])])).code == ResponseCode.SUCCESS
        r = await consumer_list(a, group)
        assert r.code == ResponseCode.SUCCESS
        assert sorted(ConsumerIdList.from_json(r.body).consumer_id_list) == ["10.0.0.1@A", "10.0.0.2@B"]
        # a repeated heartbeat does not duplicate the client
        await a.heartbeat("10.0.0.1@A", [(group, [(topic, "*")])])
        r = await consumer_list(b, group)
        assert sorted(ConsumerIdList.from_json(r.body).consumer_id_list) == ["10.0.0.1@A", "10.0.0.2@B"]
        u = await b.call(
            RequestCode.UNREGISTER_CLIENT, UnregisterClientRequestHeader("10.0.0.2@B", None, group).to_ext_fields()
        )
        assert u.code == ResponseCode.SUCCESS
        r = await consumer_list(a, group)
        assert ConsumerIdList.from_json(r.body).consumer_id_list == ["10.0.0.1@A"]
        # closing the connection removes the client too
        await a.close()
        await wait_until(lambda: _no_consumers(b, group), 3.0, "consumer still listed after its connection closed")


async def _no_consumers(api: BrokerApi, group: str) -> bool:
    return (await consumer_list(api, group)).code == ResponseCode.SYSTEM_ERROR


class Notified:
    """A client connection that records the broker's NOTIFY_CONSUMER_IDS_CHANGED requests."""

    def __init__(self, addr: str) -> None:
        self.events: list = []
        self.arrived = asyncio.Event()
        self.client = RemotingClient()
        self.client.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_notify)
        self.api = BrokerApi(addr, client=self.client)

    def _on_notify(self, conn, cmd):
        self.events.append(cmd)
        self.arrived.set()
        return None  # oneway: nothing to answer

    async def next(self, timeout: float = 2.0):
        await asyncio.wait_for(self.arrived.wait(), timeout)
        self.arrived.clear()
        return self.events[-1]

    async def quiet(self, seconds: float = 0.3) -> bool:
        n = len(self.events)
        await asyncio.sleep(seconds)
        return len(self.events) == n


async def test_notify_consumer_ids_changed_on_join_and_leave(cluster):
    ns, br = cluster
    group, topic = unique("NotifyG"), unique("NotifyT")
    first, second = Notified(br.addr), Notified(br.addr)
    try:
        assert (await first.api.heartbeat("c@1", [(group, [(topic, "*")])])).code == ResponseCode.SUCCESS
        first.events.clear()
        first.arrived.clear()
        # a repeated heartbeat of a known member changes nothing: no notification
        await first.api.heartbeat("c@1", [(group, [(topic, "*")])])
        assert await first.quiet()

        # the second joins: the first is told
        await second.api.heartbeat("c@2", [(group, [(topic, "*")])])
        cmd = await first.next()
        assert cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        assert cmd.is_oneway and not cmd.is_response
        assert cmd.ext_fields == {"consumerGroup": group}

        # the second unregisters: told again
        await second.api.call(
            RequestCode.UNREGISTER_CLIENT, UnregisterClientRequestHeader("c@2", None, group).to_ext_fields()
        )
        cmd = await first.next()
        assert cmd.ext_fields == {"consumerGroup": group}

        # it joins again, then its connection closes: told both times
        await second.api.heartbeat("c@2", [(group, [(topic, "*")])])
        await first.next()
        await second.client.close()
        cmd = await first.next()
        assert cmd.ext_fields == {"consumerGroup": group}
        assert ConsumerIdList.from_json((await consumer_list(first.api, group)).body).consumer_id_list == ["c@1"]

        # other groups' changes are not sent to it
        await second.api.close()
        other = Notified(br.addr)
        try:
            await other.api.heartbeat("c@3", [(unique("OtherG"), [(topic, "*")])])
            assert await first.quiet()
        finally:
            await other.api.close()
    finally:
        await first.api.close()
        await second.api.close()
