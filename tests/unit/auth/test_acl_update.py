"""Codes 50-53 without a broker: the request headers both ways, the document rewrites,
which file code 53 may write, and code 52's answer."""

from __future__ import annotations

import os

import pytest
import yaml

from rmq.auth.acl_config import DataVersion, build_acl_set, parse_acl_document
from rmq.auth.acl_update import (
    AccountDelete,
    AccountUpdate,
    AclUpdateError,
    AclVersionInfo,
    GlobalWhiteUpdate,
    delete_account_document,
    delete_failed_remark,
    global_white_failed_remark,
    split_java_list,
    update_account_document,
    update_failed_remark,
    update_global_white_document,
    white_addrs_file,
)
from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import HeaderFieldError
from tests.unit.auth.test_acl_config import SAMPLE


def test_update_existing_account_keeps_unset_fields_and_moves_it_last() -> None:
    text = update_account_document(
        SAMPLE,
        AccountUpdate("RocketMQ", "newsecret1", default_topic_perm="PUB", topic_perms=("t1=SUB",)),
        1700000000999,
    )
    doc = yaml.safe_load(text)
    assert [a["accessKey"] for a in doc["accounts"]] == ["rocketmq2", "RocketMQ"]
    acc = doc["accounts"][1]
    assert acc["secretKey"] == "newsecret1" and acc["defaultTopicPerm"] == "PUB"
    assert acc["defaultGroupPerm"] == "SUB" and acc["groupPerms"] == ["groupA=DENY", "groupB=PUB|SUB", "groupC=SUB"]
    assert acc["topicPerms"] == ["t1=SUB"] and acc["admin"] is False
    assert list(acc) == list(yaml.safe_load(SAMPLE)["accounts"][0])  # keys keep their places
    assert doc["dataVersion"] == [{"counter": 4, "timestamp": 1700000000999}]
    assert doc["globalWhiteRemoteAddresses"] == ["10.10.103.*", "192.168.0.*"]
    parse_acl_document(text, "x")


def test_new_account_fields_in_4_9_8_order() -> None:
    update = AccountUpdate.from_ext_fields(
        {
            "accessKey": "NewUser1",
            "secretKey": "NewSecret1",
            "whiteRemoteAddress": "192.168.0.*",
            "admin": "false",
            "defaultTopicPerm": "DENY",
            "topicPerms": "topicA=PUB,topicB=SUB",
            "groupPerms": "groupA=SUB",
        }
    )
    text = update_account_document(None, update, 5)
    doc = yaml.safe_load(text)
    assert list(doc["accounts"][0]) == [
        "accessKey",
        "secretKey",
        "whiteRemoteAddress",
        "admin",
        "defaultTopicPerm",
        "topicPerms",
        "groupPerms",
    ]
    assert doc["accounts"][0]["topicPerms"] == ["topicA=PUB", "topicB=SUB"]
    assert doc["dataVersion"] == [{"counter": 1, "timestamp": 5}]


@pytest.mark.parametrize(
    ("update", "message"),
    [
        (AccountUpdate("short", "12345678"), "The accessKey=short and secretKey=*** cannot be null"),
        (AccountUpdate("LongEnough", None), "secretKey=None cannot be null"),
        (AccountUpdate("LongEnough", "123"), "secretKey=*** cannot"),
        (AccountUpdate("LongEnough", "12345678", topic_perms=("topicA",)), "Parse Resource format error for topicA."),
        (AccountUpdate("LongEnough", "12345678", group_perms=("g=ALL",)), "Parse resource permission error for g=ALL."),
        (AccountUpdate("LongEnough", "12345678", white_remote_address="1.2.3.4/8"), "netaddress is 1.2.3.4/8"),
    ],
)
def test_update_refusals(update: AccountUpdate, message: str) -> None:
    with pytest.raises(AclUpdateError) as info:
        update_account_document(SAMPLE, update, 1)
    assert message in str(info.value)
    assert "12345678" not in str(info.value) and "123," not in str(info.value)


def test_update_header_needs_access_key() -> None:
    with pytest.raises(HeaderFieldError, match="<accessKey> is null"):
        AccountUpdate.from_ext_fields({"secretKey": "12345678"})


