"""A topic's ``message.type`` attribute (``rmq admin updateTopic -a +message.type=FIFO``) as
the 5.x SDK sees it through `rmq proxy`: the route offers that type only and a send of another
type is refused naming it; without the attribute every type is offered (issue 16)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from rmq.client import MQClientAPI
from rmq.protocol.bodies import TopicConfig
from rmq.proxy import pb
from rmq.remoting.client import RemotingClient
from tests.harness import start_cluster
from tests.proxy.harness import start_proxy

pytestmark = pytest.mark.timeout(120)

MD = (("x-mq-client-id", "test@1@0@types"), ("x-mq-language", "PYTHON"), ("x-mq-date-time", "20261128T000000Z"))


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    wd: Path = tmp_path_factory.mktemp("proxy-types")
    with start_cluster(wd) as c, start_proxy(c.namesrv, wd) as p:
        yield SimpleNamespace(broker=c.broker, namesrv=c.namesrv, proxy=p.addr)


async def _create(rig: SimpleNamespace, topic: str, attributes: str | None) -> None:
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [rig.namesrv])
        await api.create_topic(rig.broker, TopicConfig(topic, 2, 2, 6), attributes=attributes)


async def _call(addr: str, rpc: str, req: Any) -> Any:
    async with grpc.aio.insecure_channel(addr) as ch:
        fn = ch.unary_unary(f"/{pb.SERVICE}/{rpc}", type(req).SerializeToString, pb.msg(f"{rpc}Response").FromString)
        return await fn(req, metadata=MD, timeout=10)


async def _offered(addr: str, topic: str) -> set[int]:
    resp = await _call(addr, "QueryRoute", pb.msg("QueryRouteRequest")(topic=pb.msg("Resource")(name=topic)))
    assert resp.status.code == pb.Code.OK, resp.status
    return {t for q in resp.message_queues for t in q.accept_message_types}


def _message(topic: str, message_id: str, **system: Any) -> Any:
    m = pb.msg("Message")(topic=pb.msg("Resource")(name=topic), body=b"x")
    m.system_properties.message_id = message_id
    for k, v in system.items():
        setattr(m.system_properties, k, v)
    return m


async def test_fifo_topic_offers_fifo_only_and_refuses_normal(rig) -> None:
    await _create(rig, "TypedFifo", "+message.type=FIFO")
    assert await _offered(rig.proxy, "TypedFifo") == {pb.MessageType.FIFO}
    normal = _message("TypedFifo", "01AA", message_type=pb.MessageType.NORMAL)
    resp = await _call(rig.proxy, "SendMessage", pb.msg("SendMessageRequest")(messages=[normal]))
    assert resp.status.code != pb.Code.OK and "NORMAL" in resp.status.message, resp.status
    fifo = _message("TypedFifo", "01AB", message_type=pb.MessageType.FIFO, message_group="g")
    resp = await _call(rig.proxy, "SendMessage", pb.msg("SendMessageRequest")(messages=[fifo]))
    assert resp.status.code == pb.Code.OK, resp.status


async def test_topic_without_the_attribute_offers_every_type(rig) -> None:
    await _create(rig, "Untyped", None)
    offered = await _offered(rig.proxy, "Untyped")
    assert {pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION} <= offered
