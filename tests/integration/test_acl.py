"""Plain ACL (issue 12, spec rocketmq-4x-acl-tls.md §2) with real ``rmq namesrv`` / ``rmq broker``
processes: ``aclEnable=true`` and ``rocketmqHome`` in broker.conf, accounts in
``<home>/conf/plain_acl.yml`` and ``conf/acl/**``; rmq.client and ``rmq produce | admin``
signing with ``--access-key`` / ``--secret-key`` / ``RMQ_*_KEY``.

Every refusal is code 1 with 4.9.8's remark and leaves nothing stored or changed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rmq.auth.permissions import ACL_EXCEPTION
from rmq.client import Message, MQBrokerError, Producer, pop_api
from rmq.client.acl import AclClientRPCHook
from rmq.client.api import MQClientAPI
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.codes import RemotingSysResponseCode, RequestCode, ResponseCode
from rmq.protocol.pop import INIT_MODE_MIN, PROPERTY_POP_CK
from rmq.remoting.client import RemotingClient
from tests.harness import broker_process, start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, produce_and_consume, unique, wait_until
from tests.metrics_util import free_ports, scrape

pytestmark = pytest.mark.timeout(120)

ADMIN = ("RocketMQAdmin", "12345678admin")
USER = ("RocketMQUser", "12345678user")
VALIDATE = "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:{})"
CHECK_PERM = "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:{})"

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
    topicPerms:
      - DenyTopic=DENY
      - SubOnlyTopic=SUB
    groupPerms:
      - DeniedGroup=DENY
"""


def remark(message: str, frame: str) -> str:
    return f"{ACL_EXCEPTION}: {message}, {frame}"


def client(creds: tuple[str, str] | None) -> RemotingClient:
    return RemotingClient(request_hook=AclClientRPCHook(*creds) if creds else None)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimpleNamespace]:
    with tempfile.TemporaryDirectory(prefix="rmq-acl-", ignore_cleanup_errors=True) as d:
        d = Path(d)
        home = d / "home"
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
        (metrics_port,) = free_ports(1)
        conf = {
            "aclEnable": "true",
            "rocketmqHome": str(home),
            "metricsPromExporterPort": metrics_port,
            "metricsPromExporterHost": "127.0.0.1",
        }
        with start_namesrv(d) as ns, start_broker(d, ns.addr, name="broker-acl", conf=conf) as br:
            yield SimpleNamespace(namesrv=ns.addr, broker=br.addr, ns=ns, br=br, home=home, metrics_port=metrics_port)


async def create_topic(cluster: SimpleNamespace, topic: str, queues: int = 4) -> None:
    """As the admin account; then wait until the NameServer routes it."""
    async with client(ADMIN) as rc:
        api = MQClientAPI(rc, [cluster.namesrv])
        await api.create_topic(cluster.broker, TopicConfig(topic, queues, queues, 6))

        async def routed() -> bool:
            route = await api.get_topic_route_info(topic)
            return route is not None and len(route.queue_datas) == 1

        await wait_until(routed, 10, f"route of {topic}")


async def max_offsets(cluster: SimpleNamespace, topic: str, queues: int = 4) -> list[int]:
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        return [await api.max_offset(topic, q) for q in range(queues)]


# --------------------------------------------------------------------------- allowed
async def test_right_credentials_produce_and_consume(cluster):
    topic = unique("AclT")
    await create_topic(cluster, topic)
    got = await produce_and_consume(cluster.namesrv, topic, 6, *USER)
    assert got == sorted(f"m{i}".encode() for i in range(6))


async def test_client_without_credentials_is_refused(cluster):
    topic = unique("AclT")
    await create_topic(cluster, topic)
    async with Producer(unique("pg"), cluster.namesrv) as p:
        with pytest.raises(MQBrokerError) as e:
            await p.send(Message(topic, b"m0"))
    assert "No accessKey is configured" in str(e.value)
    assert await max_offsets(cluster, topic) == [0, 0, 0, 0]


# --------------------------------------------------------------------------- refused
@pytest.mark.parametrize(
    "creds, topic, message, frame",
    [
        ((USER[0], "wrong-secret"), None, f"Check signature failed for accessKey={USER[0]}", VALIDATE.format(684)),
        (("Nobody1", "12345678nobody"), None, "No acl config for Nobody1", VALIDATE.format(668)),
        (None, None, "No accessKey is configured", VALIDATE.format(664)),
        (USER, "DenyTopic", "No default permission for topic:DenyTopic", CHECK_PERM.format(611)),
        (USER, "SubOnlyTopic", "No default permission for topic:SubOnlyTopic", CHECK_PERM.format(611)),
    ],
    ids=["wrong-secret", "unknown-access-key", "no-credentials", "deny-topic", "sub-only-topic"],
)
async def test_send_refused_and_nothing_stored(cluster, creds, topic, message, frame):
    topic = topic or unique("AclT")  # DenyTopic / SubOnlyTopic: the user's explicit entries
    await create_topic(cluster, topic)
    before = await max_offsets(cluster, topic)
    async with BrokerApi(cluster.broker, client=client(creds)) as api:
        for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE):
            r = await api.send(topic, b"must not be stored", code=code)
            assert r.code == RemotingSysResponseCode.SYSTEM_ERROR
            assert r.remark == remark(message, frame)
            assert not r.ext_fields and not r.body
        # a batch is checked too (4.9.8 let it through)
        r = await api.send_batch(topic, [(b"b1", ""), (b"b2", "")])
        assert r.code == RemotingSysResponseCode.SYSTEM_ERROR and r.remark == remark(message, frame)
    await asyncio.sleep(0.3)
    assert await max_offsets(cluster, topic) == before


