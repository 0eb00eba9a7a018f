"""NameServer processors in-process (one event loop, loopback sockets): the switches
the integration test does not turn (orderMessageEnable, server-wide standard JSON,
pre-3.0.11 brokers, the scan timer)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nameserver.kvconfig import KVConfigManager
from nameserver.server import NameServer
from rmq.protocol.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import RegisterBrokerRequestHeader
from rmq.remoting.client import RemotingClient

T = 3.0


def register(
    name: str, addr: str, topics: list[str], version: int = MQVersion.V4_9_8, bare_wrapper: bool = False
) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in topics}, DataVersion(1, 1))
    body = wrapper.to_json() if bare_wrapper else RegisterBrokerBody(wrapper).to_json()
    header = RegisterBrokerRequestHeader(name, addr, "C", addr + "1", 0)
    return RemotingCommand(RequestCode.REGISTER_BROKER, version=version, ext_fields=header.to_ext_fields(), body=body)


def route(topic: str, version: int = MQVersion.V3_4_9) -> RemotingCommand:
    return RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, version=version, ext_fields={"topic": topic})


async def test_order_topic_conf_and_server_wide_standard_json(tmp_path: Path) -> None:
    kv = tmp_path / "kv.msgpack"
    ns = NameServer("127.0.0.1", 0, kv_path=kv, order_message_enable=True, accept_standard_json_only=True)
    async with ns, RemotingClient() as c:
        assert (await c.invoke(ns.address, register("b1", "10.0.0.1:1", ["OT"]), T)).code == 0
        put = RemotingCommand(
            RequestCode.PUT_KV_CONFIG, ext_fields={"namespace": "ORDER_TOPIC_CONFIG", "key": "OT", "value": "b1:4"}
        )
        assert (await c.invoke(ns.address, put, T)).code == 0
        resp = await c.invoke(ns.address, route("OT"), T)  # an old client...
        assert b'{"0":' in resp.body  # ...still gets standard JSON
        assert TopicRouteData.from_json(resp.body).order_topic_conf == "b1:4"
    # the put reached the file before it was answered
    on_disk = KVConfigManager(kv)
    on_disk.load()
    assert on_disk.get_kv_config("ORDER_TOPIC_CONFIG", "OT") == "b1:4"


async def test_order_topic_conf_off_by_default_and_legacy_broker(tmp_path: Path) -> None:
    ns = NameServer("127.0.0.1", 0, kv_path=tmp_path / "kv.msgpack")
    async with ns, RemotingClient() as c:
        ns.kv.put_kv_config("ORDER_TOPIC_CONFIG", "Old", "b2:4")
        # a broker older than 3.0.11 sends the bare TopicConfigSerializeWrapper
        resp = await c.invoke(ns.address, register("b2", "10.0.0.2:1", ["Old"], version=30, bare_wrapper=True), T)
        assert resp.code == ResponseCode.SUCCESS
        got = await c.invoke(ns.address, route("Old"), T)
        assert b"{0:" in got.body  # legacy for an old client
        assert TopicRouteData.from_json(got.body).order_topic_conf is None
        # a register without a body is accepted (data version 0/0, no topics)
        empty = register("b3", "10.0.0.3:1", [])
        empty.body = None
        assert (await c.invoke(ns.address, empty, T)).code == ResponseCode.SUCCESS
        assert ns.routes.query_broker_topic_config("10.0.0.3:1") == DataVersion(0, 0)


async def test_scan_timer_drops_silent_brokers(tmp_path: Path) -> None:
    ns = NameServer("127.0.0.1", 0, kv_path=tmp_path / "kv.msgpack", broker_expire_ms=100, scan_interval_ms=40)
    async with ns, RemotingClient() as broker, RemotingClient() as c:
        await broker.invoke(ns.address, register("b4", "10.0.0.4:1", ["Gone"]), T)
        assert (await c.invoke(ns.address, route("Gone"), T)).code == ResponseCode.SUCCESS
        for _ in range(50):
            await asyncio.sleep(0.02)
            if "10.0.0.4:1" not in ns.routes.broker_live_table:
                break
        assert (await c.invoke(ns.address, route("Gone"), T)).code == ResponseCode.TOPIC_NOT_EXIST
        # the expired broker's connection was closed by the NameServer
        for _ in range(50):
            if not broker.connections:
                break
            await asyncio.sleep(0.02)
        assert not broker.connections
