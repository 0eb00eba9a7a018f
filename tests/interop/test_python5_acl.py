"""The 5.x Python SDK through `rmq proxy` with ACL on (aclEnable on broker and proxy, the same
plain_acl.yml accounts): the SDK's ``authorization`` header (HMAC-SHA1 of x-mq-date-time, lower-case
hex, local time with a literal Z) is checked by the proxy, which talks to the broker with the
cluster credential (innerClientAuthenticationCredentials)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rmq.auth.credentials import Credential
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import PullMessageRequestHeader
from rmq.protocol.message import decode_records
from rmq.remoting.client import RemotingClient
from tests.harness import start_cluster
from tests.interop.conftest import unique_name
from tests.interop.test_python5_proxy import run_driver
from tests.proxy.harness import start_proxy

pytestmark = pytest.mark.timeout(180)

USER = ("Proxy5User", "12345678user")
CLUSTER = ("clusterAK01", "clusterSecret01")
PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
    topicPerms:
      - DenyTopic=DENY
"""


@pytest.fixture(scope="module")
def acl_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    wd: Path = tmp_path_factory.mktemp("py5acl")
    home = wd / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    cred = f"{CLUSTER[0]}:{CLUSTER[1]}"
    conf = {"aclEnable": "true", "rocketmqHome": str(home), "innerClientAuthenticationCredentials": cred}
    with (
        start_cluster(wd, conf={**conf, "autoCreateTopicEnable": "true"}) as c,
        start_proxy(c.namesrv, wd, *(f"{k}={v}" for k, v in conf.items())) as p,
    ):
        yield SimpleNamespace(addr=p.addr, broker=c.broker, proc=p)


def signed_pull_all(broker: str, topic: str, queues: int = 4) -> list[str]:
    """Bodies stored in ``topic`` (PULL_MESSAGE signed with the cluster credential)."""

    async def go() -> list[str]:
        client = RemotingClient(request_hook=Credential(*CLUSTER).sign)
        out = []
        try:
            for q in range(queues):
                h = PullMessageRequestHeader("truth", topic, q, 0, 32, 0x4, 0, 0, 0, "*", "TAG")
                resp = await client.invoke(
                    broker, RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=h.to_ext_fields()), 5
                )
                if resp.code == ResponseCode.SUCCESS and resp.body:
                    out += [m.body.decode() for m in decode_records(resp.body)]
        finally:
            await client.close()
        return out

    return asyncio.run(go())


def test_signed_sdk_sends_through_the_proxy(acl_proxy: SimpleNamespace) -> None:
    topic = unique_name("py5-acl")
    spec = {"topic": topic, "messages": [{"body": "acl-0"}, {"body": "acl-1"}], "ak": USER[0], "sk": USER[1]}
    sent = [e for e in run_driver("send", acl_proxy.addr, spec) if e["event"] == "sent"]
    assert [e["body"] for e in sent] == ["acl-0", "acl-1"]
    assert sorted(signed_pull_all(acl_proxy.broker, topic)) == ["acl-0", "acl-1"]


def test_wrong_secret_anonymous_and_denied_topic_are_refused(acl_proxy: SimpleNamespace) -> None:
    topic = unique_name("py5-acl-bad")
    for ak, sk, what in ((USER[0], "wrong-secret", "signature"), ("", "", "anonymous")):
        spec = {"topic": topic, "messages": [{"body": "never"}], "ak": ak, "sk": sk}
        events = run_driver("send", acl_proxy.addr, spec, allow_errors=True)
        assert [e for e in events if e["event"] == "error"], events
        assert what in acl_proxy.proc.log_text(), f"no refusal for {what} in the proxy log"
    spec = {"topic": "DenyTopic", "messages": [{"body": "denied"}], "ak": USER[0], "sk": USER[1]}
    errors = [e for e in run_driver("send", acl_proxy.addr, spec, allow_errors=True) if e["event"] == "error"]
    assert errors and ("Forbidden" in errors[0]["error"] or "permission" in errors[0]["error"]), errors
    log = acl_proxy.proc.log_text()
    assert USER[1] not in log and "wrong-secret" not in log and CLUSTER[1] not in log, "a secret in the proxy log"
    assert signed_pull_all(acl_proxy.broker, topic) == []