async def test_sub_only_topic_can_be_pulled(cluster):
    await create_topic(cluster, "SubOnlyTopic")
    async with BrokerApi(cluster.broker, client=client(USER)) as api:
        r = await api.pull("SubOnlyTopic", 0, 0, group=unique("cg"))
        assert r.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED, ResponseCode.SUCCESS), r.remark


async def test_denied_group_pull_and_offset_commit_refused(cluster):
    topic = unique("AclT")
    await create_topic(cluster, topic)
    async with BrokerApi(cluster.broker, client=client(USER)) as api:
        await api.send_ok(topic, b"x", queue_id=0)
        r = await api.pull(topic, 0, 0, group="DeniedGroup")
        assert r.code == RemotingSysResponseCode.SYSTEM_ERROR
        assert r.remark == remark("No default permission for group:DeniedGroup", CHECK_PERM.format(611))
        assert not r.body
        r = await api.update_offset("DeniedGroup", topic, 0, 1)
        assert r is not None and r.code == RemotingSysResponseCode.SYSTEM_ERROR
        await api.update_offset("DeniedGroup", topic, 0, 1, oneway=True)  # dropped, unanswered
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as admin:
        await asyncio.sleep(0.3)
        q = await admin.query_offset("DeniedGroup", topic, 0)
        assert q.code != ResponseCode.SUCCESS or int((q.ext_fields or {}).get("offset", "-1")) < 1


async def test_pop_needs_sub_on_topic_and_group(cluster):
    """POP (RocketMQ 5's codes) is checked like a pull: a DENY topic or group is refused
    with 4.9.8's remark and pops nothing; SUB on both pops."""
    topic = unique("AclPop")
    await create_topic(cluster, topic)
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as admin:
        await admin.send_ok(topic, b"p", queue_id=0)
    async with client(USER) as rc:
        r = await pop_api.pop(rc, cluster.broker, "broker-acl", "DeniedGroup", topic, invisible_ms=30_000)
        assert r.code == RemotingSysResponseCode.SYSTEM_ERROR and not r.messages
        assert r.remark == remark("No default permission for group:DeniedGroup", CHECK_PERM.format(611))
        r = await pop_api.pop(rc, cluster.broker, "broker-acl", unique("cg"), "DenyTopic", invisible_ms=30_000)
        assert r.code == RemotingSysResponseCode.SYSTEM_ERROR and "DenyTopic" in (r.remark or ""), r.remark
        group = unique("cg")
        r = await pop_api.pop(
            rc, cluster.broker, "broker-acl", group, topic, invisible_ms=30_000, poll_ms=2000, init_mode=INIT_MODE_MIN
        )
        assert r.code == ResponseCode.SUCCESS and [m.body for m in r.messages] == [b"p"], (r.code, r.remark)
        a = await pop_api.ack(rc, cluster.broker, group, topic, r.messages[0].properties[PROPERTY_POP_CK])
        assert a.code == ResponseCode.SUCCESS, a.remark


async def test_non_admin_admin_request_refused(cluster):
    topic = unique("AclAdm")
    async with BrokerApi(cluster.broker, client=client(USER)) as api:
        r = await api.create_topic(topic)
        assert r.code == RemotingSysResponseCode.SYSTEM_ERROR
        assert r.remark == remark(
            f"Need admin permission for request code={RequestCode.UPDATE_AND_CREATE_TOPIC}, "
            f"but accessKey={USER[0]} is not",
            CHECK_PERM.format(581),
        )
        # a oneway admin request is dropped unprocessed too
        await api.oneway(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic + "_ow", "defaultTopic": "TBW102"})
    await asyncio.sleep(0.3)
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as admin:
        topics = await admin.topics()
        assert topic not in topics and topic + "_ow" not in topics
        ok = await admin.create_topic(topic)
        assert ok.code == ResponseCode.SUCCESS, ok.remark


async def test_refusals_logged_without_secrets_and_counted(cluster):
    async with BrokerApi(cluster.broker, client=client((USER[0], "wrong-secret-xyz"))) as api:
        await api.send(unique("AclT"), b"x")
    text = cluster.br.log_text()
    assert f"accessKey={USER[0]}" in text and "127.0.0.1" in text
    for secret in (USER[1], ADMIN[1], "wrong-secret-xyz"):
        assert secret not in text
    s = scrape(cluster.metrics_port)
    assert s.total("rocketmq_auth_failures_total", reason="signature") >= 1
    assert s.types.get("rocketmq_auth_failures_total") == "counter"


