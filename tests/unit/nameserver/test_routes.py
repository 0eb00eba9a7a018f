"""RouteInfoManager: registration, route assembly, expiry, channel destroy, admin."""

from __future__ import annotations

from pathlib import Path

import pytest

from nameserver.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from nameserver.routes import RegisterBrokerResult, RouteInfoManager
from rmq.protocol.bodies import (
    BrokerData,
    DataVersion,
    KVTable,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)

A0, A1, B0 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
HA0, HA1 = "10.0.0.1:10912", "10.0.0.2:10912"


def wrapper(version: int, *topics: TopicConfig) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper({t.topic_name: t for t in topics}, DataVersion(1000, version))


def register(
    r: RouteInfoManager,
    addr: str,
    name: str,
    bid: int,
    w: TopicConfigSerializeWrapper,
    conn: object = None,
    now: int = 0,
    cluster: str = "C1",
    ha: str | None = None,
    filters: list[str] | None = None,
) -> RegisterBrokerResult:
    return r.register_broker(cluster, addr, name, bid, ha, w, [] if filters is None else filters, conn, now)


@pytest.fixture
def rim() -> RouteInfoManager:
    return RouteInfoManager(clock=lambda: 0)


def test_master_and_slave_registration(rim: RouteInfoManager) -> None:
    t = TopicConfig("T", 8, 8, 6)
    assert register(rim, A0, "broker-a", 0, wrapper(1, t), ha=HA0) == RegisterBrokerResult()
    # the slave learns its master's addresses; its own topics are ignored
    res = register(rim, A1, "broker-a", 1, wrapper(9, TopicConfig("SlaveOnly")), ha=HA1)
    assert res == RegisterBrokerResult(ha_server_addr=HA0, master_addr=A0)
    route = rim.pickup_topic_route_data("T")
    assert route == TopicRouteData(
        [QueueData("broker-a", 8, 8, 6, 0)], [BrokerData("C1", "broker-a", {0: A0, 1: A1})], {}
    )
    assert rim.pickup_topic_route_data("SlaveOnly") is None
    assert rim.cluster_addr_table == {"C1": {"broker-a"}}


def test_slave_before_master_gets_nothing(rim: RouteInfoManager) -> None:
    assert register(rim, A1, "broker-a", 1, wrapper(1), ha=HA1) == RegisterBrokerResult()
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), ha=HA0)
    assert register(rim, A1, "broker-a", 1, wrapper(1), ha=HA1) == RegisterBrokerResult(HA0, A0)


def test_topics_taken_only_when_data_version_changes(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T", 8, 8, 6)))
    # same data version, different content: ignored (the broker did not bump the version)
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4, 6), TopicConfig("U")))
    assert rim.pickup_topic_route_data("T").queue_datas[0].write_queue_nums == 8
    assert rim.pickup_topic_route_data("U") is None
    # new data version: taken
    register(rim, A0, "broker-a", 0, wrapper(2, TopicConfig("T", 4, 4, 6), TopicConfig("U")))
    assert rim.pickup_topic_route_data("T").queue_datas[0].write_queue_nums == 4
    assert rim.pickup_topic_route_data("U") is not None
    assert rim.query_broker_topic_config(A0) == DataVersion(1000, 2)
    assert not rim.is_broker_topic_config_changed(A0, DataVersion(1000, 2))
    assert rim.is_broker_topic_config_changed(A0, DataVersion(1001, 2))
    assert rim.is_broker_topic_config_changed(B0, DataVersion(1000, 2))


def test_route_with_two_broker_groups(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T", 8, 8, 6)))
    register(rim, B0, "broker-b", 0, wrapper(1, TopicConfig("T", 4, 4, 4, topic_sys_flag=1)), cluster="C2")
    route = rim.pickup_topic_route_data("T")
    assert sorted(route.queue_datas, key=lambda q: q.broker_name) == [
        QueueData("broker-a", 8, 8, 6, 0),
        QueueData("broker-b", 4, 4, 4, 1),
    ]
    assert {b.broker_name: b.cluster for b in route.broker_datas} == {"broker-a": "C1", "broker-b": "C2"}
    # the route is a copy: changing it does not change the tables
    route.queue_datas[0].perm = 0
    route.broker_datas[0].broker_addrs.clear()
    again = rim.pickup_topic_route_data("T")
    assert all(q.perm != 0 for q in again.queue_datas)
    assert all(b.broker_addrs for b in again.broker_datas)
    info = rim.get_all_cluster_info()
    assert info.cluster_addr_table == {"C1": ["broker-a"], "C2": ["broker-b"]}
    assert set(info.broker_addr_table) == {"broker-a", "broker-b"}
    assert rim.get_all_topic_list() == TopicList(["T"])
    assert rim.get_topics_by_cluster("C2") == TopicList(["T"])
    assert rim.get_topics_by_cluster("nope") == TopicList([])


def test_filter_servers_in_route(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), filters=["f:1"])
    assert rim.pickup_topic_route_data("T").filter_server_table == {A0: ["f:1"]}
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), filters=[])
    assert rim.pickup_topic_route_data("T").filter_server_table == {}


