"""rmq proxy's RPC contract seen by a raw gRPC client (our own messages), against real
`rmq namesrv` + `rmq broker` + `rmq proxy` processes: statuses, settings, the field named in an
answer to bad input, the RPCs not served, and the metrics."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.proxy import pb
from rmq.remoting.client import RemotingClient
from tests.harness import start_cluster
from tests.proxy.harness import start_proxy

pytestmark = pytest.mark.timeout(120)

MD = (("x-mq-client-id", "test@1@0@abc"), ("x-mq-language", "PYTHON"), ("x-mq-date-time", "20261128T000000Z"))


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    wd: Path = tmp_path_factory.mktemp("proxy-rpcs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    with (
        start_cluster(wd, conf={"autoCreateTopicEnable": "true"}) as c,
        start_proxy(c.namesrv, wd, f"metricsPromExporterPort={metrics_port}") as p,
    ):
        _create_group(c.broker, "G5", retry_max_times=5)
        yield p.addr, metrics_port


def _create_group(broker: str, group: str, *, retry_max_times: int) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) on the broker."""

    async def go() -> int:
        client = RemotingClient()
        try:
            body = json.dumps({"groupName": group, "retryMaxTimes": retry_max_times}).encode()
            resp = await client.invoke(
                broker, RemotingCommand(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body), 5
            )
            return resp.code
        finally:
            await client.close()

    assert asyncio.run(go()) == ResponseCode.SUCCESS


async def call(addr: str, rpc: str, req: Any, metadata: tuple = MD) -> Any:
    Resp = pb.msg(f"{rpc}Response")
    async with grpc.aio.insecure_channel(addr) as ch:
        fn = ch.unary_unary(f"/{pb.SERVICE}/{rpc}", type(req).SerializeToString, Resp.FromString)
        return await fn(req, metadata=metadata, timeout=10)


def _req(rpc: str, **kw: Any) -> Any:
    return pb.msg(f"{rpc}Request")(**kw)


def _res(name: str) -> Any:
    return pb.msg("Resource")(name=name)


async def test_query_route_points_at_the_proxy(proxy) -> None:
    addr, _ = proxy
    resp = await call(addr, "QueryRoute", _req("QueryRoute", topic=_res("RouteTopic")))
    assert resp.status.code == pb.Code.OK, resp.status
    assert len(resp.message_queues) == 4  # TBW102's queues, capped at defaultTopicQueueNums
    host, port = addr.rsplit(":", 1)
    for q in resp.message_queues:
        a = q.broker.endpoints.addresses[0]
        assert (a.host, a.port) == (host, int(port)) and q.broker.id == 0
        assert q.permission == pb.Permission.READ_WRITE


async def test_client_id_required_and_bad_topic_named(proxy) -> None:
    addr, _ = proxy
    resp = await call(addr, "QueryRoute", _req("QueryRoute", topic=_res("T")), metadata=())
    assert resp.status.code == pb.Code.CLIENT_ID_REQUIRED and "x-mq-client-id" in resp.status.message
    resp = await call(addr, "QueryRoute", _req("QueryRoute", topic=_res("bad topic")))
    assert resp.status.code == pb.Code.ILLEGAL_TOPIC and "topic.name" in resp.status.message


async def test_send_validation_names_the_field(proxy) -> None:
    addr, _ = proxy
    m = pb.msg("Message")(topic=_res("ValTopic"), body=b"")
    m.system_properties.message_id = "01AB"
    resp = await call(addr, "SendMessage", _req("SendMessage", messages=[m]))
    assert resp.status.code == pb.Code.MESSAGE_BODY_EMPTY and "body" in resp.status.message
    m.body = b"x"
    m.user_properties["UNIQ_KEY"] = "mine"
    resp = await call(addr, "SendMessage", _req("SendMessage", messages=[m]))
    assert resp.status.code == pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY and "UNIQ_KEY" in resp.status.message
    del m.user_properties["UNIQ_KEY"]
    resp = await call(addr, "SendMessage", _req("SendMessage", messages=[m]))
    assert resp.status.code == pb.Code.OK and resp.entries[0].message_id == "01AB"


async def test_end_transaction_checks_the_id(proxy) -> None:
    addr, _ = proxy
    req = _req("EndTransaction", topic=_res("T"), message_id="01AB", transaction_id="not-ours")
    req.resolution = pb.TransactionResolution.COMMIT
    resp = await call(addr, "EndTransaction", req)
    assert resp.status.code == pb.Code.INVALID_TRANSACTION_ID


