"""Who may change a NameServer (``aclEnable`` on a NameServer; issue 12, item 3).

4.9.8's NameServer checks nothing (spec 2.10): anyone who reaches it can register a
fake broker, delete a topic's route or wipe a broker's write permission. rmq's NameServer
with ``aclEnable=true`` sorts the requests in two:

* the reads clients and tools make (routes, cluster and topic lists, KV reads, the
  NameServer's config) stay open to every client, signed or not: a 4.9.8 client that
  does not sign must still find its routes;
* everything else — broker (un)registration and heartbeats, route deletion, KV writes,
  write-permission changes, config updates, every controller request, and any code not
  listed, so a request code added later is closed until someone opens it — needs a
  request signed by an admin account: an ``admin: true`` account of the NameServer's own
  plain_acl.yml, or the cluster credential (``credentials.with_cluster_account`` adds it
  as one).

Unlike the broker's rule (spec 2.5) no white list lets a request through unsigned:
neither ``globalWhiteRemoteAddresses`` nor an account's ``whiteRemoteAddress``. A plain_acl.yml
copied from a broker, with its sample white lists, must not open the NameServer to
whole subnets. Failures read like the broker's (``permissions.denial_response``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from rmq.auth.acl_config import AclSet
from rmq.auth.permissions import _CHECK_PERM, _VALIDATE, Allowed, Decision, Denied
from rmq.auth.signing import ACCESS_KEY, verify
from rmq.protocol.codes import RequestCode

__all__ = ["OPEN_CODES", "is_open", "validate_namesrv"]

R = RequestCode

# What a client or a tool reads; nothing here changes the NameServer's state.
OPEN_CODES: Final = frozenset(
    {
        R.GET_KV_CONFIG,  # 101
        R.GET_ROUTEINFO_BY_TOPIC,  # 105
        R.GET_BROKER_CLUSTER_INFO,  # 106
        R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,  # 206
        R.GET_KVLIST_BY_NAMESPACE,  # 219
        R.GET_TOPICS_BY_CLUSTER,  # 224
        R.GET_SYSTEM_TOPIC_LIST_FROM_NS,  # 304
        R.GET_UNIT_TOPIC_LIST,  # 311
        R.GET_HAS_UNIT_SUB_TOPIC_LIST,  # 312
        R.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,  # 313
        R.GET_NAMESRV_CONFIG,  # 319 (it lists no secret)
    }
)


_OPEN: Final = Allowed("no_resource")


def is_open(code: int) -> bool:
    return code in OPEN_CODES


def validate_namesrv(
    acl: AclSet, code: int, ext: Mapping[str, str] | None, body: bytes | None, version: int, peer: str
) -> Decision:
    """Decide one NameServer request. ``acl`` holds the NameServer's accounts plus the
    cluster credential's; ``peer`` is unused (no white list here) but kept so that this
    has the broker rule's shape (``permissions.validate``). Never raises."""
    if code in OPEN_CODES:
        return _OPEN
    access_key = None if ext is None else ext.get(ACCESS_KEY)
    if access_key is None:
        return Denied("no_access_key", "No accessKey is configured", _VALIDATE.format(664))
    account = acl.account(access_key)
    if account is None:
        return Denied("unknown_access_key", f"No acl config for {access_key}", _VALIDATE.format(668), access_key)
    if not verify(ext, body, account.signing_key, version, acl.signing_order):
        return Denied(
            "signature", f"Check signature failed for accessKey={access_key}", _VALIDATE.format(684), access_key
        )
    if not account.admin:
        return Denied(
            "admin",
            f"Need admin permission for request code={code}, but accessKey={access_key} is not",
            _CHECK_PERM.format(581),
            access_key,
        )
    return Allowed("admin", access_key)
