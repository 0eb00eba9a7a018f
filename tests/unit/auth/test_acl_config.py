"""plain_acl.yml: parsing, errors that name file / line / field, the multi-file merge,
and fingerprints (the rewrites of codes 50-53: test_acl_update.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.auth.acl_config import (
    DENY,
    PUB,
    SUB,
    AclConfigError,
    DataVersion,
    build_acl_set,
    load_acl,
    parse_acl_document,
    parse_perm,
)

SAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
dataVersion:
  - counter: 3
    timestamp: 1700000000000
"""


def test_distribution_sample_parses() -> None:
    f = parse_acl_document(SAMPLE, "plain_acl.yml")
    assert [p.source for p in f.global_white] == ["10.10.103.*", "192.168.0.*"]
    a, b = f.accounts
    assert a.access_key == "RocketMQ" and a.secret_key == "12345678"  # a YAML int becomes its text
    assert not a.admin and a.default_topic_perm == DENY and a.default_group_perm == SUB
    assert dict(a.resource_perms) == {
        "%RETRY%groupA": DENY,
        "%RETRY%groupB": PUB | SUB,
        "%RETRY%groupC": SUB,
        "topicA": DENY,
        "topicB": PUB | SUB,
        "topicC": SUB,
    }
    assert not a.white_remote_address.matches("192.168.1.1")  # blank never matches
    assert b.admin and b.white_remote_address.matches("192.168.1.7")
    assert b.default_topic_perm == DENY and b.default_group_perm == DENY and not b.resource_perms
    assert f.data_version == DataVersion(3, 1700000000000)
    assert "12345678" not in repr(a)


@pytest.mark.parametrize(
    ("text", "perm"),
    [("PUB", PUB), ("SUB", SUB), ("PUB|SUB", PUB | SUB), ("SUB|PUB", PUB | SUB), (" SUB ", SUB), ("DENY", DENY)]
    + [("ANY", DENY), ("pub", DENY), ("PUB | SUB", DENY), ("", DENY), (None, DENY)],
)
def test_parse_perm(text: str | None, perm: int) -> None:
    assert parse_perm(text) == perm


def test_unknown_perm_is_deny_with_a_warning() -> None:
    f = parse_acl_document("accounts:\n- {accessKey: abcdefg, secretKey: hijklmn, defaultTopicPerm: PUBB}\n", "x.yml")
    assert f.accounts[0].default_topic_perm == DENY
    assert any("PUBB" in w for w in f.warnings)


def test_numeric_and_boolean_scalars_become_java_text() -> None:
    f = parse_acl_document("accounts:\n- accessKey: 1234567\n  secretKey: true_but_long\n  admin: 'true'\n", "x")
    assert f.accounts[0].access_key == "1234567" and f.accounts[0].admin


