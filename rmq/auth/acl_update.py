"""The ACL-management codes 50-53 (spec 2.9), sans-IO: request headers in and out, the new
text of a plain_acl.yml, which file a request may write, and code 52's answer.

The broker's processor (``rmq.broker.processors.acl_admin``) reads the files, calls these
and writes the result; ``rmq admin`` builds its requests and reads the answers with the
same classes, so the wire names live here once.

What 4.9.8 does and rmq keeps: an update keeps every field of an existing account that the
request leaves null and moves the account to the end of ``accounts``; a new account goes to
the default file with its fields in 4.9.8's order; every rewrite bumps ``dataVersion``
(counter + 1, timestamp now). Where rmq differs on purpose:

* a missing ``admin`` keeps the account's flag (4.9.8 decoded it as ``false``, so an
  update without ``-m`` demoted an admin; mqadmin always sends it, so it sees no change);
* delete removes every entry of the key in the file (4.9.8 removed the first, and a
  duplicate further down then came into force);
* a refusal never shows the secret (4.9.8 put it in the remark);
* code 53 writes only an ACL file the broker loads (the default file, or a ``.yml`` /
  ``.yaml`` under ``conf/acl/``), where 4.9.8 wrote any existing file under the home
  and refused ``.yaml`` by mistake;
* nothing is written that the next load would refuse (addresses and permission items
  are checked first; 4.9.8 wrote them and its reload then failed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from rmq.auth.acl_config import (
    _MIN_KEY_LENGTH,
    ACL_DIR,
    DEFAULT_ACL_FILE,
    DENY,
    K_ACCESS_KEY,
    K_ACCOUNTS,
    K_ADMIN,
    K_DATA_VERSION,
    K_DEFAULT_GROUP,
    K_DEFAULT_TOPIC,
    K_GLOBAL_WHITE,
    K_GROUP_PERMS,
    K_SECRET_KEY,
    K_TOPIC_PERMS,
    K_WHITE,
    AclConfigError,
    AclSet,
    DataVersion,
    _compose,
    _data_version,
    _line,
    _text,
    java_utf16_len,
    parse_acl_document,
    parse_perm,
)
from rmq.auth.address import AddressPatternError, compile_pattern
from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import HeaderFieldError, parse_bool

__all__ = [
    "UPDATE_AND_CREATE_ACL_CONFIG_FAILED",
    "DELETE_ACL_CONFIG_FAILED",
    "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED",
    "AclUpdateError",
    "split_java_list",
    "AccountUpdate",
    "AccountDelete",
    "GlobalWhiteUpdate",
    "AclVersionInfo",
    "update_account_document",
    "delete_account_document",
    "update_global_white_document",
    "white_addrs_file",
    "update_failed_remark",
    "delete_failed_remark",
    "global_white_failed_remark",
]

# 4.9.8's ResponseCode values for these failures. Later releases reused 209-211 for the
# POP codes (rmq.protocol.codes.ResponseCode has those names), so they live here.
UPDATE_AND_CREATE_ACL_CONFIG_FAILED: Final = 209
DELETE_ACL_CONFIG_FAILED: Final = 210
UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED: Final = 211


class AclUpdateError(ValueError):
    """A request that is refused; the message is the response remark (never a secret)."""


def split_java_list(text: str | None) -> tuple[str, ...] | None:
    """``UtilAll.split(text, ",")`` as the ACL handlers use it; None stays None.

    Java's ``String.split`` drops trailing empty items; an empty string here is an empty
    list (Java would make it one empty item, which then fails the format check).
    """
    if text is None:
        return None
    items = text.split(",")
    while items and items[-1] == "":
        items.pop()
    return tuple(items)


def _required(ext: Mapping[str, str], name: str) -> str:
    value = ext.get(name)
    if value is None:  # @CFNotNull
        raise HeaderFieldError(name, "is null")
    return value


# =========================================================================== headers
@dataclass(frozen=True, slots=True)
class AccountUpdate:
    """``CreateAccessConfigRequestHeader`` (code 50) as ``PlainAccessConfig``."""

    access_key: str
    secret_key: str | None = field(default=None, repr=False)
    white_remote_address: str | None = None
    admin: bool | None = None  # None: keep the account's flag (false for a new account)
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: tuple[str, ...] | None = None
    group_perms: tuple[str, ...] | None = None

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str] | None) -> AccountUpdate:
        """The request header; ``HeaderFieldError`` when ``accessKey`` is missing (@CFNotNull)."""
        ext = ext or {}
        admin = ext.get("admin")
        return cls(
            _required(ext, "accessKey"),
            ext.get("secretKey"),
            ext.get("whiteRemoteAddress"),
            None if admin is None else parse_bool("admin", admin),
            ext.get("defaultTopicPerm"),
            ext.get("defaultGroupPerm"),
            split_java_list(ext.get("topicPerms")),
            split_java_list(ext.get("groupPerms")),
        )

    def to_ext_fields(self) -> dict[str, str]:
        """The header as mqadmin sends it (lists comma-joined); null fields left out."""
        ext = {"accessKey": self.access_key}
        optional = {
            "secretKey": self.secret_key,
            "whiteRemoteAddress": self.white_remote_address,
            "admin": None if self.admin is None else ("true" if self.admin else "false"),
            "defaultTopicPerm": self.default_topic_perm,
            "defaultGroupPerm": self.default_group_perm,
            "topicPerms": None if self.topic_perms is None else ",".join(self.topic_perms),
            "groupPerms": None if self.group_perms is None else ",".join(self.group_perms),
        }
        ext.update({k: v for k, v in optional.items() if v is not None})
        return ext


@dataclass(frozen=True, slots=True)
class AccountDelete:
    """``DeleteAccessConfigRequestHeader`` (code 51)."""

    access_key: str

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str] | None) -> AccountDelete:
        return cls(_required(ext or {}, "accessKey"))

    def to_ext_fields(self) -> dict[str, str]:
        return {"accessKey": self.access_key}


@dataclass(frozen=True, slots=True)
class GlobalWhiteUpdate:
    """``UpdateGlobalWhiteAddrsConfigRequestHeader`` (code 53); both fields @CFNotNull.

    ``acl_file_full_path`` empty selects the default file.
    """

    global_white_addrs: str
    acl_file_full_path: str = ""

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str] | None) -> GlobalWhiteUpdate:
        ext = ext or {}
        return cls(_required(ext, "globalWhiteAddrs"), _required(ext, "aclFileFullPath"))

    def to_ext_fields(self) -> dict[str, str]:
        return {"globalWhiteAddrs": self.global_white_addrs, "aclFileFullPath": self.acl_file_full_path}

    @property
    def addresses(self) -> tuple[str, ...]:
        return split_java_list(self.global_white_addrs) or ()


def _version_obj(v: DataVersion) -> dict[str, int]:
    return {"counter": v.counter, "timestamp": v.timestamp}


def _version_from(obj: object, what: str) -> DataVersion:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what} is not a DataVersion object: {obj!r:.60}")
    try:
        return DataVersion(int(obj.get("counter") or 0), int(obj.get("timestamp") or 0))
    except (TypeError, ValueError):
        raise ProtocolError(f"{what}: counter and timestamp must be numbers: {obj!r:.60}") from None


def _json(text: str | None, what: str) -> Any:
    if text is None:
        raise HeaderFieldError(what, "is null")
    try:
        return json.loads(text)
    except ValueError as e:
        raise ProtocolError(f"{what} is not JSON: {e}") from None


@dataclass(frozen=True, slots=True)
class AclVersionInfo:
    """Code 52's answer, ``GetBrokerAclConfigResponseHeader`` (ClusterAclVersionInfo).

    ``version`` is the default file's ``dataVersion``, ``all_versions`` every loaded file's
    (a file without one counts as counter 0, timestamp 0).
    """

    broker_name: str
    broker_addr: str
    cluster_name: str
    version: DataVersion
    all_versions: Mapping[str, DataVersion]

    @classmethod
    def of(cls, acl: AclSet, broker_name: str, broker_addr: str, cluster_name: str) -> AclVersionInfo:
        versions = {path: v or DataVersion() for path, v in acl.data_versions().items()}
        default = versions.get(acl.default_file or "", DataVersion())
        return cls(broker_name, broker_addr, cluster_name, default, versions)

    def to_obj(self) -> dict[str, Any]:
        """As a JSON document (``rmq admin clusterAclConfigVersion --json``)."""
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "version": _version_obj(self.version),
            "allAclFileVersion": {path: _version_obj(v) for path, v in self.all_versions.items()},
        }

    def to_ext_fields(self) -> dict[str, str]:
        obj = self.to_obj()
        return {
            "version": self.version.to_json(),
            "allAclFileVersion": json.dumps(obj["allAclFileVersion"], separators=(",", ":"), ensure_ascii=False),
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "clusterName": self.cluster_name,
        }

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str] | None) -> AclVersionInfo:
        ext = ext or {}
        raw_all = _json(ext.get("allAclFileVersion") or "{}", "allAclFileVersion")
        if not isinstance(raw_all, dict):
            raise ProtocolError(f"allAclFileVersion is not a JSON object: {raw_all!r:.60}")
        return cls(
            _required(ext, "brokerName"),
            _required(ext, "brokerAddr"),
            _required(ext, "clusterName"),
            _version_from(_json(ext.get("version"), "version"), "version"),
            {str(k): _version_from(v, f"allAclFileVersion[{k}]") for k, v in raw_all.items()},
        )


# =========================================================================== documents
def _check_resource_perms(items: Sequence[str] | None) -> None:
    """``Permission.checkResourcePerms``, with its messages."""
    for item in items or ():
        parts = [p for p in item.split("=") if p]
        if len(parts) != 2:
            raise AclUpdateError(
                f"Parse Resource format error for {item}.\n"
                "The expected resource format is 'Res=Perm'. For example: topicA=SUB"
            )
        if parts[1].strip() != "DENY" and parse_perm(parts[1]) == DENY:
            raise AclUpdateError(
                f"Parse resource permission error for {item}.\n"
                "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."
            )


def _document(text: str | bytes | None, path: str) -> dict[Any, Any]:
    if text is None:
        return {}
    data, root = _compose(text, path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AclConfigError(path, _line(root), None, "the document is not a mapping")
    return data


def _bump(doc: dict[Any, Any], now_ms: int, path: str) -> None:
    # PlainPermissionManager.updateAclConfigFileVersion: counter + 1, timestamp now.
    def fail(problem: str, field: str | None, *where: str | int) -> AclConfigError:
        return AclConfigError(path, None, field, problem)

    new = (_data_version(doc, fail) or DataVersion()).next(now_ms)
    doc[K_DATA_VERSION] = [_version_obj(new)]


def _dump(doc: dict[Any, Any], path: str) -> str:
    # SnakeYAML's dumpAsMap layout: block style, keys in the map's order.
    text = yaml.safe_dump(doc, default_flow_style=False, sort_keys=False, allow_unicode=True)
    parse_acl_document(text, path)  # never write a file the next load would refuse
    return text


def _text_or_none(value: object) -> str | None:
    try:
        return _text(value)
    except TypeError:
        return None


def _accounts(doc: dict[Any, Any]) -> list[Any]:
    accounts = doc.get(K_ACCOUNTS)
    return accounts if isinstance(accounts, list) else []


def _is_account(entry: object, access_key: str) -> bool:
    return isinstance(entry, dict) and _text_or_none(entry.get(K_ACCESS_KEY)) == access_key


def update_account_document(text: str | bytes | None, update: AccountUpdate, now_ms: int, path: str = "") -> str:
    """Code 50: the new text of the file that holds (or will hold) ``update.access_key``.

    ``AclUpdateError`` carries the response remark.
    """
    ak, sk = update.access_key, update.secret_key
    # PlainPermissionManager.checkPlainAccessConfig: the secret is required even for an
    # update (its message printed it; here it is masked).
    if ak is None or sk is None or java_utf16_len(ak) < _MIN_KEY_LENGTH or java_utf16_len(sk) < _MIN_KEY_LENGTH:
        shown = None if sk is None else "***"
        raise AclUpdateError(f"The accessKey={ak} and secretKey={shown} cannot be null and length should longer than 6")
    _check_resource_perms(update.topic_perms)
    _check_resource_perms(update.group_perms)
    try:
        compile_pattern(update.white_remote_address)
    except AddressPatternError as e:
        raise AclUpdateError(str(e)) from None

    doc = _document(text, path)
    old = _accounts(doc)
    existing = next((acc for acc in old if _is_account(acc, ak)), None)
    accounts = [acc for acc in old if not _is_account(acc, ak)]
    accounts.append(_merge_account(existing, update))
    doc[K_ACCOUNTS] = accounts
    _bump(doc, now_ms, path)
    return _dump(doc, path)


def _merge_account(existing: dict[Any, Any] | None, update: AccountUpdate) -> dict[Any, Any]:
    """``createAclAccessConfigMap``: the update written over the old account's fields."""
    acc: dict[Any, Any] = existing if existing is not None else {}
    acc[K_ACCESS_KEY] = update.access_key
    if update.secret_key:
        acc[K_SECRET_KEY] = update.secret_key
    if update.white_remote_address is not None:
        acc[K_WHITE] = update.white_remote_address
    if update.admin is not None or K_ADMIN not in acc:
        acc[K_ADMIN] = bool(update.admin)
    if update.default_topic_perm:
        acc[K_DEFAULT_TOPIC] = update.default_topic_perm
    if update.default_group_perm:
        acc[K_DEFAULT_GROUP] = update.default_group_perm
    if update.topic_perms is not None:
        acc[K_TOPIC_PERMS] = list(update.topic_perms)
    if update.group_perms is not None:
        acc[K_GROUP_PERMS] = list(update.group_perms)
    return acc


