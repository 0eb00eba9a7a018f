"""Client tests that need their own processes: a broker without auto-creation, a broker
killed under a producer, a broker restarted under a consumer."""

from __future__ import annotations

import asyncio
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.client import (
    ClientErrorCode,
    Message,
    MQBrokerError,
    MQClientAPI,
    MQClientError,
    Producer,
    PushConsumer,
    RemotingError,
    SendStatus,
)
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.codes import ResponseCode
from rmq.remoting.client import RemotingClient
from tests.harness import start_broker, start_namesrv
from tests.integration.test_client import Collector, create_topic, start_push_from_first, unique, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rmq-client-cluster-", ignore_cleanup_errors=True) as d:
        yield Path(d)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_send_to_a_topic_the_broker_does_not_have(workdir):
    """autoCreateTopicEnable=false: no route at all is a client error; a send that reaches
    the broker is refused with TOPIC_NOT_EXIST and its remark, after the sync retries."""
    with start_namesrv(workdir) as ns, start_broker(workdir, ns.addr, conf={"autoCreateTopicEnable": "false"}) as br:
        known = unique("Known")
        await create_topic(ns.addr, br.addr, known, 2)
        missing = unique("Missing")
        async with Producer(unique("pg"), ns.addr) as p:
            with pytest.raises(MQClientError) as ei:
                await p.send(Message(missing, b"x"))
            assert ei.value.code == ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION
            assert "No route info" in str(ei.value)
            assert (await p.send(Message(known, b"x"))).status is SendStatus.SEND_OK
            t0 = time.monotonic()
            with pytest.raises(MQBrokerError) as ei:
                await p.send(Message(missing, b"x"), queue=MessageQueue(missing, "broker-a", 0))
            assert ei.value.code == ResponseCode.TOPIC_NOT_EXIST
            assert ei.value.remark.startswith(f"topic[{missing}] not exist, apply first please!")
            assert ei.value.broker_addr == br.addr
            assert time.monotonic() - t0 < 3
            with pytest.raises(MQBrokerError) as ei:
                await p.send_async(Message(missing, b"x"), queue=MessageQueue(missing, "broker-a", 0))
            assert ei.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_sends_go_to_the_other_broker_when_one_is_killed(workdir):
    with (
        start_namesrv(workdir) as ns,
        start_broker(workdir, ns.addr, name="broker-a") as a,
        start_broker(workdir, ns.addr, name="broker-b") as b,
    ):
        topic = unique("Two")
        await create_topic(ns.addr, [a.addr, b.addr], topic, 4)
        plain = Producer(unique("pg"), ns.addr)
        faulty = Producer(unique("pg"), ns.addr, send_latency_fault_enable=True)
        await plain.start()
        await faulty.start()
        try:
            for p in (plain, faulty):
                brokers = {(await p.send(Message(topic, b"warm"))).message_queue.broker_name for _ in range(8)}
                assert brokers == {"broker-a", "broker-b"}
            a.kill()
            # the producers' cached routes still list broker-a
            assert "broker-a" in {m.broker_name for m in plain.topic_publish_info_table[topic].message_queue_list}
            for p in (plain, faulty):
                t0 = time.monotonic()
                results = [await p.send(Message(topic, f"after-{i}".encode())) for i in range(20)]
                assert all(r.status is SendStatus.SEND_OK for r in results)
                assert {r.message_queue.broker_name for r in results} == {"broker-b"}
                assert time.monotonic() - t0 < 10
                results = await asyncio.gather(*[p.send_async(Message(topic, b"async")) for _ in range(10)])
                assert {r.message_queue.broker_name for r in results} == {"broker-b"}
            # with fault tolerance on, broker-a is out for the 4.9.8 isolation time (10 min) --
            # once the producer has tried it: its route may have dropped broker-a first (the
            # NameServer forgets a broker whose connection closed), and then it never does
            lft = faulty.fault_strategy.latency_fault_tolerance
            routed = {m.broker_name for m in faulty.topic_publish_info_table[topic].message_queue_list}
            assert lft.is_available("broker-b")
            assert "broker-a" not in routed or not lft.is_available("broker-a")
            # a chosen queue of the dead broker: one attempt, the transport error surfaces
            # (or, once a route refresh has dropped broker-a, the client says it does not exist)
            with pytest.raises((RemotingError, MQClientError), match="127.0.0.1|broker-a"):
                await plain.send(Message(topic, b"x"), queue=MessageQueue(topic, "broker-a", 0))
        finally:
            await plain.shutdown()
            await faulty.shutdown()
        # everything acknowledged is on broker-b
        c, got = await start_push_from_first(unique("cg"), ns.addr, topic)
        try:
            await wait_until(
                lambda: sum(m.body.startswith(b"after-") for m in got.msgs) >= 40,
                what="the messages sent after the kill",
            )
        finally:
            await c.shutdown()


