"""The official RocketMQ 4.9.8 Java client (``AclClientRPCHook``) and the real ``mqadmin``
against an rmq broker with ``aclEnable=true`` (issue 12 item 8; spec rocketmq-4x-acl-tls.md).

tests/interop/java/AclClient.java is compiled once per session (tests/interop/java_build.py)
and run as ``bin/rocketmq java AclClient``. The Java-API cases run in ONE JVM (``batch``):
the right credentials produce and consume; a wrong secret, an unknown AccessKey, no
credentials, a DENY topic, a SUB-only topic, a denied group and a non-admin's admin requests
(create topic 17, delete topic 215, broker config 25) are refused with 4.9.8's texts, and the
broker's own state (max offsets, consumer offsets, topic list, broker config) shows nothing
stored or changed. The reload and mqadmin cases launch their own JVMs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from tests.integration import test_acl
from tests.integration.broker_util import BrokerApi, unique
from tests.integration.test_acl import ADMIN, CHECK_PERM, USER, VALIDATE, client, create_topic, max_offsets, remark
from tests.interop.java_build import JAVA_SRC, compile_java, rocketmq_home_copy, run_java
from tests.interop.mqadmin_util import mqadmin, mqadmin_available

pytestmark = pytest.mark.timeout(300)

# One rmq NameServer + broker for this module: aclEnable, test_acl.PLAIN_ACL (an admin, and a
# user with DenyTopic=DENY, SubOnlyTopic=SUB, DeniedGroup=DENY), rocketmqHome = .home.
cluster = test_acl.cluster

WRONG = (USER[0], "wrong-secret-1")
NOBODY = ("Nobody1", "12345678nobody")
NONE = ("-", "-")  # AclClient: no RPC hook at all
N_OK = 4


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """AclClient.java compiled against the 4.9.8 client jars (javac, once a session)."""
    return compile_java([JAVA_SRC / "AclClient.java"], tmp_path_factory.mktemp("java-classes"))


def results(stdout: str) -> list[dict[str, Any]]:
    """AclClient's JSON result lines (the client's own log lines share stdout)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def refusal(message: str, frame: str) -> str:
    """How the Java client reports a broker's ACL refusal (MQBrokerException / MQClientException)."""
    return f"CODE: 1  DESC: {remark(message, frame)}"


async def java(classes: Path, home: Path, *args: str, stdin: str | None = None) -> Any:
    return await asyncio.to_thread(run_java, "AclClient", args, classes=classes, user_home=home, stdin=stdin)


async def broker_config(cluster: SimpleNamespace) -> dict[str, str]:
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        r = await api.call(RequestCode.GET_BROKER_CONFIG)
        assert r.code == ResponseCode.SUCCESS, r.remark
    return dict(line.split("=", 1) for line in r.body.decode().splitlines() if "=" in line)