def delete_account_document(text: str | bytes | None, access_key: str, now_ms: int, path: str = "") -> str | None:
    """Code 51: the file without the account, or None when it is not there (answer 210)."""
    if not access_key:
        return None
    doc = _document(text, path)
    old = _accounts(doc)
    kept = [acc for acc in old if not _is_account(acc, access_key)]
    if len(kept) == len(old):
        return None
    doc[K_ACCOUNTS] = kept
    _bump(doc, now_ms, path)
    return _dump(doc, path)


def update_global_white_document(
    text: str | bytes | None, addresses: Sequence[str], now_ms: int, path: str = ""
) -> str:
    """Code 53: the file with ``globalWhiteRemoteAddresses`` replaced by ``addresses``."""
    for addr in addresses:
        try:
            compile_pattern(addr)
        except AddressPatternError as e:
            raise AclUpdateError(global_white_failed_remark(",".join(addresses), str(e))) from None
    doc = _document(text, path)
    doc[K_GLOBAL_WHITE] = list(addresses)
    _bump(doc, now_ms, path)
    return _dump(doc, path)


def white_addrs_file(home: str, requested: str) -> str:
    """Code 53's ``aclFileFullPath`` -> the file to write, or ``AclUpdateError``.

    Empty: the default file. Otherwise the default file itself or a ``.yml`` / ``.yaml``
    file under ``<home>/conf/acl/``, given as an absolute path (``..`` is resolved first,
    so it cannot climb out). Whether the file exists is the caller's check.
    """
    default = os.path.normpath(os.path.join(os.path.abspath(home), DEFAULT_ACL_FILE))
    if requested == "":
        return default
    acl_dir = os.path.normpath(os.path.join(os.path.abspath(home), ACL_DIR))
    path = os.path.normpath(requested)
    if os.path.isabs(requested):
        if path == default:
            return default
        if path.startswith(acl_dir + os.sep) and path.endswith((".yml", ".yaml")):
            return path
    raise AclUpdateError(
        f"aclFileFullPath {requested} is not an ACL file of this broker: "
        f"give {default} or a .yml / .yaml file under {acl_dir}/ (absolute path), or leave it empty for the default file"
    )


# =========================================================================== remarks
def _remark(head: str, reason: str | None) -> str:
    return head if not reason else f"{head} {reason}"


def update_failed_remark(access_key: str, reason: str | None = None) -> str:
    """Code 50's remark when the write did not happen (response 209)."""
    return _remark(f"The accesskey[{access_key}] corresponding to accessConfig has been updated failed.", reason)


def delete_failed_remark(access_key: str, reason: str | None = None) -> str:
    """Code 51's remark for an unknown accessKey (response 210)."""
    return _remark(f"The accesskey[{access_key}] corresponding to accessConfig has been deleted failed.", reason)


def global_white_failed_remark(addresses: str, reason: str | None = None) -> str:
    """Code 53's remark when the write did not happen (response 211)."""
    return _remark(f"The globalWhiteAddresses[{addresses}] has been updated failed.", reason)