@pytest.mark.slow
async def test_committed_offsets_survive_a_broker_restart(workdir):
    port = free_port()
    conf = {"listenPort": port}
    with start_namesrv(workdir) as ns:
        topic = unique("Restart")
        group = unique("cg")
        with start_broker(workdir, ns.addr, conf=conf) as br:
            await create_topic(ns.addr, br.addr, topic, 2)
            async with Producer(unique("pg"), ns.addr) as p:
                for i in range(10):
                    await p.send(Message(topic, f"a-{i}".encode()))
            got = Collector()
            c = PushConsumer(group, ns.addr, listener=got, persist_consumer_offset_interval=300)
            c.subscribe(topic)
            await c.start()
            await wait_until(lambda: len(got.msgs) >= 10, what="10 messages")
            async with RemotingClient() as rc:
                api = MQClientAPI(rc, [ns.addr])

                async def committed() -> bool:
                    offs = [await api.query_consumer_offset(br.addr, group, topic, q) for q in (0, 1)]
                    return sum(offs) == 10

                await wait_until(committed, what="offsets committed by the periodic persist")
            br.stop()  # SIGTERM: the broker persists offsets on the way out
        # The same broker (name, port, store) again. A new process name: the harness
        # appends to <name>.log and would take the first run's "boot success" line as
        # this run's.
        again = dict(conf, brokerName="broker-a", storePathRootDir=str(br.store_dir))
        # the consumer keeps running while the broker is away
        with start_broker(workdir, ns.addr, name="broker-a-again", conf=again) as br:
            async with RemotingClient() as rc:
                api = MQClientAPI(rc, [ns.addr])
                offsets = [await api.query_consumer_offset(br.addr, group, topic, q) for q in (0, 1)]
            assert sum(offsets) == 10
            async with Producer(unique("pg"), ns.addr) as p:
                await wait_until(lambda: _routed(p, topic), what="route after restart")
                for i in range(6):
                    await p.send(Message(topic, f"b-{i}".encode()))
            try:
                # pulls fail while the broker is down, then resume (a heartbeat re-registers
                # the group at once instead of after 30 s)
                await wait_until(lambda: len(got.msgs) >= 16, timeout=30, what="messages after restart")
            finally:
                await c.shutdown()
            assert sorted(got.bodies()) == sorted(
                [f"a-{i}".encode() for i in range(10)] + [f"b-{i}".encode() for i in range(6)]
            )
            # and a new consumer of the group starts from the committed offsets
            c2, got2 = await start_push_from_first(group, ns.addr, topic)
            try:
                async with Producer(unique("pg"), ns.addr) as p:
                    await p.send(Message(topic, b"c-0"))
                await wait_until(lambda: got2.msgs, what="c-0")
                await asyncio.sleep(0.5)
            finally:
                await c2.shutdown()
            assert got2.bodies() == [b"c-0"]


async def _routed(p: Producer, topic: str) -> bool:
    mqs = await p.fetch_publish_message_queues(topic)
    return bool(mqs)