# --------------------------------------------------------------------------- one JVM, many cases
@pytest.fixture(scope="module")
def batch(cluster, java_classes, tmp_path_factory) -> Iterator[SimpleNamespace]:
    """Topics made by rmq's admin client, the state before, then every Java-API case in one
    ``AclClient batch`` run; ``.r[case]`` is that case's result line."""

    async def run() -> SimpleNamespace:
        t = SimpleNamespace(ok=unique("JavaAclOk"), refused=unique("JavaAclNo"), new=unique("JavaAclNew"))
        t.admin_new, t.view = unique("JavaAclAdm"), unique("JavaAclView")
        for topic in (t.ok, t.refused, t.view, "DenyTopic", "SubOnlyTopic"):
            await create_topic(cluster, topic)
        config_before = await broker_config(cluster)
        ns, br = cluster.namesrv, cluster.broker
        cases: dict[str, tuple[str, ...]] = {
            "produce": ("produce", ns, t.ok, str(N_OK), *USER),
            "consume": ("consume", ns, t.ok, unique("JavaCG"), str(N_OK), *USER),
            "view-by-unique-key": ("sendAndView", ns, t.view, *USER),
            "wrong-secret": ("produce", ns, t.refused, "1", *WRONG),
            "unknown-access-key": ("produce", ns, t.refused, "1", *NOBODY),
            "no-credentials": ("produce", ns, t.refused, "1", *NONE),
            "deny-topic": ("produce", ns, "DenyTopic", "1", *USER),
            "sub-only-topic": ("produce", ns, "SubOnlyTopic", "1", *USER),
            "wrong-secret-pull": ("pull", ns, t.ok, unique("JavaCG"), *WRONG),
            "denied-group-pull": ("pull", ns, t.ok, "DeniedGroup", *USER),
            "denied-group-consume": ("consume", ns, t.ok, "DeniedGroup", "1", *USER, "3"),
            "non-admin-create-topic": ("createTopic", ns, br, t.new, *USER),
            "non-admin-delete-topic": ("deleteTopic", ns, br, t.ok, *USER),
            "non-admin-broker-config": ("updateBrokerConfig", ns, br, "brokerPermission", "4", *USER),
            "admin-create-topic": ("createTopic", ns, br, t.admin_new, *ADMIN),
        }
        stdin = "".join("\t".join(c) + "\n" for c in cases.values())
        home = tmp_path_factory.mktemp("java-user-home")
        p = await java(java_classes, home, "batch", stdin=stdin)
        lines = results(p.stdout)
        assert p.returncode == 0 and len(lines) == len(cases), (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
        return SimpleNamespace(topics=t, r=dict(zip(cases, lines, strict=True)), config_before=config_before)

    yield asyncio.run(run())


def failed_with(result: dict[str, Any], text: str) -> None:
    assert result["ok"] is False, result
    assert text in result["error"], result["error"]


async def test_right_credentials_produce_and_consume(cluster, batch):
    t = batch.topics
    assert batch.r["produce"]["ok"] and batch.r["produce"]["sent"] == N_OK, batch.r["produce"]
    assert all(s.startswith("SEND_OK ") for s in batch.r["produce"]["results"])
    consumed = batch.r["consume"]
    assert consumed["ok"], consumed
    assert consumed["bodies"] == [f"{t.ok}-{i}" for i in range(N_OK)]
    assert sum(await max_offsets(cluster, t.ok)) == N_OK  # the refused sends below added nothing


async def test_query_by_unique_key_signed_by_a_4_9_8_client(batch):
    """viewMessage(topic, msgId) sends QUERY_MESSAGE with ``_UNIQUE_KEY_QUERY``, which clients
    from 4.9.4 on sign: a 4.9.8 broker leaves it out of the check and refuses them (RocketMQ
    #5310); rmq follows 5.x (spec 2.4) and answers."""
    r = batch.r["view-by-unique-key"]
    assert r["ok"] and r["body"] == f"{batch.topics.view}-viewed", r


@pytest.mark.parametrize(
    "case, message, frame",
    [
        ("wrong-secret", f"Check signature failed for accessKey={WRONG[0]}", VALIDATE.format(684)),
        ("unknown-access-key", f"No acl config for {NOBODY[0]}", VALIDATE.format(668)),
        ("no-credentials", "No accessKey is configured", VALIDATE.format(664)),
    ],
)
async def test_bad_credentials_refused_and_nothing_stored(cluster, batch, case, message, frame):
    failed_with(batch.r[case], refusal(message, frame))
    assert batch.r[case].get("sent") is None  # not even one of them
    assert await max_offsets(cluster, batch.topics.refused) == [0, 0, 0, 0]


@pytest.mark.parametrize("topic", ["DenyTopic", "SubOnlyTopic"])
async def test_topic_without_pub_refused_and_nothing_stored(cluster, batch, topic):
    case = {"DenyTopic": "deny-topic", "SubOnlyTopic": "sub-only-topic"}[topic]
    failed_with(batch.r[case], refusal(f"No default permission for topic:{topic}", CHECK_PERM.format(611)))
    assert await max_offsets(cluster, topic) == [0, 0, 0, 0]


async def test_wrong_secret_cannot_pull(batch):
    failed_with(
        batch.r["wrong-secret-pull"], refusal(f"Check signature failed for accessKey={WRONG[0]}", VALIDATE.format(684))
    )


async def test_denied_group_refused_and_no_offset_committed(cluster, batch):
    failed_with(
        batch.r["denied-group-pull"], refusal("No default permission for group:DeniedGroup", CHECK_PERM.format(611))
    )
    consumed = batch.r["denied-group-consume"]  # the lite pull consumer logs the refusals and gets nothing
    assert consumed["ok"] is False and consumed["received"] == 0, consumed
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        for q in range(4):
            r = await api.query_offset("DeniedGroup", batch.topics.ok, q)
            assert r.code == ResponseCode.QUERY_NOT_FOUND or int(r.ext_fields["offset"]) <= 0, (q, r.code, r.ext_fields)


async def test_non_admin_admin_requests_refused_and_nothing_changed(cluster, batch):
    t = batch.topics
    for case, code in [
        ("non-admin-create-topic", RequestCode.UPDATE_AND_CREATE_TOPIC),
        ("non-admin-delete-topic", RequestCode.DELETE_TOPIC_IN_BROKER),
        ("non-admin-broker-config", RequestCode.UPDATE_BROKER_CONFIG),
    ]:
        failed_with(
            batch.r[case],
            refusal(
                f"Need admin permission for request code={code}, but accessKey={USER[0]} is not", CHECK_PERM.format(581)
            ),
        )
    assert batch.r["admin-create-topic"]["ok"], batch.r["admin-create-topic"]  # the admin account may
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        topics = await api.topics()
    assert t.new not in topics and t.ok in topics and t.admin_new in topics
    after = await broker_config(cluster)
    assert after["brokerPermission"] == batch.config_before["brokerPermission"] == "6"


# --------------------------------------------------------------------------- reload
async def test_account_added_to_yml_works_without_restart(cluster, java_classes, tmp_path):
    topic = unique("JavaAclR")
    await create_topic(cluster, topic)
    newbie = (unique("JavaNew"), "javasecret123")
    extra = cluster.home / "conf" / "acl" / f"{newbie[0]}.yml"
    before = await java(java_classes, tmp_path, "produce", cluster.namesrv, topic, "1", *newbie)
    assert before.returncode == 1, before.stdout[-2000:]
    failed_with(results(before.stdout)[0], refusal(f"No acl config for {newbie[0]}", VALIDATE.format(668)))
    extra.parent.mkdir(parents=True, exist_ok=True)
    try:
        extra.write_text(
            f"accounts:\n  - accessKey: {newbie[0]}\n    secretKey: {newbie[1]}\n    defaultTopicPerm: PUB\n"
        )
        # the JVM sends again every 200 ms while refused; 20 s is a generous bound, not a timing claim
        after = await java(java_classes, tmp_path, "produce", cluster.namesrv, topic, "2", *newbie, "20")
        assert after.returncode == 0, (after.stdout[-3000:], after.stderr[-2000:])
        (line,) = results(after.stdout)
        assert line["ok"] and line["sent"] == 2, line
    finally:
        extra.unlink(missing_ok=True)
    assert sum(await max_offsets(cluster, topic)) == 2


# --------------------------------------------------------------------------- mqadmin
async def test_mqadmin_with_tools_yml_creates_topic_as_admin_and_is_refused_as_user(cluster, tmp_path):
    assert (missing := mqadmin_available()) is None, missing
    as_admin, as_user = unique("MqadminAcl"), unique("MqadminAclU")

    def updatetopic(creds: tuple[str, str], topic: str) -> Any:
        home = rocketmq_home_copy(tmp_path / f"home-{creds[0]}", f"accessKey: {creds[0]}\nsecretKey: {creds[1]}\n")
        args = ["updateTopic", "-n", cluster.namesrv, "-b", cluster.broker, "-t", topic]
        return mqadmin(tmp_path / "user-home", *args, timeout=120, rocketmq_home=home)

    ok, refused = await asyncio.gather(
        asyncio.to_thread(updatetopic, ADMIN, as_admin), asyncio.to_thread(updatetopic, USER, as_user)
    )
    assert f"create topic to {cluster.broker} success." in ok.out, (ok.out, ok.err[-2000:])
    assert "success" not in refused.out, refused.out
    want = refusal(
        f"Need admin permission for request code={RequestCode.UPDATE_AND_CREATE_TOPIC}, but accessKey={USER[0]} is not",
        CHECK_PERM.format(581),
    )
    assert want in refused.text, (refused.out, refused.err[-3000:])
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        topics = await api.topics()
    assert as_admin in topics and as_user not in topics