BROKEN = [
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: [1, 2\n", 4, None, "not valid YAML"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123456\n", 3, "accounts[0].secretKey", "longer than 6"),
    ("accounts:\n  - accessKey: Rocket\n    secretKey: 12345678\n", 2, "accounts[0].accessKey", "longer than 6"),
    ("accounts:\n  - secretKey: 12345678\n", 2, "accounts[0].accessKey", "cannot be null"),
    (
        "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms:\n      - topicA=PUB\n      - topicB\n",
        6,
        "accounts[0].topicPerms[1]",
        "Parse resource permission failed for topic:topicB",
    ),
    (
        "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    whiteRemoteAddress: 10.0.0.0/8\n",
        4,
        "accounts[0].whiteRemoteAddress",
        "Netaddress examine Exception netaddress is 10.0.0.0/8",
    ),
    (
        "globalWhiteRemoteAddresses:\n  - 10.0.0.1\n  - 1.2.3.4,2\n",
        3,
        "globalWhiteRemoteAddresses[1]",
        "netaddress is 2",
    ),
    (
        "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    admin: maybe\n",
        4,
        "accounts[0].admin",
        "true or false",
    ),
    ("accounts: RocketMQ\n", 1, "accounts", "must be a list"),
    ("- a\n- b\n", 1, None, "not a mapping"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 2001-12-14\n", 3, "accounts[0].secretKey", "must be a string"),
]


@pytest.mark.parametrize(("text", "line", "field", "problem"), BROKEN)
def test_broken_files_name_file_line_and_field(text: str, line: int, field: str | None, problem: str) -> None:
    with pytest.raises(AclConfigError) as info:
        parse_acl_document(text, "/home/conf/acl/team.yml")
    err = info.value
    assert (err.path, err.line, err.field) == ("/home/conf/acl/team.yml", line, field)
    assert problem in str(err)
    assert str(err).startswith(f"/home/conf/acl/team.yml:{line}: ")
    assert "12345678" not in str(err)  # never a secret in a log line


def test_empty_document_is_no_data() -> None:
    for text in ("", "# only a comment\n", "{}\n"):
        f = parse_acl_document(text, "x.yml")
        assert f.accounts == () and f.global_white == () and f.warnings


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _account(ak: str, sk: str = "12345678", extra: str = "") -> str:
    return f"  - accessKey: {ak}\n    secretKey: {sk}\n{extra}"


def test_load_merges_default_file_and_acl_dir_recursively(tmp_path: Path) -> None:
    _write(
        tmp_path / "conf/plain_acl.yml", "globalWhiteRemoteAddresses: [10.0.0.1]\naccounts:\n" + _account("DefaultAK")
    )
    _write(tmp_path / "conf/acl/b.yml", "accounts:\n" + _account("TeamB_AK"))
    _write(
        tmp_path / "conf/acl/a/deep.yaml", "globalWhiteRemoteAddresses: ['10.0.0.2']\naccounts:\n" + _account("DeepAK1")
    )
    _write(tmp_path / "conf/acl/ignored.txt", "accounts:\n" + _account("Ignored1"))
    _write(tmp_path / "conf/tools.yml", "accessKey: RocketMQ\nsecretKey: 12345678\n")
    acl = load_acl(tmp_path)
    assert [Path(f.path).relative_to(tmp_path).as_posix() for f in acl.files] == [
        "conf/acl/a/deep.yaml",
        "conf/acl/b.yml",
        "conf/plain_acl.yml",
    ]
    assert set(acl.accounts) == {"DefaultAK", "TeamB_AK", "DeepAK1"}
    assert acl.is_globally_white("10.0.0.1") and acl.is_globally_white("10.0.0.2")
    assert not acl.is_globally_white("10.0.0.3")
    assert acl.file_of("TeamB_AK") == str(tmp_path / "conf/acl/b.yml")
    assert acl.default_file == str(tmp_path / "conf/plain_acl.yml")


def test_duplicate_access_key_first_file_wins(tmp_path: Path) -> None:
    # 4.9.8: the default file is read last, so conf/acl/ wins; later copies are ignored.
    _write(tmp_path / "conf/plain_acl.yml", "accounts:\n" + _account("SharedAK", "default-secret"))
    _write(
        tmp_path / "conf/acl/team.yml",
        "accounts:\n" + _account("SharedAK", "team-secret") + _account("SharedAK", "second-in-file"),
    )
    acl = load_acl(tmp_path)
    account = acl.account("SharedAK")
    assert account is not None and account.secret_key == "team-secret"
    assert account.path.endswith("team.yml")
    assert sum("SharedAK" in w for w in acl.warnings) == 2


def test_broken_file_names_its_path(tmp_path: Path) -> None:
    _write(tmp_path / "conf/plain_acl.yml", "accounts:\n" + _account("GoodAK1"))
    _write(tmp_path / "conf/acl/bad.yml", "accounts:\n  - accessKey: BadAK12\n    secretKey: short\n")
    with pytest.raises(AclConfigError) as info:
        load_acl(tmp_path)
    assert info.value.path == str(tmp_path / "conf/acl/bad.yml") and info.value.line == 3


def test_missing_home_files_give_an_empty_set(tmp_path: Path) -> None:
    acl = load_acl(tmp_path)
    assert acl.files == () and not acl.accounts and acl.fingerprint


def test_fingerprint_tells_a_change(tmp_path: Path) -> None:
    _write(tmp_path / "conf/plain_acl.yml", "accounts:\n" + _account("SomeAK1"))
    first = load_acl(tmp_path).fingerprint
    assert load_acl(tmp_path).fingerprint == first
    _write(tmp_path / "conf/plain_acl.yml", "accounts:\n" + _account("SomeAK1", "87654321"))
    second = load_acl(tmp_path).fingerprint
    assert second != first
    _write(tmp_path / "conf/acl/empty.yml", "")
    assert load_acl(tmp_path).fingerprint != second  # a new (even empty) file counts


def test_build_acl_set_is_pure_and_ordered() -> None:
    a = build_acl_set([("one.yml", b"accounts:\n" + _account("SameAK1", "secret-1").encode())])
    b = build_acl_set(
        [("two.yml", _account("x", "y").encode()[:0] + b"accounts:\n" + _account("SameAK1", "secret-2").encode())]
    )
    assert a.fingerprint != b.fingerprint
    acct = a.account("SameAK1")
    assert acct is not None and acct.secret_key == "secret-1"


def test_data_version_json() -> None:
    assert DataVersion(2, 1700000000000).to_json() == '{"counter":2,"timestamp":1700000000000}'
