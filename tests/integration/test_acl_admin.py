"""ACL management (issue 12 item 2, spec rocketmq-4x-acl-tls.md §2.9) with real processes: a
NameServer, an ACL master and its ACL slave (each with its own rocketmqHome), driven by
``rmq admin updateAclConfig | deleteAclConfig | clusterAclConfigVersion |
updateGlobalWhiteAddr`` and by raw requests for the exact answers.

An account written through the broker must work (and stop working) without a restart;
``-c`` must reach the slave too (RocketMQ #1966); only admins may manage; code 54 is not
supported; a broker without ACL says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rmq.auth.acl_update import AclVersionInfo
from rmq.protocol.codes import RemotingSysResponseCode, RequestCode, ResponseCode
from tests.harness import start_broker, start_namesrv
from tests.integration.admin_util import Run, admin
from tests.integration.broker_util import BrokerApi, unique, wait_until
from tests.integration.test_acl import ADMIN, CHECK_PERM, PLAIN_ACL, USER, VALIDATE, client, remark

pytestmark = pytest.mark.timeout(180)

CLUSTER = "TestCluster"
ADMIN_ENV = {"RMQ_ACCESS_KEY": ADMIN[0], "RMQ_SECRET_KEY": ADMIN[1]}
USER_ENV = {"RMQ_ACCESS_KEY": USER[0], "RMQ_SECRET_KEY": USER[1]}


@pytest.fixture(scope="module")
def group() -> Iterator[SimpleNamespace]:
    """NameServer + master + slave of broker group broker-acl, ACL on, a home each."""
    with (
        tempfile.TemporaryDirectory(prefix="rmq-acladm-", ignore_cleanup_errors=True) as d,
        contextlib.ExitStack() as st,
    ):
        wd = Path(d)
        homes = []
        for who in ("master", "slave"):
            home = wd / f"home-{who}"
            (home / "conf" / "acl").mkdir(parents=True)
            (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
            homes.append(home)
        acl = {"aclEnable": "true", "brokerClusterName": CLUSTER}
        ns = st.enter_context(start_namesrv(wd))
        master = st.enter_context(
            start_broker(wd, ns.addr, "broker-acl", {**acl, "rocketmqHome": homes[0], "brokerRole": "ASYNC_MASTER"})
        )
        slave = st.enter_context(
            start_broker(
                wd / "slave",
                ns.addr,
                "broker-acl",
                {**acl, "rocketmqHome": homes[1], "brokerRole": "SLAVE", "brokerId": 1},
            )
        )
        g = SimpleNamespace(ns=ns, namesrv=ns.addr, master=master, slave=slave, homes=homes, workdir=wd)

        async def both_registered() -> bool:
            r = await asyncio.to_thread(admin, "clusterList", "-n", ns.addr, "--json")
            return r.rc == 0 and master.addr in r.out and slave.addr in r.out

        asyncio.run(wait_until(both_registered, 30, "master and slave registered"))
        yield g


def rmq_admin(group: SimpleNamespace, *args: str, env: dict[str, str] | None = None) -> Run:
    return admin(*args, "-n", group.namesrv, env=ADMIN_ENV if env is None else env)


async def run_admin(group: SimpleNamespace, *args: str, env: dict[str, str] | None = None) -> Run:
    return await asyncio.to_thread(rmq_admin, group, *args, env=env)


def default_file(home: Path) -> Path:
    return home / "conf" / "plain_acl.yml"


def accounts(path: Path) -> dict[str, dict]:
    return {a["accessKey"]: a for a in yaml.safe_load(path.read_text()).get("accounts") or []}


async def signed_call(addr: str, creds: tuple[str, str] | None, code: int, ext: dict[str, str] | None = None):
    async with BrokerApi(addr, client=client(creds)) as api:
        return await api.call(code, ext)


async def runtime_info_code(addr: str, creds: tuple[str, str] | None) -> int:
    """GET_BROKER_RUNTIME_INFO needs no resource and no admin: it passes with any known account."""
    return (await signed_call(addr, creds, RequestCode.GET_BROKER_RUNTIME_INFO)).code


async def create_topic(group: SimpleNamespace, topic: str) -> None:
    async with BrokerApi(group.master.addr, client=client(ADMIN)) as api:
        r = await api.create_topic(topic)
        assert r.code == ResponseCode.SUCCESS, r.remark


# --------------------------------------------------------------------------- accounts
async def test_account_created_updated_deleted_through_rmq_admin(group):
    topic = unique("AclMgmt")
    await create_topic(group, topic)
    ak, sk = unique("MgmtUser"), "mgmt-secret-123"
    home = group.homes[0]
    before = yaml.safe_load(default_file(home).read_text()).get("dataVersion")

    async with BrokerApi(group.master.addr, client=client((ak, sk))) as api:
        r = await api.send(topic, b"before")
        assert r.remark == remark(f"No acl config for {ak}", VALIDATE.format(668))

        created = await run_admin(
            group, "updateAclConfig", "-b", group.master.addr, "-a", ak, "-s", sk, "-i", "PUB", "-t", "OtherT=SUB"
        )
        assert created.rc == 0, created
        assert created.out == f"create or update plain access config to {group.master.addr} success.\n"
        assert sk not in created.out + created.err

        async def sends() -> bool:
            return (await api.send(topic, b"x")).code == ResponseCode.SUCCESS

        await wait_until(sends, 10, "the created account to send")
        acc = accounts(default_file(home))[ak]
        assert list(acc) == ["accessKey", "secretKey", "admin", "defaultTopicPerm", "topicPerms"]
        assert acc == {
            "accessKey": ak,
            "secretKey": sk,
            "admin": False,
            "defaultTopicPerm": "PUB",
            "topicPerms": ["OtherT=SUB"],
        }
        after = yaml.safe_load(default_file(home).read_text())["dataVersion"][0]
        assert after["counter"] == (before[0]["counter"] if before else 0) + 1
        assert set(accounts(default_file(home))) >= {ADMIN[0], USER[0], ak}  # the others are kept

        # an update: the fields it leaves out stay (topicPerms here)
        updated = await run_admin(group, "updateAclConfig", "-b", group.master.addr, "-a", ak, "-s", sk, "-i", "DENY")
        assert updated.rc == 0, updated

        async def refused() -> bool:
            r = await api.send(topic, b"y")
            return r.remark == remark(f"No default permission for topic:{topic}", CHECK_PERM.format(606))

        await wait_until(refused, 10, "the updated account to be refused its topic")
        assert accounts(default_file(home))[ak]["topicPerms"] == ["OtherT=SUB"]

        deleted = await run_admin(group, "deleteAclConfig", "-b", group.master.addr, "-a", ak)
        assert deleted.rc == 0, deleted
        assert deleted.out == (
            f"delete plain access config account from {group.master.addr} success.\naccount's accesskey is:{ak}\n"
        )

        async def unknown() -> bool:
            r = await api.send(topic, b"z")
            return r.remark == remark(f"No acl config for {ak}", VALIDATE.format(668))

        await wait_until(unknown, 10, "the deleted account to be unknown")
        assert ak not in accounts(default_file(home))

    again = await run_admin(group, "deleteAclConfig", "-b", group.master.addr, "-a", ak)
    assert again.rc == 1
    assert (
        f"DELETE_ACL_CONFIG_FAILED (210): The accesskey[{ak}] corresponding to accessConfig has been deleted failed."
        in again.err
    )
    assert sk not in group.master.log_text()


async def test_account_in_an_acl_dir_file_is_updated_there(group):
    home = group.homes[0]
    extra = home / "conf" / "acl" / "team.yaml"
    ak = unique("TeamUser")
    extra.write_text(f"accounts:\n  - accessKey: {ak}\n    secretKey: team-secret-1\n    defaultTopicPerm: SUB\n")
    try:
        await wait_until(
            lambda: runtime_info_code(group.master.addr, (ak, "team-secret-1")), 10, "the team file loaded"
        )
        r = await signed_call(
            group.master.addr,
            ADMIN,
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
            {"accessKey": ak, "secretKey": "team-secret-2", "admin": "false"},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert accounts(extra)[ak]["secretKey"] == "team-secret-2"
        assert accounts(extra)[ak]["defaultTopicPerm"] == "SUB"
        assert ak not in accounts(default_file(home))
        # in force at once: the answer comes after the new set is
        assert await runtime_info_code(group.master.addr, (ak, "team-secret-2")) == ResponseCode.SUCCESS
    finally:
        extra.unlink()


async def test_refused_updates_answer_209_and_change_nothing(group):
    path = default_file(group.homes[0])
    before = path.read_text()
    cases = [
        ({"accessKey": "short", "secretKey": "long-enough-1"}, "The accessKey=short and secretKey=*** cannot be null"),
        ({"accessKey": "LongEnough1", "secretKey": "123"}, "secretKey=*** cannot be null"),
        ({"accessKey": "LongEnough1", "secretKey": "12345678", "topicPerms": "noEquals"}, "Parse Resource format"),
        ({"accessKey": "LongEnough1", "secretKey": "12345678", "whiteRemoteAddress": "1.2.3.0/24"}, "1.2.3.0/24"),
    ]
    for ext, message in cases:
        r = await signed_call(group.master.addr, ADMIN, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, ext)
        assert r.code == 209 and message in (r.remark or ""), (ext, r.code, r.remark)
        assert "long-enough-1" not in r.remark
    r = await signed_call(group.master.addr, ADMIN, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"secretKey": "12345678"})
    assert r.code == RemotingSysResponseCode.SYSTEM_ERROR and "<accessKey> is null" in r.remark
    assert path.read_text() == before


# --------------------------------------------------------------------------- cluster
async def test_cluster_option_reaches_master_and_slave(group):
    ak, sk = unique("ClusterUser"), "cluster-secret-1"
    addrs = (group.master.addr, group.slave.addr)
    for addr in addrs:
        assert await runtime_info_code(addr, (ak, sk)) == RemotingSysResponseCode.SYSTEM_ERROR

    r = await run_admin(group, "updateAclConfig", "-c", CLUSTER, "-a", ak, "-s", sk, "--json")
    assert r.rc == 0, r
    assert sorted(r.json()["brokers"]) == sorted(addrs) and r.json()["accessKey"] == ak
    for home in group.homes:
        assert ak in accounts(default_file(home))
    for addr in addrs:
        await wait_until(
            lambda a=addr: _is(runtime_info_code(a, (ak, sk)), ResponseCode.SUCCESS), 10, f"{ak} accepted by {addr}"
        )

    versions = await run_admin(group, "clusterAclConfigVersion", "-c", CLUSTER, "--json")
    assert versions.rc == 0, versions
    doc = versions.json()
    assert set(doc) == set(addrs)
    for addr, home in zip(addrs, group.homes, strict=True):
        assert doc[addr]["brokerAddr"] == addr and doc[addr]["clusterName"] == CLUSTER
        assert doc[addr]["brokerName"] == "broker-acl"
        assert str(default_file(home)) in doc[addr]["allAclFileVersion"]

    r = await run_admin(group, "deleteAclConfig", "-c", CLUSTER, "-a", ak, "--json")
    assert r.rc == 0, r
    assert sorted(r.json()["brokers"]) == sorted(addrs)
    for addr in addrs:
        await wait_until(
            lambda a=addr: _is(runtime_info_code(a, (ak, sk)), RemotingSysResponseCode.SYSTEM_ERROR),
            10,
            f"{ak} refused by {addr}",
        )


async def test_cluster_write_reports_a_drifted_slave_and_still_writes_the_rest(group):
    # an account only the master has (written with -b): the slave answers 210, the master is done
    ak, sk = unique("MasterOnly"), "master-secret-1"
    r = await run_admin(group, "updateAclConfig", "-b", group.master.addr, "-a", ak, "-s", sk)
    assert r.rc == 0, r
    r = await run_admin(group, "deleteAclConfig", "-c", CLUSTER, "-a", ak)
    assert r.rc == 1, r
    assert f"delete plain access config account from {group.master.addr} success." in r.out
    assert r.err.startswith(f"rmq admin deleteAclConfig: broker {group.slave.addr}: ")
    assert "DELETE_ACL_CONFIG_FAILED (210)" in r.err
    assert ak not in accounts(default_file(group.homes[0]))


async def _is(aw, expected: int) -> bool:
    return await aw == expected


# --------------------------------------------------------------------------- code 52
async def test_cluster_acl_info_version_changes(group):
    addr, home = group.master.addr, group.homes[0]
    r = await signed_call(addr, ADMIN, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
    assert r.code == ResponseCode.SUCCESS, r.remark
    first = AclVersionInfo.from_ext_fields(r.ext_fields)
    assert (first.broker_name, first.broker_addr, first.cluster_name) == ("broker-acl", addr, CLUSTER)
    assert first.all_versions[str(default_file(home))] == first.version

    text = await run_admin(group, "clusterAclConfigVersion", "-b", addr)
    assert text.rc == 0, text
    lines = text.out.splitlines()
    assert lines[0].split() == [
        "#Cluster", "Name", "#Broker", "Name", "#Broker", "Addr",
        "#AclFilePath", "#AclConfigVersionNum", "#AclLastUpdateTime",
    ]  # fmt: skip
    row = next(line for line in lines if str(default_file(home)) in line)
    assert row.split()[:5] == [CLUSTER, "broker-acl", addr, str(default_file(home)), str(first.version.counter)]
    assert lines[-1] == "get broker's plain access config version success."

    w = await run_admin(group, "updateGlobalWhiteAddr", "-b", addr, "-g", "10.9.8.*", "--json")
    assert w.rc == 0, w
    assert w.json() == {"globalWhiteRemoteAddresses": ["10.9.8.*"], "aclFileFullPath": "", "brokers": [addr]}
    r = await signed_call(addr, ADMIN, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
    second = AclVersionInfo.from_ext_fields(r.ext_fields)
    assert second.version.counter == first.version.counter + 1
    assert second.version.timestamp >= first.version.timestamp
    on_disk = yaml.safe_load(default_file(home).read_text())
    assert on_disk["dataVersion"] == [{"counter": second.version.counter, "timestamp": second.version.timestamp}]
    assert on_disk["globalWhiteRemoteAddresses"] == ["10.9.8.*"]
    w = await run_admin(group, "updateGlobalWhiteAddr", "-b", addr, "-g", "")
    assert w.rc == 0, w
    assert yaml.safe_load(default_file(home).read_text())["globalWhiteRemoteAddresses"] == []


# --------------------------------------------------------------------------- code 53
async def test_global_white_addrs_in_an_acl_dir_file(group):
    addr, home = group.master.addr, group.homes[0]
    white = home / "conf" / "acl" / "white.yaml"  # .yaml: 4.9.8 refused it by mistake
    white.write_text("globalWhiteRemoteAddresses: []\n")
    try:
        assert await runtime_info_code(addr, None) == RemotingSysResponseCode.SYSTEM_ERROR
        r = await run_admin(group, "updateGlobalWhiteAddr", "-b", addr, "-g", "127.0.0.1", "-p", str(white))
        assert r.rc == 0, r
        assert r.out == f"update global white remote addresses to {addr} success.\n"
        assert yaml.safe_load(white.read_text())["globalWhiteRemoteAddresses"] == ["127.0.0.1"]
        await wait_until(
            lambda: _is(runtime_info_code(addr, None), ResponseCode.SUCCESS), 10, "an unsigned request let in"
        )
        r = await run_admin(group, "updateGlobalWhiteAddr", "-b", addr, "-g", "", "-p", str(white))
        assert r.rc == 0, r
        await wait_until(
            lambda: _is(runtime_info_code(addr, None), RemotingSysResponseCode.SYSTEM_ERROR),
            10,
            "unsigned requests refused again",
        )
    finally:
        white.unlink()


async def test_global_white_addrs_path_rules(group):
    addr, home = group.master.addr, group.homes[0]
    tools = home / "conf" / "tools.yml"
    tools.write_text("accessKey: a\nsecretKey: b\n")
    for path, reason in (
        (tools, "is not an ACL file of this broker"),
        (home / "conf" / "acl" / ".." / "tools.yml", "is not an ACL file of this broker"),
        (home / "conf" / "acl" / "missing.yml", "does not exist"),
    ):
        r = await run_admin(group, "updateGlobalWhiteAddr", "-b", addr, "-g", "127.0.0.1", "-p", str(path))
        assert r.rc == 1, r
        assert "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED (211): The globalWhiteAddresses[127.0.0.1]" in r.err
        assert reason in r.err, r.err
    assert tools.read_text() == "accessKey: a\nsecretKey: b\n"
    assert not (home / "conf" / "acl" / "missing.yml").exists()
    # what mqadmin sends without -p: 4.9.8's header error, naming the field
    r = await signed_call(addr, ADMIN, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "1.2.3.4"})
    assert r.code == RemotingSysResponseCode.SYSTEM_ERROR
    assert "the custom field <aclFileFullPath> is null" in r.remark


# --------------------------------------------------------------------------- who may
@pytest.mark.parametrize(
    ("code", "ext"),
    [
        (
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
            {"accessKey": "Sneaky12", "secretKey": "sneaky-123", "admin": "true"},
        ),
        (RequestCode.DELETE_ACL_CONFIG, {"accessKey": ADMIN[0]}),
        (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}),
        (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*", "aclFileFullPath": ""}),
    ],
    ids=["50", "51", "52", "53"],
)
async def test_non_admin_is_refused(group, code, ext):
    before = default_file(group.homes[0]).read_text()
    r = await signed_call(group.master.addr, USER, code, ext)
    assert r.code == RemotingSysResponseCode.SYSTEM_ERROR
    assert r.remark == remark(
        f"Need admin permission for request code={code}, but accessKey={USER[0]} is not", CHECK_PERM.format(581)
    )
    assert default_file(group.homes[0]).read_text() == before


async def test_non_admin_rmq_admin_is_refused(group):
    r = await run_admin(
        group, "updateAclConfig", "-b", group.master.addr, "-a", "Sneaky12", "-s", "sneaky-123", "-m", "true",
        env=USER_ENV,
    )  # fmt: skip
    assert r.rc == 1 and "Need admin permission for request code=50" in r.err, r
    assert "Sneaky12" not in accounts(default_file(group.homes[0]))


async def test_code_54_is_not_supported(group):
    r = await signed_call(group.master.addr, ADMIN, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
    assert (r.code, r.remark) == (RemotingSysResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 54 not supported")
    assert not r.body


# --------------------------------------------------------------------------- ACL off
async def test_acl_disabled_broker_says_so(group, tmp_path):
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    conf = {"brokerClusterName": "PlainCluster", "rocketmqHome": home}
    with start_broker(tmp_path, group.namesrv, "broker-plain", conf) as br:
        for code, ext, failed in (
            (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "Someone1", "secretKey": "12345678"}, 209),
            (RequestCode.DELETE_ACL_CONFIG, {"accessKey": "Someone1"}, 210),
            (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*", "aclFileFullPath": ""}, 211),
            (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, None, RemotingSysResponseCode.SYSTEM_ERROR),
        ):
            r = await signed_call(br.addr, None, code, ext)
            assert r.code == failed, (code, r.code, r.remark)
            assert r.remark.startswith("ACL is not enabled on this broker (aclEnable=false"), r.remark
        r = await signed_call(br.addr, None, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        assert (r.code, r.remark) == (
            RemotingSysResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            " request type 54 not supported",
        )
        v = await run_admin(group, "clusterAclConfigVersion", "-b", br.addr, env={})
        assert v.rc == 1 and "ACL is not enabled on this broker" in v.err, v
        u = await run_admin(group, "updateAclConfig", "-b", br.addr, "-a", "Someone1", "-s", "12345678", env={})
        assert u.rc == 1, u
        assert "UPDATE_AND_CREATE_ACL_CONFIG_FAILED (209): ACL is not enabled on this broker" in u.err, u
    assert not (home / "conf" / "plain_acl.yml").exists()
