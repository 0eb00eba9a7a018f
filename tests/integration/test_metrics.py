"""Prometheus /metrics of real broker and NameServer processes, scraped over HTTP while
rmq.client produces and consumes (issue 7, Metrics)."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request

import pytest

from rmq.client import ConsumeFromWhere, LitePullConsumer, Message, Producer, SendStatus
from rmq.protocol.bodies import MessageQueue
from tests.harness import start_broker, start_namesrv
from tests.integration.test_client import create_topic, unique
from tests.metrics_util import Scrape, eventually, free_ports, listening_ports, scrape

pytestmark = pytest.mark.timeout(120)

BROKER_FAMILIES = {
    "rocketmq_messages_in_total": "counter",
    "rocketmq_throughput_in_total": "counter",
    "rocketmq_messages_out_total": "counter",
    "rocketmq_throughput_out_total": "counter",
    "rocketmq_message_size": "histogram",
    "rocketmq_rpc_latency": "histogram",
    "rocketmq_consumer_lag_messages": "gauge",
    "rocketmq_consumer_lag_latency": "gauge",
    "rocketmq_consumer_inflight_messages": "gauge",
    "rocketmq_producer_connections": "gauge",
    "rocketmq_consumer_connections": "gauge",
    "rocketmq_storage_size": "gauge",
    "rocketmq_storage_flush_behind_bytes": "gauge",
    "rocketmq_storage_dispatch_behind_bytes": "gauge",
    "rocketmq_storage_message_reserve_time": "gauge",
    "rocketmq_topic_number": "gauge",
    "rocketmq_consumer_group_number": "gauge",
    "rocketmq_ha_slave_lag_bytes": "gauge",
    "rocketmq_ha_in_sync_replicas": "gauge",
    "rocketmq_broker_role": "gauge",
    "rocketmq_ha_epoch": "gauge",
    "rocketmq_flush_latency_seconds": "histogram",
    "rocketmq_group_commit_batch_size": "histogram",
    "rocketmq_protocol_errors_total": "counter",
}
NAMESRV_FAMILIES = {
    "rocketmq_namesrv_brokers_alive": "gauge",
    "rocketmq_namesrv_route_requests_total": "counter",
    "rocketmq_namesrv_registrations_total": "counter",
    "rocketmq_namesrv_failover_events_total": "counter",
    "rocketmq_rpc_latency": "histogram",
    "rocketmq_protocol_errors_total": "counter",
}
BROKER_NODE = {"cluster": "TestCluster", "node_type": "broker", "node_id": "broker-a"}


def assert_node_labels(s: Scrape, **want: str) -> None:
    assert s.samples
    for name, labels, _ in s.samples:
        for k, v in want.items():
            assert labels.get(k) == v, f"{name}{labels}: {k} should be {v!r}"


async def test_broker_and_namesrv_metrics_follow_the_traffic(tmp_path):
    ns_port, br_port = free_ports(2)
    with (
        start_namesrv(tmp_path, "--metrics-port", str(ns_port)) as ns,
        start_broker(
            tmp_path, ns.addr, conf={"metricsPromExporterPort": br_port, "metricsPromExporterHost": "127.0.0.1"}
        ) as br,
    ):
        # every family is there (with its TYPE) before any traffic
        s = scrape(br_port)
        assert {n: s.types.get(n) for n in BROKER_FAMILIES} == BROKER_FAMILIES
        assert_node_labels(s, **BROKER_NODE)
        assert s.value("rocketmq_broker_role") == 0  # ASYNC_MASTER
        assert s.value("rocketmq_storage_size") > 0
        assert not s.series("rocketmq_ha_slave_lag_bytes")  # no HA service yet
        n = scrape(ns_port)
        assert {k: n.types.get(k) for k in NAMESRV_FAMILIES} == NAMESRV_FAMILIES
        assert_node_labels(n, node_type="namesrv", node_id=ns.addr)
        await eventually(
            lambda: scrape(ns_port).value("rocketmq_namesrv_brokers_alive", cluster="TestCluster") == 1,
            what="broker alive",
        )
        assert scrape(ns_port).value("rocketmq_namesrv_registrations_total") >= 1

        topic = unique("MT")
        await create_topic(ns.addr, br.addr, topic, queues=4)
        sent = 40
        # producers are known to a broker from their heartbeats (30 s by default)
        async with Producer(unique("pg"), ns.addr, heartbeat_broker_interval=500) as p:
            for i in range(sent):
                r = await p.send(Message(topic, bytes([65 + i % 26]) * 1000))
                assert r.status is SendStatus.SEND_OK
            s = scrape(br_port)
            assert s.value("rocketmq_messages_in_total", topic=topic) == sent
            stored = s.value("rocketmq_throughput_in_total", topic=topic)
            assert sent * 1000 < stored < sent * 1400  # whole records
            assert s.value("rocketmq_message_size_count") == sent
            assert s.value("rocketmq_message_size_sum") == stored
            assert s.value("rocketmq_message_size_bucket", le="1024.0") == 0
            assert s.value("rocketmq_message_size_bucket", le="4096.0") == sent
            assert (
                s.value("rocketmq_rpc_latency_count", request_code="send_message_v2", response_code="success") == sent
            )
            await eventually(
                lambda: scrape(br_port).total("rocketmq_producer_connections", language="python") >= 1,
                what="producer seen",
            )
            assert s.value("rocketmq_topic_number") >= 1
            assert s.value("rocketmq_storage_message_reserve_time") > 0
        nsrv = scrape(ns_port)
        assert nsrv.value("rocketmq_namesrv_route_requests_total", response_code="success") >= 1

        # consume everything, commit part of it: lag = what is not committed
        group = unique("cg")
        mqs = [MessageQueue(topic, "broker-a", q) for q in range(4)]
        c = LitePullConsumer(
            group,
            ns.addr,
            auto_commit=False,
            heartbeat_broker_interval=500,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        c.assign(mqs)
        await c.start()
        try:
            got = []

            async def all_pulled() -> bool:
                got.extend(await c.poll(500))
                return len(got) >= sent

            deadline = asyncio.get_running_loop().time() + 20
            while not await all_pulled():
                assert asyncio.get_running_loop().time() < deadline, f"pulled {len(got)}"
            per_queue = {mq.queue_id: 0 for mq in mqs}
            for m in got:
                per_queue[m.queue_id] += 1
            commit = {mq: per_queue[mq.queue_id] // 2 for mq in mqs}
            await c.commit(commit)
            unconsumed = sent - sum(commit.values())
            assert unconsumed > 0

            def lag_ok() -> Scrape:
                s = scrape(br_port)
                assert s.value("rocketmq_consumer_lag_messages", topic=topic, consumer_group=group) == unconsumed
                return s

            s = await eventually(lag_ok, what="consumer lag")
            assert (
                s.value("rocketmq_consumer_inflight_messages", topic=topic, consumer_group=group) == unconsumed
            )  # all pulled
            assert s.value("rocketmq_consumer_lag_latency", topic=topic, consumer_group=group) > 0
            assert s.value("rocketmq_messages_out_total", topic=topic, consumer_group=group) == sent
            assert s.value("rocketmq_throughput_out_total", topic=topic, consumer_group=group) == stored
            await eventually(
                lambda: scrape(br_port).total("rocketmq_consumer_connections", consumer_group=group) == 1,
                what="consumer seen",
            )

            # the rest committed: no lag
            await c.commit({mq: per_queue[mq.queue_id] for mq in mqs})
            await eventually(
                lambda: scrape(br_port).value("rocketmq_consumer_lag_messages", topic=topic, consumer_group=group) == 0,
                what="lag back to 0",
            )
            assert scrape(br_port).value("rocketmq_consumer_lag_latency", topic=topic, consumer_group=group) == 0
        finally:
            await c.shutdown()

        # the async flush runs every 500 ms: its latency histogram fills
        await eventually(
            lambda: scrape(br_port).value("rocketmq_flush_latency_seconds_count") > 0, what="a CommitLog flush"
        )
        await eventually(lambda: scrape(br_port).value("rocketmq_storage_flush_behind_bytes") == 0, what="flushed")
        assert scrape(br_port).value("rocketmq_storage_dispatch_behind_bytes") == 0

        # a malformed frame closes that connection and is counted
        with socket.create_connection(("127.0.0.1", br.port), timeout=5) as sock:
            sock.sendall(b"\xff\xff\xff\xff garbage")
            assert sock.recv(100) == b""
        await eventually(
            lambda: scrape(br_port).value("rocketmq_protocol_errors_total") == 1, what="protocol error counted"
        )

    # NameServer stopped too: nothing left listening on either metrics port
    for port in (ns_port, br_port):
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


async def test_namesrv_sees_a_broker_leave(tmp_path):
    (ns_port,) = free_ports(1)
    with start_namesrv(tmp_path, "--metrics-port", str(ns_port)) as ns:
        with start_broker(tmp_path, ns.addr):
            await eventually(
                lambda: scrape(ns_port).value("rocketmq_namesrv_brokers_alive", cluster="TestCluster") == 1,
                what="registered",
            )
        # the broker unregisters at shutdown
        await eventually(
            lambda: scrape(ns_port).value("rocketmq_namesrv_brokers_alive", cluster="TestCluster") == 0, what="gone"
        )


def _serves_metrics(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return b"# TYPE" in r.read()
    except (OSError, ValueError):
        return False


async def test_metrics_are_off_unless_configured(tmp_path):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr) as br:
        for proc, own in ((ns, ns.port), (br, br.port)):
            assert "Prometheus" not in proc.log_text()
            others = listening_ports(proc.pid) - {own}
            assert not [p for p in others if _serves_metrics(p)]
        assert listening_ports(ns.pid) == {ns.port}


async def test_a_busy_metrics_port_is_a_warning_not_a_crash(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        with (
            start_namesrv(tmp_path, "--metrics-port", str(port)) as ns,
            start_broker(
                tmp_path, ns.addr, conf={"metricsPromExporterPort": port, "metricsPromExporterHost": "127.0.0.1"}
            ) as br,
        ):
            for proc in (ns, br):
                line = [ln for ln in proc.log_text().splitlines() if "Prometheus exporter not started" in ln]
                assert line and "WARNING" in line[0] and str(port) in line[0]
            topic = unique("MB")
            await create_topic(ns.addr, br.addr, topic, queues=1)
            async with Producer(unique("pg"), ns.addr) as p:
                assert (await p.send(Message(topic, b"still up"))).status is SendStatus.SEND_OK
            assert ns.alive() and br.alive()
    finally:
        busy.close()


async def test_sync_flush_reports_group_commit_rounds(tmp_path):
    (port,) = free_ports(1)
    with (
        start_namesrv(tmp_path) as ns,
        start_broker(
            tmp_path,
            ns.addr,
            conf={
                "metricsPromExporterPort": port,
                "metricsPromExporterHost": "127.0.0.1",
                "flushDiskType": "SYNC_FLUSH",
            },
        ) as br,
    ):
        topic = unique("MS")
        await create_topic(ns.addr, br.addr, topic, queues=2)
        async with Producer(unique("pg"), ns.addr) as p:
            for _ in range(10):  # one after the other: one put per round
                assert (await p.send(Message(topic, b"x" * 100))).status is SendStatus.SEND_OK
        s = scrape(port)
        assert s.value("rocketmq_group_commit_batch_size_sum") == 10
        assert s.value("rocketmq_group_commit_batch_size_bucket", le="1.0") == 10
        assert s.value("rocketmq_flush_latency_seconds_count") >= 10
        assert 0 < s.value("rocketmq_flush_latency_seconds_sum") < 10
