"""The cluster credential: one AccessKey / SecretKey pair the brokers of a cluster share.

RocketMQ 5 calls it ``innerClientAuthenticationCredentials`` and writes it as JSON,
``{"accessKey":"...","secretKey":"..."}``; rmq also takes ``accessKey:secretKey``. A broker
that has one signs every request it sends itself (NameServer registrations, controller
heartbeats, slave sync from its master) exactly as a client's ``AclClientRPCHook`` does,
and proves it in the HA handshake (ha/protocol.py). A broker or NameServer with ACL on
accepts what is signed with it as an admin account would be accepted
(``with_cluster_account``).

4.9.8 has no such key: brokers do not sign, the NameServer checks nothing and a master
lets its slaves in through ``globalWhiteRemoteAddresses`` (spec 2.10).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from rmq.auth.acl_config import DENY, Account, AclSet
from rmq.auth.address import BLANK
from rmq.auth.signing import sign_request
from rmq.protocol.frame import RemotingCommand

__all__ = [
    "CREDENTIAL_KEY",
    "CLUSTER_ACCOUNT_SOURCE",
    "Credential",
    "CredentialError",
    "parse_credential",
    "with_cluster_account",
]

CREDENTIAL_KEY: Final = "innerClientAuthenticationCredentials"
# Account.path of the credential's account: it lives in no yml file (codes 50/51 never
# rewrite it).
CLUSTER_ACCOUNT_SOURCE: Final = CREDENTIAL_KEY
# plain_acl.yml's rule for both keys (spec 2.2): "length <= 6 -> error"
_MIN_LENGTH: Final = 7


class CredentialError(ValueError):
    """A credential value that cannot be used. The message never quotes the value."""


@dataclass(frozen=True, slots=True)
class Credential:
    access_key: str
    secret_key: str = field(repr=False)

    def sign(self, addr: str, cmd: RemotingCommand) -> None:
        """A ``RemotingClient`` request hook: sign ``cmd`` as ``AclClientRPCHook`` does."""
        # a new dict: a retried request or a cached header map is not changed in place
        cmd.ext_fields = sign_request(cmd.ext_fields, cmd.body, self.access_key, self.secret_key)


def parse_credential(text: str, key: str = CREDENTIAL_KEY) -> Credential | None:
    """``{"accessKey":"..","secretKey":".."}`` or ``accessKey:secretKey``; None for an
    empty value. ``CredentialError`` (starting with ``key``) when it is neither or a key
    is shorter than plain_acl.yml allows."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            raise CredentialError(f'{key}: not valid JSON (expected {{"accessKey":..,"secretKey":..}})') from None
        if not isinstance(obj, dict):
            raise CredentialError(f"{key}: expected a JSON object")
        access_key, secret_key = obj.get("accessKey"), obj.get("secretKey")
        if not isinstance(access_key, str) or not isinstance(secret_key, str):
            raise CredentialError(f"{key}: accessKey and secretKey must both be JSON strings")
    else:
        access_key, sep, secret_key = text.partition(":")
        if not sep:
            raise CredentialError(f'{key}: expected JSON {{"accessKey":..,"secretKey":..}} or accessKey:secretKey')
    access_key, secret_key = access_key.strip(), secret_key.strip()
    if len(access_key) < _MIN_LENGTH or len(secret_key) < _MIN_LENGTH:
        raise CredentialError(f"{key}: accessKey and secretKey must be at least {_MIN_LENGTH} characters long")
    return Credential(access_key, secret_key)


def with_cluster_account(acl: AclSet, credential: Credential | None) -> AclSet:
    """``acl`` plus the credential as an admin account without topic or group lists
    (allowed every request, spec 2.5 step 10) and without a white address (always
    signed). It replaces a yml account of the same AccessKey: the cluster's own
    requests must not depend on what an operator later writes to a file."""
    if credential is None:
        return acl
    account = Account(
        credential.access_key,
        credential.secret_key,
        BLANK,
        True,
        DENY,
        DENY,
        MappingProxyType({}),
        CLUSTER_ACCOUNT_SOURCE,
    )
    accounts = dict(acl.accounts)
    accounts[credential.access_key] = account
    return replace(acl, accounts=MappingProxyType(accounts))