async def test_telemetry_settings_echo(proxy) -> None:
    addr, _ = proxy
    Cmd = pb.msg("TelemetryCommand")
    async with grpc.aio.insecure_channel(addr) as ch:
        stream = ch.stream_stream(f"/{pb.SERVICE}/Telemetry", Cmd.SerializeToString, Cmd.FromString)(metadata=MD)
        producer = Cmd()
        producer.settings.client_type = pb.ClientType.PRODUCER
        producer.settings.publishing.topics.add(name="TelTopic")
        await stream.write(producer)
        got = await stream.read()
        assert got.status.code == pb.Code.OK
        s = got.settings
        assert s.publishing.max_body_size == 4 * 1024 * 1024 and s.publishing.validate_message_type
        assert s.backoff_policy.max_attempts == 3 and s.backoff_policy.HasField("exponential_backoff")
        assert not s.metric.on
        consumer = Cmd()
        consumer.settings.client_type = pb.ClientType.SIMPLE_CONSUMER
        consumer.settings.subscription.group.name = "G1"
        await stream.write(consumer)
        got = await stream.read()
        sub = got.settings.subscription
        assert got.status.code == pb.Code.OK and sub.group.name == "G1" and not sub.fifo
        assert sub.long_polling_timeout.seconds == 20 and sub.receive_batch_size == 32
        assert got.settings.backoff_policy.max_attempts == 17  # a group no broker knows: the default
        assert len(got.settings.backoff_policy.customized_backoff.next) == 18
        known = Cmd()
        known.settings.client_type = pb.ClientType.PUSH_CONSUMER
        known.settings.subscription.group.name = "G5"
        known.settings.subscription.subscriptions.add().topic.name = "TelTopic"
        await stream.write(known)
        got = await stream.read()
        assert got.status.code == pb.Code.OK
        assert got.settings.backoff_policy.max_attempts == 6  # the group's retryMaxTimes (5) + 1
        neither = Cmd()
        neither.settings.client_type = pb.ClientType.PRODUCER
        await stream.write(neither)
        got = await stream.read()
        assert got.status.code == pb.Code.BAD_REQUEST and "pub_sub" in got.status.message
        await stream.done_writing()


@pytest.mark.parametrize(
    "rpc, code",
    [
        ("UpdateOffset", "NOT_IMPLEMENTED"),
        ("GetOffset", "NOT_IMPLEMENTED"),
        ("QueryOffset", "NOT_IMPLEMENTED"),
        ("RecallMessage", "UNSUPPORTED"),
        ("SyncLiteSubscription", "UNSUPPORTED"),
    ],
)
async def test_rpcs_not_served_say_so(proxy, rpc: str, code: str) -> None:
    addr, _ = proxy
    resp = await call(addr, rpc, _req(rpc))
    assert resp.status.code == getattr(pb.Code, code), resp.status


async def test_receive_frames_and_ack(proxy) -> None:
    """status OK, the message, the delivery timestamp; the handle acks; then MESSAGE_NOT_FOUND."""
    addr, _ = proxy
    m = pb.msg("Message")(topic=_res("PopTopic"), body=b"pop-me")
    m.system_properties.message_id = "01POP"
    assert (await call(addr, "SendMessage", _req("SendMessage", messages=[m]))).status.code == pb.Code.OK
    Req, Resp = pb.msg("ReceiveMessageRequest"), pb.msg("ReceiveMessageResponse")
    route = await call(addr, "QueryRoute", _req("QueryRoute", topic=_res("PopTopic")))
    req = Req(group=_res("PopGroup"), batch_size=4)
    req.message_queue.CopyFrom(route.message_queues[0])
    req.invisible_duration.FromSeconds(30)
    req.long_polling_timeout.FromSeconds(5)

    async def receive() -> list[Any]:
        async with grpc.aio.insecure_channel(addr) as ch:
            call_ = ch.unary_stream(f"/{pb.SERVICE}/ReceiveMessage", Req.SerializeToString, Resp.FromString)
            return [f async for f in call_(req, metadata=MD, timeout=15)]

    frames = await receive()
    assert [f.WhichOneof("content") for f in frames] == ["status", "message", "delivery_timestamp"], frames
    assert frames[0].status.code == pb.Code.OK
    got = frames[1].message
    assert (got.body, got.system_properties.message_id, got.system_properties.delivery_attempt) == (
        b"pop-me",
        "01POP",
        1,
    )
    ack = _req("AckMessage", group=_res("PopGroup"), topic=_res("PopTopic"))
    ack.entries.add(message_id="01POP", receipt_handle=got.system_properties.receipt_handle)
    resp = await call(addr, "AckMessage", ack)
    assert resp.status.code == pb.Code.OK and resp.entries[0].status.code == pb.Code.OK
    frames = await receive()
    assert (
        frames[0].status.code == pb.Code.MESSAGE_NOT_FOUND and frames[-1].WhichOneof("content") == "delivery_timestamp"
    )


async def test_ack_with_a_foreign_handle_is_invalid(proxy) -> None:
    addr, _ = proxy
    req = _req("AckMessage", group=_res("G"), topic=_res("T"))
    req.entries.add(message_id="01AB", receipt_handle="not-a-handle")
    resp = await call(addr, "AckMessage", req)
    assert resp.entries[0].status.code == pb.Code.INVALID_RECEIPT_HANDLE
    assert resp.status.code == pb.Code.INVALID_RECEIPT_HANDLE


async def test_metrics_count_rpcs_by_code(proxy) -> None:
    addr, metrics_port = proxy
    await call(addr, "QueryRoute", _req("QueryRoute", topic=_res("MetricsTopic")))
    await call(addr, "GetOffset", _req("GetOffset"))
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()

    def value(rpc: str, code: str) -> float:
        for line in text.splitlines():
            if line.startswith("rocketmq_proxy_rpc_total{") and f'rpc="{rpc}"' in line and f'code="{code}"' in line:
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no rocketmq_proxy_rpc_total for {rpc}/{code} in:\n{text[:3000]}")

    assert value("QueryRoute", "OK") >= 1
    assert value("GetOffset", "NOT_IMPLEMENTED") >= 1
    assert "rocketmq_proxy_rpc_latency_bucket{" in text and 'node_type="proxy"' in text
    assert re.search(r'rocketmq_proxy_active_streams\{[^}]*rpc="Telemetry"', text)