def test_delete_account() -> None:
    text = delete_account_document(SAMPLE, "rocketmq2", 77)
    assert text is not None
    doc = yaml.safe_load(text)
    assert [a["accessKey"] for a in doc["accounts"]] == ["RocketMQ"]
    assert doc["dataVersion"][0]["counter"] == 4
    assert delete_account_document(SAMPLE, "Nobody12", 77) is None
    assert delete_account_document(None, "rocketmq2", 77) is None


def test_update_global_white() -> None:
    text = update_global_white_document(SAMPLE, ["10.0.0.*", "::1"], 9)
    doc = yaml.safe_load(text)
    assert doc["globalWhiteRemoteAddresses"] == ["10.0.0.*", "::1"]
    assert len(doc["accounts"]) == 2 and doc["dataVersion"][0] == {"counter": 4, "timestamp": 9}
    with pytest.raises(AclUpdateError, match="10.0.0.0/8"):
        update_global_white_document(SAMPLE, ["10.0.0.0/8"], 9)
    assert yaml.safe_load(update_global_white_document("", [], 1)) == {
        "globalWhiteRemoteAddresses": [],
        "dataVersion": [{"counter": 1, "timestamp": 1}],
    }


def test_split_java_list() -> None:
    assert split_java_list(None) is None
    assert split_java_list("") == ()
    assert split_java_list("a,b,,") == ("a", "b")
    assert split_java_list(",a") == ("", "a")


def test_missing_admin_keeps_the_flag_and_a_new_account_is_not_admin() -> None:
    text = update_account_document(SAMPLE, AccountUpdate("rocketmq2", "12345678", default_topic_perm="SUB"), 1)
    acc = yaml.safe_load(text)["accounts"][-1]
    assert acc["accessKey"] == "rocketmq2" and acc["admin"] is True and acc["defaultTopicPerm"] == "SUB"
    demoted = update_account_document(SAMPLE, AccountUpdate("rocketmq2", "12345678", admin=False), 1)
    assert yaml.safe_load(demoted)["accounts"][-1]["admin"] is False
    new = yaml.safe_load(update_account_document(SAMPLE, AccountUpdate("Someone1", "secret-1"), 1))["accounts"][-1]
    assert new == {"accessKey": "Someone1", "secretKey": "secret-1", "admin": False}


def test_duplicates_in_one_file_are_merged_by_update_and_all_removed_by_delete() -> None:
    dup = "accounts:\n- {accessKey: TwiceAK1, secretKey: first-secret}\n- {accessKey: TwiceAK1, secretKey: other-secret}\n"
    updated = yaml.safe_load(update_account_document(dup, AccountUpdate("TwiceAK1", "third-secret"), 1))
    assert [a["secretKey"] for a in updated["accounts"]] == ["third-secret"]
    deleted = delete_account_document(dup, "TwiceAK1", 1)
    assert deleted is not None and yaml.safe_load(deleted)["accounts"] == []


def test_header_round_trip_and_what_mqadmin_sends() -> None:
    update = AccountUpdate("NewUser1", "NewSecret1", "10.0.0.*", True, "PUB", "SUB", ("a=PUB", "b=SUB"), ())
    ext = update.to_ext_fields()
    assert ext == {
        "accessKey": "NewUser1",
        "secretKey": "NewSecret1",
        "whiteRemoteAddress": "10.0.0.*",
        "admin": "true",
        "defaultTopicPerm": "PUB",
        "defaultGroupPerm": "SUB",
        "topicPerms": "a=PUB,b=SUB",
        "groupPerms": "",
    }
    assert AccountUpdate.from_ext_fields(ext) == update
    assert AccountUpdate("OnlyKey1").to_ext_fields() == {"accessKey": "OnlyKey1"}
    assert AccountUpdate.from_ext_fields({"accessKey": "OnlyKey1"}).admin is None
    assert "NewSecret1" not in repr(update)
    assert AccountDelete.from_ext_fields(AccountDelete("Gone1234").to_ext_fields()) == AccountDelete("Gone1234")
    with pytest.raises(HeaderFieldError, match="<accessKey> is null"):
        AccountDelete.from_ext_fields({})