# --------------------------------------------------------------------------- command line
def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rmq.cli", *args], capture_output=True, text=True, timeout=60, env=full_env
    )


async def test_cli_produce_and_admin_with_credentials(cluster):
    topic = unique("AclCli")
    await create_topic(cluster, topic)
    ok = await asyncio.to_thread(
        _cli,
        ["produce", "-a", cluster.namesrv, "-t", topic, "-n", "2", "-q", "--access-key", USER[0]],
        {"RMQ_SECRET_KEY": USER[1]},
    )
    assert ok.returncode == 0, ok.stderr
    refused = await asyncio.to_thread(_cli, ["produce", "-a", cluster.namesrv, "-t", topic, "-n", "1", "-q"])
    assert refused.returncode != 0 and "No accessKey is configured" in refused.stderr
    assert sum(await max_offsets(cluster, topic)) == 2

    new = unique("AclCliT")
    admin_args = ["admin", "updateTopic", "-n", cluster.namesrv, "-b", cluster.broker, "-t", new]
    as_user = await asyncio.to_thread(_cli, [*admin_args, "--access-key", USER[0], "--secret-key", USER[1]])
    assert as_user.returncode != 0 and "Need admin permission for request code=17" in as_user.stderr
    as_admin = await asyncio.to_thread(_cli, admin_args, {"RMQ_ACCESS_KEY": ADMIN[0], "RMQ_SECRET_KEY": ADMIN[1]})
    assert as_admin.returncode == 0, as_admin.stderr
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        assert new in await api.topics()


# --------------------------------------------------------------------------- reload
async def test_account_added_works_within_5s_and_broken_file_keeps_accounts(cluster):
    extra = cluster.home / "conf" / "acl" / "team" / "extra.yaml"
    extra.parent.mkdir(parents=True, exist_ok=True)
    topic = unique("AclR")
    await create_topic(cluster, topic)
    newbie = ("NewAccount1", "newsecret123")
    try:
        async with BrokerApi(cluster.broker, client=client(newbie)) as api:
            r = await api.send(topic, b"x")
            assert r.remark == remark("No acl config for NewAccount1", VALIDATE.format(668))
            extra.write_text(
                f"accounts:\n  - accessKey: {newbie[0]}\n    secretKey: {newbie[1]}\n    defaultTopicPerm: PUB\n"
            )
            t0 = time.monotonic()

            async def accepted() -> bool:
                return (await api.send(topic, b"y")).code == ResponseCode.SUCCESS

            await wait_until(accepted, 10, "the new account to be accepted", interval=0.2)
            assert time.monotonic() - t0 < 5.0

            # a broken file: the previous accounts stay; the log names the file and line
            mark = len(cluster.br.log_text())
            extra.write_text(f"accounts:\n  - accessKey: {newbie[0]}\n    secretKey: [unclosed\n")
            await wait_until(lambda: "reload failed" in cluster.br.log_text(mark), 10, "the reload error logged")
            logged = cluster.br.log_text(mark)
            assert "extra.yaml:" in logged and newbie[1] not in logged
            assert (await api.send(topic, b"z")).code == ResponseCode.SUCCESS
        async with BrokerApi(cluster.broker, client=client(USER)) as api:
            assert (await api.send(topic, b"u")).code == ResponseCode.SUCCESS
    finally:
        extra.unlink()
    async with BrokerApi(cluster.broker, client=client(newbie)) as api:

        async def gone() -> bool:
            return (await api.send(topic, b"w")).code == RemotingSysResponseCode.SYSTEM_ERROR

        await wait_until(gone, 10, "the removed account to be refused", interval=0.2)


# --------------------------------------------------------------------------- start-up
def test_broken_yml_at_start_stops_the_broker_naming_file_and_line(tmp_path):
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(
        "accounts:\n  - accessKey: RocketMQUser\n    secretKey: 12345678\n    topicPerms:\n      - NoEqualsSign\n"
    )
    p = broker_process(tmp_path, None, "broker-bad", {"aclEnable": "true", "rocketmqHome": str(home)})
    r = subprocess.run(
        [sys.executable, "-m", "rmq.cli", *p.args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert r.returncode == 2, r.stderr
    assert "bad ACL configuration" in r.stderr
    assert f"{home / 'conf' / 'plain_acl.yml'}:5" in r.stderr, r.stderr
    assert "12345678" not in r.stderr  # the secret is never part of the error


def test_rocketmq_home_env_is_the_fallback(tmp_path):
    home = tmp_path / "envhome"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text("accounts:\n  - accessKey: short\n    secretKey: 12345678\n")
    p = broker_process(tmp_path, None, "broker-env", {"aclEnable": "true"})
    env = {**os.environ, "ROCKETMQ_HOME": str(home)}
    r = subprocess.run(
        [sys.executable, "-m", "rmq.cli", *p.args], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert r.returncode == 2 and "plain_acl.yml:2" in r.stderr, r.stderr
