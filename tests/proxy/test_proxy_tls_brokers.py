"""`rmq proxy` in front of brokers that enforce TLS (the ACL/TLS compose deployment): with
``tls.enable=true`` the proxy reaches the NameServer and brokers over TLS and a send lands;
without it the broker refuses the plaintext link and the client gets an error, not a hang."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from rmq.proxy import pb
from tests.harness import start_cluster
from tests.proxy.harness import start_proxy

pytestmark = pytest.mark.timeout(120)

MD = (("x-mq-client-id", "test@1@0@tlsbrokers"), ("x-mq-language", "PYTHON"))


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    wd: Path = tmp_path_factory.mktemp("proxy-tls-brokers")
    conf = {"tls.server.mode": "enforcing", "autoCreateTopicEnable": "true"}
    with start_cluster(wd, conf=conf) as c:
        yield SimpleNamespace(namesrv=c.namesrv, wd=wd)


async def _send(addr: str, topic: str, message_id: str) -> Any:
    m = pb.msg("Message")(topic=pb.msg("Resource")(name=topic), body=b"x")
    m.system_properties.message_id = message_id
    req = pb.msg("SendMessageRequest")(messages=[m])
    async with grpc.aio.insecure_channel(addr) as ch:
        fn = ch.unary_unary(
            f"/{pb.SERVICE}/SendMessage", type(req).SerializeToString, pb.msg("SendMessageResponse").FromString
        )
        return await fn(req, metadata=MD, timeout=20)


async def test_proxy_with_tls_enable_reaches_tls_enforcing_brokers(rig) -> None:
    with start_proxy(rig.namesrv, rig.wd, "tls.enable=true", name="proxy-tls-out") as p:
        resp = await _send(p.addr, "TlsBrokersTopic", "01CD")
        assert resp.status.code == pb.Code.OK and resp.entries[0].message_id == "01CD", resp.status


async def test_plaintext_proxy_is_refused_by_tls_enforcing_brokers(rig) -> None:
    with start_proxy(rig.namesrv, rig.wd, "tls.enable=false", name="proxy-plain-out") as p:
        resp = await _send(p.addr, "TlsBrokersTopic", "01CE")
        assert resp.status.code != pb.Code.OK, resp