def test_global_white_header_needs_both_fields() -> None:
    assert GlobalWhiteUpdate.from_ext_fields({"globalWhiteAddrs": "10.1.*,::1", "aclFileFullPath": ""}).addresses == (
        "10.1.*",
        "::1",
    )
    assert GlobalWhiteUpdate("").addresses == ()
    # mqadmin leaves aclFileFullPath out unless -p is given: 4.9.8's header error, naming it
    with pytest.raises(HeaderFieldError, match=r"the custom field <aclFileFullPath> is null"):
        GlobalWhiteUpdate.from_ext_fields({"globalWhiteAddrs": "10.1.*"})
    with pytest.raises(HeaderFieldError, match=r"<globalWhiteAddrs> is null"):
        GlobalWhiteUpdate.from_ext_fields({"aclFileFullPath": ""})


def test_white_addrs_file_accepts_only_acl_files(tmp_path) -> None:
    home = str(tmp_path)
    default = os.path.join(home, "conf", "plain_acl.yml")
    assert white_addrs_file(home, "") == default
    assert white_addrs_file(home, default) == default
    for ok in ("conf/acl/a.yml", "conf/acl/team/b.yaml"):
        assert white_addrs_file(home, os.path.join(home, ok)) == os.path.join(home, ok)
    assert white_addrs_file(home, os.path.join(home, "conf/acl/x/../c.yaml")) == os.path.join(home, "conf/acl/c.yaml")
    for bad in (
        os.path.join(home, "conf", "tools.yml"),  # under the home, but not an ACL file
        os.path.join(home, "conf", "acl", "..", "tools.yml"),
        os.path.join(home, "conf", "acl", "notes.txt"),
        os.path.join(home, "conf", "acl"),
        "/etc/passwd.yml",
        "conf/plain_acl.yml",  # relative
    ):
        with pytest.raises(AclUpdateError, match="is not an ACL file of this broker"):
            white_addrs_file(home, bad)


def test_acl_version_info_answer() -> None:
    acl = build_acl_set(
        [("/h/conf/acl/a.yml", b"accounts: []\n"), ("/h/conf/plain_acl.yml", SAMPLE.encode())], "/h/conf/plain_acl.yml"
    )
    info = AclVersionInfo.of(acl, "broker-a", "127.0.0.1:10911", "DefaultCluster")
    ext = info.to_ext_fields()
    assert ext == {
        "version": '{"counter":3,"timestamp":1700000000000}',
        "allAclFileVersion": '{"/h/conf/acl/a.yml":{"counter":0,"timestamp":0},'
        '"/h/conf/plain_acl.yml":{"counter":3,"timestamp":1700000000000}}',
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "DefaultCluster",
    }
    assert AclVersionInfo.from_ext_fields(ext) == info
    # a 5.x broker's DataVersion has one more field; it is ignored
    assert AclVersionInfo.from_ext_fields(
        {**ext, "version": '{"counter":1,"stateVersion":0,"timestamp":2}'}
    ).version == DataVersion(1, 2)
    with pytest.raises(ProtocolError):
        AclVersionInfo.from_ext_fields({**ext, "version": "not json"})
    missing_default = AclVersionInfo.of(build_acl_set([], "/h/conf/plain_acl.yml"), "b", "a:1", "c")
    assert missing_default.version == DataVersion() and missing_default.all_versions == {}


def test_remarks() -> None:
    assert (
        update_failed_remark("AK12345")
        == "The accesskey[AK12345] corresponding to accessConfig has been updated failed."
    )
    assert delete_failed_remark("AK12345", "why") == (
        "The accesskey[AK12345] corresponding to accessConfig has been deleted failed. why"
    )
    assert global_white_failed_remark("1.1.1.1") == "The globalWhiteAddresses[1.1.1.1] has been updated failed."


def test_written_documents_load() -> None:
    for text in (
        update_account_document(None, AccountUpdate("Someone1", "secret-1", topic_perms=("t=PUB",)), 1),
        update_global_white_document(SAMPLE, ["192.168.1.{1,2}"], 2),
    ):
        parse_acl_document(text, "x.yml")