def test_broker_id_change_for_same_addr_replaces_entry(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), ha=HA0)
    register(rim, A1, "broker-a", 1, wrapper(1), ha=HA1)
    # failover: A0 is gone, A1 comes back as master (id 0), with its topics
    rim.unregister_broker("C1", A0, "broker-a", 0)
    register(rim, A1, "broker-a", 0, wrapper(5, TopicConfig("T"), TopicConfig("New")), ha=HA1)
    assert rim.broker_addr_table["broker-a"].broker_addrs == {0: A1}
    assert rim.pickup_topic_route_data("New") is not None
    # and the old master returns as a slave at its old address
    res = register(rim, A0, "broker-a", 1, wrapper(1), ha=HA0)
    assert res == RegisterBrokerResult(HA1, A1)
    assert rim.broker_addr_table["broker-a"].broker_addrs == {0: A1, 1: A0}


def test_unregister(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T"), TopicConfig("Ta")))
    register(rim, A1, "broker-a", 1, wrapper(1))
    register(rim, B0, "broker-b", 0, wrapper(1, TopicConfig("T")))
    rim.unregister_broker("C1", A1, "broker-a", 1)  # slave: group stays
    assert rim.broker_addr_table["broker-a"].broker_addrs == {0: A0}
    rim.unregister_broker("C1", A0, "broker-a", 0)  # last member: group and its topics go
    assert "broker-a" not in rim.broker_addr_table
    assert rim.cluster_addr_table == {"C1": {"broker-b"}}
    assert rim.pickup_topic_route_data("Ta") is None
    assert [q.broker_name for q in rim.pickup_topic_route_data("T").queue_datas] == ["broker-b"]
    rim.unregister_broker("C1", B0, "broker-b", 0)
    assert rim.cluster_addr_table == {} and rim.topic_queue_table == {}
    assert rim.broker_live_table == {}
    rim.unregister_broker("C1", B0, "broker-b", 0)  # twice: harmless


def test_scan_not_active_broker(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), conn="ca", now=1_000)
    register(rim, A1, "broker-a", 1, wrapper(1), conn="cs", now=1_000)
    register(rim, B0, "broker-b", 0, wrapper(1, TopicConfig("T"), TopicConfig("Tb")), conn="cb", now=50_000)
    assert rim.scan_not_active_broker(121_000) == []  # exactly 120 s: still alive
    removed = rim.scan_not_active_broker(121_001)
    assert sorted((r.broker_addr, r.conn_id) for r in removed) == [(A0, "ca"), (A1, "cs")]
    assert "broker-a" not in rim.broker_addr_table
    assert [q.broker_name for q in rim.pickup_topic_route_data("T").queue_datas] == ["broker-b"]
    # a heartbeat keeps a broker alive
    register(rim, B0, "broker-b", 0, wrapper(1, TopicConfig("T"), TopicConfig("Tb")), conn="cb", now=160_000)
    assert rim.scan_not_active_broker(200_000) == []
    assert [r.broker_addr for r in rim.scan_not_active_broker(290_000, expire_ms=100_000)] == [B0]
    assert rim.topic_queue_table == {} and rim.cluster_addr_table == {}


def test_query_data_version_refreshes_liveness(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1), now=0)
    rim.update_broker_info_update_timestamp(A0, 100_000)
    assert rim.scan_not_active_broker(150_000) == []
    rim.update_broker_info_update_timestamp("unknown:1", 5)  # no effect, no error


