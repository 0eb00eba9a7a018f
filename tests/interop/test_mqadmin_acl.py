"""The real mqadmin 4.9.8 (../shared/rocketmq-4.9.8) runs its four ACL subcommands against an
rmq broker with ACL on: updateAclConfig, clusterAclConfigVersion, updateGlobalWhiteAddr,
deleteAclConfig (spec rocketmq-4x-acl-tls.md §2.9).

mqadmin signs with ``$ROCKETMQ_HOME/conf/tools.yml``: each test writes the account it runs
as there (a temp copy of the distribution's conf/). mqadmin exits 0 even when a command
fails (it prints the exception to stderr), so the tests read what it prints and what the
broker did.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rmq.protocol.codes import RemotingSysResponseCode, RequestCode, ResponseCode
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, unique, wait_until
from tests.integration.test_acl import ADMIN, PLAIN_ACL, USER, client
from tests.interop.mqadmin_util import ROCKETMQ, MqadminRun, mqadmin, mqadmin_available

pytestmark = pytest.mark.timeout(300)

CLUSTER = "TestCluster"


@pytest.fixture(scope="module")
def rig() -> Iterator[SimpleNamespace]:
    missing = mqadmin_available()
    if missing is not None:  # an interop environment that is missing fails, never skips
        pytest.fail(f"the real mqadmin cannot run: {missing}")
    with tempfile.TemporaryDirectory(prefix="rmq-mqadmin-acl-", ignore_cleanup_errors=True) as d:
        wd = Path(d)
        home = wd / "broker-home"
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
        tools_home = wd / "mqadmin-home"
        shutil.copytree(ROCKETMQ.parents[1] / "conf", tools_home / "conf")
        user_home = wd / "mqadmin-user"
        user_home.mkdir()
        conf = {"aclEnable": "true", "rocketmqHome": home, "brokerClusterName": CLUSTER}
        with start_namesrv(wd) as ns, start_broker(wd, ns.addr, "broker-a", conf) as br:
            yield SimpleNamespace(
                namesrv=ns.addr, broker=br.addr, br=br, home=home, tools_home=tools_home, user_home=user_home
            )


def run_as(rig: SimpleNamespace, creds: tuple[str, str], *args: str) -> MqadminRun:
    (rig.tools_home / "conf" / "tools.yml").write_text(f"accessKey: {creds[0]}\nsecretKey: {creds[1]}\n")
    return mqadmin(rig.user_home, *args, "-n", rig.namesrv, timeout=120, rocketmq_home=rig.tools_home)


async def run(rig: SimpleNamespace, *args: str, creds: tuple[str, str] = ADMIN) -> MqadminRun:
    return await asyncio.to_thread(run_as, rig, creds, *args)


def default_file(rig: SimpleNamespace) -> Path:
    return rig.home / "conf" / "plain_acl.yml"


def document(rig: SimpleNamespace) -> dict:
    return yaml.safe_load(default_file(rig).read_text())


async def runtime_info_code(rig: SimpleNamespace, creds: tuple[str, str]) -> int:
    async with BrokerApi(rig.broker, client=client(creds)) as api:
        return (await api.call(RequestCode.GET_BROKER_RUNTIME_INFO)).code


async def test_mqadmin_creates_lists_and_deletes_an_account(rig):
    ak, sk = unique("JavaUser"), "java-secret-1"
    created = await run(
        rig, "updateAclConfig", "-b", rig.broker, "-a", ak, "-s", sk, "-i", "PUB", "-u", "SUB", "-t", "ta=SUB,tb=PUB",
        "-g", "ga=SUB", "-w", "10.0.0.*", "-m", "false",
    )  # fmt: skip
    assert created.out.startswith(f"create or update plain access config to {rig.broker} success.\n"), created
    acc = next(a for a in document(rig)["accounts"] if a["accessKey"] == ak)
    assert acc == {
        "accessKey": ak,
        "secretKey": sk,
        "whiteRemoteAddress": "10.0.0.*",
        "admin": False,
        "defaultTopicPerm": "PUB",
        "defaultGroupPerm": "SUB",
        "topicPerms": ["ta=SUB", "tb=PUB"],
        "groupPerms": ["ga=SUB"],
    }

    async def accepted() -> bool:
        return await runtime_info_code(rig, (ak, sk)) == ResponseCode.SUCCESS

    await wait_until(accepted, 10, "the account mqadmin created to be accepted")

    listed = await run(rig, "clusterAclConfigVersion", "-c", CLUSTER)
    lines = listed.out.splitlines()
    assert lines[0].split()[:3] == ["#Cluster", "Name", "#Broker"], listed
    counter = document(rig)["dataVersion"][0]["counter"]
    row = next(line for line in lines if str(default_file(rig)) in line).split()
    assert row[:5] == [CLUSTER, "broker-a", rig.broker, str(default_file(rig)), str(counter)], listed
    assert lines[-1] == "get cluster's plain access config version success."

    deleted = await run(rig, "deleteAclConfig", "-b", rig.broker, "-a", ak)
    assert deleted.out == (
        f"delete plain access config account from {rig.broker} success.\naccount's accesskey is:{ak}"
    ), deleted

    async def refused() -> bool:
        return await runtime_info_code(rig, (ak, sk)) == RemotingSysResponseCode.SYSTEM_ERROR

    await wait_until(refused, 10, "the account mqadmin deleted to be refused")
    again = await run(rig, "deleteAclConfig", "-c", CLUSTER, "-a", ak)
    assert f"CODE: 210  DESC: The accesskey[{ak}] corresponding to accessConfig has been deleted failed." in again.err


async def test_mqadmin_updates_global_white_addresses(rig):
    before = document(rig).get("dataVersion")
    done = await run(
        rig, "updateGlobalWhiteAddr", "-b", rig.broker, "-g", "10.1.1.*,192.168.0.*", "-p", str(default_file(rig))
    )
    assert done.out == f"update global white remote addresses to {rig.broker} success.\n", done
    doc = document(rig)
    assert doc["globalWhiteRemoteAddresses"] == ["10.1.1.*", "192.168.0.*"]
    assert doc["dataVersion"][0]["counter"] == (before[0]["counter"] if before else 0) + 1
    assert {a["accessKey"] for a in doc["accounts"]} >= {ADMIN[0], USER[0]}
    # without -p mqadmin leaves aclFileFullPath out: the header error 4.9.8 gives, naming the field
    no_path = await run(rig, "updateGlobalWhiteAddr", "-b", rig.broker, "-g", "10.2.2.*")
    assert "CODE: 1  DESC: the custom field <aclFileFullPath> is null" in no_path.err, no_path
    assert document(rig)["globalWhiteRemoteAddresses"] == ["10.1.1.*", "192.168.0.*"]


async def test_mqadmin_as_a_normal_account_is_refused(rig):
    before = default_file(rig).read_text()
    r = await run(
        rig, "updateAclConfig", "-b", rig.broker, "-a", "Sneaky123", "-s", "sneaky-123", "-m", "true", creds=USER
    )
    assert f"Need admin permission for request code=50, but accessKey={USER[0]} is not" in r.err, r
    assert "create or update plain access config" not in r.out
    r = await run(rig, "clusterAclConfigVersion", "-b", rig.broker, creds=USER)
    assert f"Need admin permission for request code=52, but accessKey={USER[0]} is not" in r.err, r
    assert default_file(rig).read_text() == before
