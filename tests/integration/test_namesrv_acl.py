"""A NameServer with ``aclEnable=true`` (issue 12, items 3, 7, 8), real processes.

The NameServer's config gives ``rocketmqHome`` (its own conf/plain_acl.yml: an admin and a
normal account) and the cluster credential ``innerClientAuthenticationCredentials``. A
broker with the same credential (and its own ACL on) registers and serves clients.

* state-changing requests need the credential's or an admin account's signature:
  unsigned, non-admin, unknown or badly signed ones are answered code 1 with the
  AclException remark and change nothing (no route appears, none disappears, the KV
  table stays as it was); a oneway one gets no answer and changes nothing;
* reads (routes, cluster info, KV reads) stay open to an unsigned client;
* refusals are counted in ``rocketmq_auth_failures_total{reason}`` on the NameServer and
  logged naming the AccessKey and the peer, never a secret.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from rmq.auth.permissions import ACL_EXCEPTION
from rmq.client.api import MQClientAPI
from rmq.protocol.bodies import RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from rmq.protocol.codes import RemotingSysResponseCode, RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import acl_account, acl_yml, produce_and_consume, unique, wait_until
from tests.integration.broker_util import signing_client as client
from tests.metrics_util import free_ports, scrape

pytestmark = pytest.mark.timeout(120)

ADMIN = ("NsAdmin0001", "nsAdminSecret1")
USER = ("NsUser00001", "nsUserSecret01")
CLUSTER_CRED = ("clusterAK01", "clusterSecret01")
CLUSTER = "TestCluster"

PLAIN_ACL = acl_yml(
    acl_account(*ADMIN, admin=True),
    acl_account(*USER, whiteRemoteAddress="127.0.0.1"),
    global_white=["127.0.0.1"],  # (opens no write on the NameServer)
)
# the broker's own accounts: the normal account only (admin there: the credential)
BROKER_ACL = acl_yml(acl_account(*USER))


@pytest.fixture(scope="module")
def ns_acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    d = tmp_path_factory.mktemp("nsacl")
    ns_home, br_home = d / "ns-home", d / "br-home"
    for home, text in ((ns_home, PLAIN_ACL), (br_home, BROKER_ACL)):
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "plain_acl.yml").write_text(text)
    (metrics_port,) = free_ports(1)
    props = d / "namesrv.properties"
    props.write_text(
        "aclEnable=true\n"
        f"rocketmqHome={ns_home}\n"
        f"innerClientAuthenticationCredentials={CLUSTER_CRED[0]}:{CLUSTER_CRED[1]}\n"
        f"metricsPromExporterPort={metrics_port}\n"
    )
    conf = {
        "aclEnable": "true",
        "rocketmqHome": str(br_home),
        # RocketMQ 5's JSON form
        "innerClientAuthenticationCredentials": (
            f'{{"accessKey":"{CLUSTER_CRED[0]}","secretKey":"{CLUSTER_CRED[1]}"}}'
        ),
    }
    with start_namesrv(d, "-c", str(props)) as ns, start_broker(d, ns.addr, name="broker-cred", conf=conf) as br:
        yield SimpleNamespace(
            namesrv=ns.addr, broker=br.addr, ns=ns, br=br, metrics_port=metrics_port, dir=d, home=ns_home
        )


def register_cmd(name: str, addr: str, topics: dict[str, TopicConfig] | None = None) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper(topic_config_table=dict(topics or {}))
    body = RegisterBrokerBody(wrapper, []).encode(False)
    header = RegisterBrokerRequestHeader(
        name, addr, CLUSTER, "127.0.0.1:1", 0, compressed=False, body_crc32=zlib.crc32(body) & 0x7FFFFFFF
    )
    return RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.to_ext_fields(), body=body)


def unregister_cmd(name: str, addr: str) -> RemotingCommand:
    h = UnRegisterBrokerRequestHeader(name, addr, CLUSTER, 0)
    return RemotingCommand(RequestCode.UNREGISTER_BROKER, ext_fields=h.to_ext_fields())


async def invoke(ns: SimpleNamespace, creds: tuple[str, str] | None, cmd: RemotingCommand) -> RemotingCommand:
    async with client(creds) as rc:
        return await rc.invoke(ns.namesrv, cmd, 5)


async def broker_names(ns: SimpleNamespace) -> set[str]:
    async with client(None) as rc:  # unsigned: reads are open
        info = await MQClientAPI(rc, [ns.namesrv]).get_broker_cluster_info()
    return set(info.broker_addr_table)


def assert_refused(resp: RemotingCommand, message: str) -> None:
    assert resp.code == RemotingSysResponseCode.SYSTEM_ERROR, resp
    assert resp.remark is not None and resp.remark.startswith(f"{ACL_EXCEPTION}: {message}, "), resp.remark


# --------------------------------------------------------------------------- registration
async def test_unsigned_register_broker_is_refused_and_no_route_appears(ns_acl):
    name = unique("fake-broker")
    topic = unique("FakeTopic")
    cmd = register_cmd(name, "127.0.0.1:1", {topic: TopicConfig(topic, 4, 4, 6)})
    # checked while the connection is open (a closed one's brokers are dropped anyway)
    async with client(None) as rc:
        assert_refused(await rc.invoke(ns_acl.namesrv, cmd, 5), "No accessKey is configured")
        assert name not in await broker_names(ns_acl)
        assert await MQClientAPI(rc, [ns_acl.namesrv]).get_topic_route_info(topic) is None


async def test_refusals_for_unknown_wrong_and_non_admin_accounts(ns_acl):
    name = unique("fake-broker")
    cases = [
        (("Nobody00001", "whatever001"), "No acl config for Nobody00001"),
        ((ADMIN[0], "notTheSecret1"), f"Check signature failed for accessKey={ADMIN[0]}"),
        ((CLUSTER_CRED[0], "notTheSecret1"), f"Check signature failed for accessKey={CLUSTER_CRED[0]}"),
        # a normal account, even from its own white address (no white list opens a write)
        (USER, f"Need admin permission for request code=103, but accessKey={USER[0]} is not"),
    ]
    for creds, message in cases:
        async with client(creds) as rc:
            assert_refused(await rc.invoke(ns_acl.namesrv, register_cmd(name, "127.0.0.1:2"), 5), message)
            assert name not in await broker_names(ns_acl)


async def test_oneway_unsigned_register_gets_no_answer_and_changes_nothing(ns_acl):
    name = unique("oneway-broker")
    async with client(None) as rc:
        cmd = register_cmd(name, "127.0.0.1:3")
        cmd.mark_oneway()
        await rc.invoke_oneway(ns_acl.namesrv, cmd)
        # the next request on the same connection is answered after the oneway was handled
        info = await MQClientAPI(rc, [ns_acl.namesrv]).get_broker_cluster_info()
    assert name not in info.broker_addr_table


@pytest.mark.parametrize("creds", [CLUSTER_CRED, ADMIN], ids=["cluster-credential", "admin-account"])
async def test_signed_register_and_unregister_are_accepted(ns_acl, creds):
    name = unique("signed-broker")
    # the registering connection stays open: the NameServer drops a connection's brokers
    # when it closes
    async with client(creds) as rc:
        resp = await rc.invoke(ns_acl.namesrv, register_cmd(name, "127.0.0.1:4"), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert name in await broker_names(ns_acl)
        # an unsigned unregister does not take it away ...
        assert_refused(await invoke(ns_acl, None, unregister_cmd(name, "127.0.0.1:4")), "No accessKey is configured")
        assert name in await broker_names(ns_acl)
        # ... a signed one does
        assert (await rc.invoke(ns_acl.namesrv, unregister_cmd(name, "127.0.0.1:4"), 5)).code == ResponseCode.SUCCESS
        assert name not in await broker_names(ns_acl)


# --------------------------------------------------------------------------- other writes
async def test_delete_topic_unsigned_refused_route_intact(ns_acl):
    topic = unique("KeepMe")
    async with client(USER) as rc:  # the broker checks USER; the NameServer ignores it for reads
        api = MQClientAPI(rc, [ns_acl.namesrv])
        async with client(CLUSTER_CRED) as admin_rc:
            await MQClientAPI(admin_rc, [ns_acl.namesrv]).create_topic(ns_acl.broker, TopicConfig(topic, 2, 2, 6))

        async def routed() -> bool:
            return await api.get_topic_route_info(topic) is not None

        await wait_until(routed, 10, f"route of {topic}")
    delete = RemotingCommand(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext_fields={"topic": topic, "clusterName": CLUSTER})
    assert_refused(await invoke(ns_acl, None, delete), "No accessKey is configured")
    assert_refused(
        await invoke(ns_acl, USER, RemotingCommand(delete.code, ext_fields=dict(delete.ext_fields or {}))),
        f"Need admin permission for request code=216, but accessKey={USER[0]} is not",
    )
    async with client(None) as rc:
        route = await MQClientAPI(rc, [ns_acl.namesrv]).get_topic_route_info(topic)
    assert route is not None and len(route.queue_datas) == 1


@pytest.mark.parametrize(
    "code,ext",
    [
        (RequestCode.PUT_KV_CONFIG, {"namespace": "NS_ACL", "key": "k", "value": "v"}),
        (RequestCode.DELETE_KV_CONFIG, {"namespace": "NS_ACL", "key": "kept"}),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-cred"}),
        (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-cred"}),
        (RequestCode.UPDATE_NAMESRV_CONFIG, {}),
        (RequestCode.QUERY_DATA_VERSION, {"brokerAddr": "x", "brokerName": "b", "clusterName": "c", "brokerId": "0"}),
        (RequestCode.BROKER_HEARTBEAT, {}),
        (RequestCode.CONTROLLER_ELECT_MASTER, {"brokerName": "broker-cred"}),
    ],
)
async def test_state_changing_codes_refused_unsigned(ns_acl, code, ext):
    assert_refused(
        await invoke(ns_acl, None, RemotingCommand(code, ext_fields=dict(ext))), "No accessKey is configured"
    )


async def test_kv_writes_need_admin_and_reads_stay_open(ns_acl):
    put = {"namespace": "NS_ACL", "key": "kept", "value": "v1"}
    assert_refused(
        await invoke(ns_acl, None, RemotingCommand(RequestCode.PUT_KV_CONFIG, ext_fields=dict(put))),
        "No accessKey is configured",
    )
    get = RemotingCommand(RequestCode.GET_KV_CONFIG, ext_fields={"namespace": "NS_ACL", "key": "kept"})
    assert (await invoke(ns_acl, None, get)).code == ResponseCode.QUERY_NOT_FOUND
    ok = await invoke(ns_acl, ADMIN, RemotingCommand(RequestCode.PUT_KV_CONFIG, ext_fields=dict(put)))
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    got = await invoke(
        ns_acl, None, RemotingCommand(RequestCode.GET_KV_CONFIG, ext_fields={"namespace": "NS_ACL", "key": "kept"})
    )
    assert got.code == ResponseCode.SUCCESS and (got.ext_fields or {}).get("value") == "v1"
    # an unsigned delete leaves it
    delete = RemotingCommand(RequestCode.DELETE_KV_CONFIG, ext_fields={"namespace": "NS_ACL", "key": "kept"})
    assert_refused(await invoke(ns_acl, None, delete), "No accessKey is configured")
    got = await invoke(
        ns_acl, None, RemotingCommand(RequestCode.GET_KV_CONFIG, ext_fields={"namespace": "NS_ACL", "key": "kept"})
    )
    assert got.code == ResponseCode.SUCCESS


async def test_reads_are_open_to_unsigned_clients(ns_acl):
    for code in (
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.GET_NAMESRV_CONFIG,
    ):
        resp = await invoke(ns_acl, None, RemotingCommand(code))
        assert resp.code == ResponseCode.SUCCESS, (code, resp.remark)
    resp = await invoke(
        ns_acl, None, RemotingCommand(RequestCode.GET_TOPICS_BY_CLUSTER, ext_fields={"cluster": CLUSTER})
    )
    assert resp.code == ResponseCode.SUCCESS
    text = (await invoke(ns_acl, None, RemotingCommand(RequestCode.GET_NAMESRV_CONFIG))).body or b""
    assert CLUSTER_CRED[1].encode() not in text


async def test_an_admin_account_added_to_the_files_works_after_reload(ns_acl):
    late = ("LateAdmin01", "lateAdminSecret1")
    put = {"namespace": "NS_ACL", "key": "late", "value": "v"}
    resp = await invoke(ns_acl, late, RemotingCommand(RequestCode.PUT_KV_CONFIG, ext_fields=dict(put)))
    assert_refused(resp, f"No acl config for {late[0]}")
    extra = ns_acl.home / "conf" / "acl" / "team"
    extra.mkdir(parents=True)
    (extra / "late.yaml").write_text(acl_yml(acl_account(*late, admin=True)))

    async def accepted() -> bool:
        cmd = RemotingCommand(RequestCode.PUT_KV_CONFIG, ext_fields=dict(put))
        return (await invoke(ns_acl, late, cmd)).code == ResponseCode.SUCCESS

    await wait_until(accepted, 10, "the NameServer never reloaded its ACL files", interval=0.2)


# --------------------------------------------------------------------------- a real broker
async def test_broker_with_the_credential_registers_and_serves_clients(ns_acl):
    assert "broker-cred" in await broker_names(ns_acl)
    topic = unique("CredT")
    async with client(CLUSTER_CRED) as rc:  # the credential is an admin on the broker too
        api = MQClientAPI(rc, [ns_acl.namesrv])
        await api.create_topic(ns_acl.broker, TopicConfig(topic, 2, 2, 6))

        async def routed() -> bool:
            return await api.get_topic_route_info(topic) is not None

        await wait_until(routed, 10, f"route of {topic}")
    got = await produce_and_consume(ns_acl.namesrv, topic, 4, *USER)
    assert got == [f"m{i}".encode() for i in range(4)]


# --------------------------------------------------------------------------- observability
async def test_refusals_are_counted_and_logged_without_secrets(ns_acl):
    await invoke(ns_acl, None, register_cmd(unique("count-broker"), "127.0.0.1:5"))
    await invoke(ns_acl, (ADMIN[0], "notTheSecret1"), register_cmd(unique("count-broker"), "127.0.0.1:5"))
    s = scrape(ns_acl.metrics_port)
    assert s.value("rocketmq_auth_failures_total", reason="no_access_key") >= 1
    assert s.value("rocketmq_auth_failures_total", reason="signature") >= 1
    log = ns_acl.ns.log_text()
    assert f"accessKey={ADMIN[0]}" in log and "refused request code 103 from 127.0.0.1:" in log
    for secret in (ADMIN[1], USER[1], CLUSTER_CRED[1], "notTheSecret1"):
        assert secret not in log
        assert secret not in ns_acl.br.log_text()


# --------------------------------------------------------------------------- controller
async def test_controller_heartbeats_need_the_credential(tmp_path):
    """A controller NameServer with ACL: the broker with the credential is elected
    master of its group; the one without stays pending (its BROKER_HEARTBEAT refused)."""
    from tests.cluster.failover_util import controller_conf
    from tests.cluster.ha_util import ha_status

    home = tmp_path / "ns-home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    props = tmp_path / "namesrv.properties"
    props.write_text(
        "aclEnable=true\nenableControllerInNamesrv=true\n"
        f"rocketmqHome={home}\n"
        f"innerClientAuthenticationCredentials={CLUSTER_CRED[0]}:{CLUSTER_CRED[1]}\n"
    )
    cred = f"{CLUSTER_CRED[0]}:{CLUSTER_CRED[1]}"
    with_cred = controller_conf("ASYNC_MASTER", 0, innerClientAuthenticationCredentials=cred)
    without = controller_conf("ASYNC_MASTER", 0)
    with (
        start_namesrv(tmp_path, "-c", str(props)) as ns,
        start_broker(tmp_path, ns.addr, name="ctl-cred", conf=with_cred) as a,
        start_broker(tmp_path, ns.addr, name="ctl-nocred", conf=without) as b,
    ):

        async def led() -> bool:
            s = await ha_status(a.addr)
            return s["brokerRole"] == "ASYNC_MASTER" and s["epoch"] >= 1

        await wait_until(led, 30, "the broker with the credential was never made master")

        def refused() -> bool:
            return "answered code 1: org.apache.rocketmq.acl.common.AclException: No accessKey" in b.log_text()

        await wait_until(refused, 30, "the controller never refused the unsigned heartbeat")
        s = await ha_status(b.addr)
        assert s["brokerRole"] == "SLAVE" and s["epoch"] == 0  # pending: it takes no writes
        names = await broker_names(SimpleNamespace(namesrv=ns.addr))
        assert "ctl-cred" in names and "ctl-nocred" not in names