def test_on_channel_destroy(rim: RouteInfoManager) -> None:
    conn_a, conn_b = object(), object()
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), conn=conn_a)
    register(rim, A1, "broker-a", 1, wrapper(1), conn=conn_a)  # same connection (container)
    register(rim, B0, "broker-b", 0, wrapper(1, TopicConfig("T")), conn=conn_b)
    assert rim.on_channel_destroy(object()) == []
    assert sorted(rim.on_channel_destroy(conn_a)) == [A0, A1]
    assert "broker-a" not in rim.broker_addr_table
    assert rim.cluster_addr_table == {"C1": {"broker-b"}}
    route = rim.pickup_topic_route_data("T")
    assert [b.broker_name for b in route.broker_datas] == ["broker-b"]


def test_reconnected_broker_survives_old_connection_closing(rim: RouteInfoManager) -> None:
    old, new = object(), object()
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), conn=old)
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")), conn=new)
    assert rim.on_channel_destroy(old) == []
    assert rim.pickup_topic_route_data("T") is not None


def test_route_needs_queue_and_broker_data(rim: RouteInfoManager) -> None:
    assert rim.pickup_topic_route_data("T") is None
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T")))
    del rim.broker_addr_table["broker-a"]  # queue data without broker data
    assert rim.pickup_topic_route_data("T") is None


def test_delete_topic_and_write_perm(rim: RouteInfoManager) -> None:
    register(rim, A0, "broker-a", 0, wrapper(1, TopicConfig("T", perm=6), TopicConfig("U", perm=7)))
    register(rim, B0, "broker-b", 0, wrapper(1, TopicConfig("T", perm=6)), cluster="C2")
    assert rim.wipe_write_perm_of_broker("broker-a") == 2
    perms = {q.broker_name: q.perm for q in rim.pickup_topic_route_data("T").queue_datas}
    assert perms == {"broker-a": 4, "broker-b": 6}
    assert rim.pickup_topic_route_data("U").queue_datas[0].perm == 5
    assert rim.add_write_perm_of_broker("broker-a") == 2
    assert rim.pickup_topic_route_data("U").queue_datas[0].perm == 6  # exactly RW, as 4.9.8
    assert rim.wipe_write_perm_of_broker("nope") == 0
    rim.delete_topic("T", "C2")
    assert [q.broker_name for q in rim.pickup_topic_route_data("T").queue_datas] == ["broker-a"]
    rim.delete_topic("T", "C1")
    assert rim.pickup_topic_route_data("T") is None
    rim.delete_topic("U")
    assert rim.get_all_topic_list() == TopicList([])


def test_system_and_unit_topic_lists(rim: RouteInfoManager) -> None:
    register(
        rim,
        A0,
        "broker-a",
        0,
        wrapper(
            1,
            TopicConfig("Unit", topic_sys_flag=1),
            TopicConfig("UnitSub", topic_sys_flag=2),
            TopicConfig("Both", topic_sys_flag=3),
            TopicConfig("Plain"),
        ),
    )
    sys_list = rim.get_system_topic_list()
    assert sys_list == TopicList(["C1", "broker-a"], A0)
    assert sorted(rim.get_unit_topics().topic_list) == ["Both", "Unit"]
    assert sorted(rim.get_has_unit_sub_topic_list().topic_list) == ["Both", "UnitSub"]
    assert rim.get_has_unit_sub_ununit_topic_list().topic_list == ["UnitSub"]


def test_register_without_wrapper_uses_zero_version(rim: RouteInfoManager) -> None:
    rim.register_broker("C1", A0, "broker-a", 0, None, None, None, None, 0)
    assert rim.query_broker_topic_config(A0) == DataVersion(0, 0)
    assert rim.broker_addr_table["broker-a"].broker_addrs == {0: A0}


# --------------------------------------------------------------------------- KV config
def test_kv_config_persists_atomically(tmp_path: Path) -> None:
    path = tmp_path / "ns" / "kvConfig.msgpack"
    kv = KVConfigManager(path)
    kv.load()  # no file yet: empty
    kv.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, "T", "broker-a:8")
    kv.put_kv_config("ns2", "k", "v")
    kv.put_kv_config("ns2", "gone", None)  # no value: key unset, namespace kept
    kv.persist()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    again = KVConfigManager(path)
    again.load()
    assert again.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, "T") == "broker-a:8"
    assert again.get_kv_list_by_namespace("ns2") == KVTable({"k": "v"})
    assert again.get_kv_list_by_namespace("missing") is None
    assert again.delete_kv_config("ns2", "k") and not again.delete_kv_config("ns2", "k")
    assert again.get_kv_list_by_namespace("ns2") == KVTable({})
    path.write_bytes(b"\xc1garbage")
    with pytest.raises(ValueError):
        KVConfigManager(path).load()
