"""The 5.x clients' ``authorization`` header (RocketMQ 5's ``DefaultAuthenticationContextBuilder``).

``MQv2-HMAC-SHA1 Credential=<ak>[/...], SignedHeaders=x-mq-date-time, Signature=<hex>``: the
signature is HMAC-SHA1 of the ``x-mq-date-time`` value keyed by the account's secret, in hex of
either case (Python sends lower, Node upper). No header, or an empty Credential (what the Python
client sends without credentials), is anonymous. There is no clock-skew check: the Python client
writes local time with a literal ``Z``.

Accounts are the broker's plain_acl.yml ones (``rmq.auth.acl_config``), plus the cluster
credential as an admin account (``with_cluster_account``). Pure: no I/O.
"""

from __future__ import annotations

import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from rmq.auth.acl_config import PUB, SUB, Account, AclSet
from rmq.auth.permissions import check_permission
from rmq.proxy import pb
from rmq.proxy.convert import ProxyError

__all__ = ["Authenticator", "parse_authorization", "Authorization", "PUB", "SUB"]

ALGORITHM = "MQv2-HMAC-SHA1"


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signature: bytes


def parse_authorization(value: str) -> Authorization | None:
    """The header's credential and signature; None when it is anonymous. Raises ProxyError
    (UNAUTHORIZED) for a header that cannot be read."""
    algo, sep, rest = value.strip().partition(" ")
    if not sep:
        raise ProxyError(pb.Code.UNAUTHORIZED, "authorization header has no credential part")
    if algo != ALGORITHM:
        raise ProxyError(pb.Code.UNAUTHORIZED, f"authorization algorithm {algo!r} is not {ALGORITHM}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        k, eq, v = part.strip().partition("=")
        if eq:
            fields[k.strip()] = v.strip()
    credential = fields.get("Credential", "")
    access_key = credential.split("/", 1)[0]
    if not access_key:
        return None
    try:
        signature = binascii.unhexlify(fields.get("Signature", ""))
    except (binascii.Error, ValueError):
        raise ProxyError(pb.Code.UNAUTHORIZED, "authorization Signature is not hex") from None
    return Authorization(access_key, signature)


class Authenticator:
    """Decides a 5.x request against an ``AclSet`` (None: ACL off, everything passes)."""

    def __init__(self, acl: AclSet | None) -> None:
        self.acl = acl

    @property
    def enabled(self) -> bool:
        return self.acl is not None

    def authenticate(self, metadata: Mapping[str, str], peer_host: str) -> Account | None:
        """The account of the request (None: anonymous, allowed only from a globally white
        address when ACL is on). Raises ProxyError(UNAUTHORIZED)."""
        if self.acl is None:
            return None
        header = metadata.get("authorization")
        auth = parse_authorization(header) if header else None
        if auth is None:
            if self.acl.is_globally_white(peer_host):
                return None
            raise ProxyError(pb.Code.UNAUTHORIZED, "anonymous request refused: ACL is on and no Credential was given")
        account = self.acl.account(auth.access_key)
        if account is None:
            raise ProxyError(pb.Code.UNAUTHORIZED, f"no account with AccessKey {auth.access_key!r}")
        date = metadata.get("x-mq-date-time", "")
        expected = account.signing_key.mac(date.encode("utf-8"), None)
        if not hmac.compare_digest(expected, auth.signature):
            raise ProxyError(pb.Code.UNAUTHORIZED, f"signature check failed for AccessKey {auth.access_key!r}")
        return account

    def authorize(self, account: Account | None, resource: str, needed: int, *, group: bool = False) -> None:
        """Topic (or group) permission PUB / SUB, as the broker's plain ACL decides it."""
        if self.acl is None or account is None or account.admin:
            return
        key = f"%RETRY%{resource}" if group else resource
        owned = account.resource_perms.get(key)
        if owned is None:
            owned = account.default_group_perm if group else account.default_topic_perm
        if not check_permission(needed, owned):
            what = "group" if group else "topic"
            raise ProxyError(
                pb.Code.FORBIDDEN, f"AccessKey {account.access_key!r} has no permission on {what} {resource}"
            )
