"""rmq.broker.processors.acl_admin over a temp ACL home, no broker: the new set is in force
when the answer leaves, concurrent writes do not lose each other, a home whose files do not
load refuses the write and keeps them, and ACL off is said, not crashed on."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rmq.auth.acl_config import AclSet, load_acl
from rmq.auth.acl_update import AclVersionInfo
from rmq.broker.processors.acl_admin import NOT_ENABLED, AclAdminProcessor
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from tests.unit.broker.fakes import FakeConn

pytestmark = pytest.mark.timeout(30)

ACL = "accounts:\n  - accessKey: RocketMQAdmin\n    secretKey: 12345678admin\n    admin: true\n"


@dataclass
class Holder:
    acl: AclSet


@dataclass
class Names:
    brokerName: str = "broker-a"
    brokerClusterName: str = "DefaultCluster"
    broker_addr: str = "127.0.0.1:10911"


def processor(home: Path, holder: Holder | None) -> AclAdminProcessor:
    return AclAdminProcessor(str(home), Names(), lambda: holder, clock=lambda: 1700000000000)


def home_with(tmp_path: Path, text: str = ACL) -> Path:
    (tmp_path / "conf").mkdir(exist_ok=True)
    (tmp_path / "conf" / "plain_acl.yml").write_text(text)
    return tmp_path


async def answer(p: AclAdminProcessor, code: int, ext: dict[str, str] | None) -> RemotingCommand:
    fn = dict(p.handlers())[code]
    result = fn(FakeConn(), RemotingCommand(code, opaque=3, ext_fields=ext))
    return await result if inspect.isawaitable(result) else result


async def test_written_account_is_in_force_when_the_answer_leaves(tmp_path):
    home = home_with(tmp_path)
    holder = Holder(load_acl(home))
    p = processor(home, holder)
    r = await answer(p, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "NewUser1", "secretKey": "secret-12"})
    assert (r.code, r.opaque) == (ResponseCode.SUCCESS, 3)
    acc = holder.acl.account("NewUser1")
    assert acc is not None and acc.secret_key == "secret-12" and not acc.admin
    assert load_acl(home).fingerprint == holder.acl.fingerprint  # what is in force is what is on disk

    info = AclVersionInfo.from_ext_fields((await answer(p, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, None)).ext_fields)
    assert (info.version.counter, info.version.timestamp) == (1, 1700000000000)
    assert (info.broker_name, info.broker_addr, info.cluster_name) == ("broker-a", "127.0.0.1:10911", "DefaultCluster")

    r = await answer(p, RequestCode.DELETE_ACL_CONFIG, {"accessKey": "NewUser1"})
    assert r.code == ResponseCode.SUCCESS and holder.acl.account("NewUser1") is None


async def test_concurrent_writes_are_serialized(tmp_path):
    home = home_with(tmp_path)
    holder = Holder(load_acl(home))
    p = processor(home, holder)
    keys = [f"Parallel{i:02d}" for i in range(12)]
    answers = await asyncio.gather(
        *(answer(p, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": k, "secretKey": "secret-12"}) for k in keys)
    )
    assert [r.code for r in answers] == [ResponseCode.SUCCESS] * len(keys)
    doc = yaml.safe_load((home / "conf" / "plain_acl.yml").read_text())
    assert {a["accessKey"] for a in doc["accounts"]} == {"RocketMQAdmin", *keys}
    assert doc["dataVersion"][0]["counter"] == len(keys)
    assert all(holder.acl.account(k) is not None for k in keys)


async def test_files_that_do_not_load_refuse_the_write(tmp_path):
    home = home_with(tmp_path)
    holder = Holder(load_acl(home))
    broken = home / "conf" / "acl" / "broken.yml"
    broken.parent.mkdir()
    broken.write_text("accounts:\n  - accessKey: Broken12\n    secretKey: [unclosed\n")
    before = (home / "conf" / "plain_acl.yml").read_text()
    p = processor(home, holder)
    r = await answer(p, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "NewUser1", "secretKey": "secret-12"})
    assert r.code == 209
    assert r.remark.startswith(
        "The accesskey[NewUser1] corresponding to accessConfig has been updated failed. The ACL files do not load: "
    )
    assert f"{broken}:" in r.remark
    assert (home / "conf" / "plain_acl.yml").read_text() == before
    assert holder.acl.account("NewUser1") is None


async def test_acl_off_is_said(tmp_path):
    p = processor(tmp_path, None)
    for code, ext, failed in (
        (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "NewUser1", "secretKey": "secret-12"}, 209),
        (RequestCode.DELETE_ACL_CONFIG, {"accessKey": "NewUser1"}, 210),
        (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*", "aclFileFullPath": ""}, 211),
    ):
        r = await answer(p, code, ext)
        assert (r.code, r.remark) == (failed, f"{NOT_ENABLED}: nothing was changed")
    r = await answer(p, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, None)
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, NOT_ENABLED)
    assert not (tmp_path / "conf").exists()


async def test_missing_header_fields_are_named(tmp_path):
    p = processor(home_with(tmp_path), Holder(AclSet()))
    r = await answer(p, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*"})
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <aclFileFullPath> is null")
    r = await answer(p, RequestCode.DELETE_ACL_CONFIG, {})
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field <accessKey> is null")
