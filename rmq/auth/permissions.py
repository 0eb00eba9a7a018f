"""Who may do what: resources per request code, admin-only codes, ``validate`` (spec 2.4-2.7).

``validate`` follows ``PlainAccessValidator.parse`` + ``PlainPermissionManager.validate``
step by step (spec 2.5), deliberately including the parts users rely on: a globally
white-listed address needs no credentials at all, and an account's own white-listed
address skips the signature and permission checks.

Where rmq is stricter than 4.9.8, on purpose (issue 12):
* SEND_BATCH_MESSAGE (320) is checked like SEND_MESSAGE_V2 (5.1.0's fix, PR #5608), with
  the V1 header's names when a batch comes without the V2 ones; LITE_PULL_MESSAGE (361,
  the same header as PULL_MESSAGE) is checked like PULL_MESSAGE;
* a SEND_MESSAGE (V1 header) to a retry topic checks the producer group: 4.9.8 read an
  ext field ``group`` the V1 header does not have, and so checked nothing;
* the admin-only set adds the destructive codes 4.9.8 left to any valid signature:
  offset reset, the cleanups and the ACL management itself;
* the POP codes (200050, 200051, 200053) need SUB on the topic and the group, as
  RocketMQ 5's authorization does (4.9.8 has no POP);
* ``_UNIQUE_KEY_QUERY`` is signed content except for clients of version <= 4.9.3
  (the 5.x rule; 4.9.8 always removed it and so refused 4.9.4+ clients).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from rmq.auth.acl_config import ANY, DENY, PUB, SUB, Account, AclSet
from rmq.auth.address import normalize_peer
from rmq.auth.decision import Allowed, Decision, Denied
from rmq.auth.signing import ACCESS_KEY, verify
from rmq.common.mixall import RETRY_GROUP_TOPIC_PREFIX, TRACE_TOPIC
from rmq.protocol.bodies import HeartbeatData
from rmq.protocol.codes import RemotingSysResponseCode, RequestCode, SerializeType
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmq.protocol.message import java_hash

__all__ = [
    "ADMIN_CODES_4_9_8",
    "ADMIN_CODES",
    "ACL_EXCEPTION",
    "ResourceError",
    "check_permission",
    "needs_admin",
    "required_resources",
    "Allowed",
    "Denied",
    "Decision",
    "validate",
    "denial_remark",
    "denial_response",
]

R = RequestCode

# Permission.ADMIN_CODE, the complete 4.9.8 list (spec 2.6).
ADMIN_CODES_4_9_8: Final = frozenset(
    {
        R.UPDATE_AND_CREATE_TOPIC,
        R.UPDATE_BROKER_CONFIG,
        R.DELETE_TOPIC_IN_BROKER,
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        R.DELETE_SUBSCRIPTIONGROUP,
    }
)
# Plus what any signed account could do to everybody's data on a 4.9.8 broker (issue 12).
ADMIN_CODES: Final = ADMIN_CODES_4_9_8 | frozenset(
    {
        R.INVOKE_BROKER_TO_RESET_OFFSET,  # 222
        R.CLEAN_EXPIRED_CONSUMEQUEUE,  # 306
        R.CLEAN_UNUSED_TOPIC,  # 316
        R.DELETE_EXPIRED_COMMITLOG,  # 329
        R.UPDATE_AND_CREATE_ACL_CONFIG,  # 50
        R.DELETE_ACL_CONFIG,  # 51
        R.GET_BROKER_CLUSTER_ACL_INFO,  # 52
        R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,  # 53
        # a confirmed failsafe check is a promise that delays this slave's takeover:
        # only the cluster credential (or an admin) may ask for one
        R.RMQ_FAILSAFE_CHECK,  # 10901 (rmq's own)
    }
)

ACL_EXCEPTION: Final = "org.apache.rocketmq.acl.common.AclException"
# The first stack frame 4.9.8 prints after the message (spec 2.7): users grep for them.
_VALIDATE: Final = "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:{})"
_CHECK_PERM: Final = "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:{})"
_PARSE: Final = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"


def check_permission(needed: int, owned: int) -> bool:
    """``Permission.checkPermission``: DENY beats everything; ANY is satisfied by PUB or SUB."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def needs_admin(code: int) -> bool:
    return code in ADMIN_CODES


# =========================================================================== resources
class ResourceError(ValueError):
    """The request cannot be read for its resources (4.9.8: ``AclException`` from ``parse``)."""


def _retry(group: str | None) -> str | None:
    return None if group is None else RETRY_GROUP_TOPIC_PREFIX + group


def _send(out: dict[str, int], topic: str | None, group: str | None) -> None:
    # A send to %RETRY%<g> is a consumer's retry: it needs SUB on the group, not PUB.
    if topic is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        _add(out, _retry(group), SUB)
    else:
        _add(out, topic, PUB)


def _pop(out: dict[str, int], topic: str | None, group: str | None) -> None:
    # RocketMQ 5 (POP headers' @RocketMQResource): SUB on the topic and on the group. An
    # ack of a retried message names the group's POP retry topic (%RETRY%<g>_<t>), which
    # belongs to the group: SUB on the group covers it, as it covers %RETRY%<g>.
    if topic is not None and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        _add(out, topic, SUB)
    _add(out, _retry(group), SUB)


def _add(out: dict[str, int], resource: str | None, perm: int) -> None:
    if resource is not None:  # PlainAccessResource.addResourceAndPerm ignores null
        out[resource] = perm


def required_resources(
    code: int, ext: Mapping[str, str] | None, body: bytes | None = None, heartbeat: HeartbeatData | None = None
) -> dict[str, int]:
    """resource -> needed perm, in insertion order. Groups are ``%RETRY%<group>``.

    ``heartbeat`` lets a caller that has decoded the HEART_BEAT body already pass it
    (4.9.8 decodes every heartbeat twice, spec 2.11). ``ResourceError`` when a required
    header field or the heartbeat body cannot be read: the request is refused even from
    a white-listed address, as in 4.9.8.
    """
    out: dict[str, int] = {}
    if ext is None:  # no header at all: only the global white list can let it in
        return out
    get = ext.get
    try:
        if code == R.SEND_MESSAGE_V2:
            _send(out, get("b"), get("a"))
        elif code == R.SEND_BATCH_MESSAGE:
            if "b" in ext:
                _send(out, get("b"), get("a"))
            else:
                _send(out, get("topic"), get("producerGroup"))
        elif code == R.SEND_MESSAGE:
            _send(out, get("topic"), get("producerGroup"))
        elif code == R.CONSUMER_SEND_MSG_BACK:
            _add(out, _retry(get("group")), SUB)
        elif code == R.PULL_MESSAGE or code == R.LITE_PULL_MESSAGE:
            _add(out, get("topic"), SUB)
            _add(out, _retry(get("consumerGroup")), SUB)
        elif code == R.QUERY_MESSAGE:
            _add(out, get("topic"), SUB)
        elif code == R.POP_MESSAGE or code == R.ACK_MESSAGE or code == R.CHANGE_MESSAGE_INVISIBLETIME:
            _pop(out, get("topic"), get("consumerGroup"))
        elif code == R.HEART_BEAT:
            data = heartbeat if heartbeat is not None else HeartbeatData.from_json(body or b"")
            for consumer in data.consumer_data_set:  # producer data is not checked
                _add(out, _retry(consumer.group_name), SUB)
                for sub in consumer.subscription_data_set:
                    _add(out, sub.topic, SUB)
        elif code == R.UNREGISTER_CLIENT:
            _add(out, _retry(UnregisterClientRequestHeader.from_ext_fields(ext).consumer_group), SUB)
        elif code == R.GET_CONSUMER_LIST_BY_GROUP:
            _add(out, _retry(GetConsumerListByGroupRequestHeader.from_ext_fields(ext).consumer_group), SUB)
        elif code == R.UPDATE_CONSUMER_OFFSET:
            header = UpdateConsumerOffsetRequestHeader.from_ext_fields(ext)
            _add(out, _retry(header.consumer_group), SUB)
            _add(out, header.topic, SUB)
    except (ProtocolError, ValueError, TypeError) as e:
        raise ResourceError(str(e)) from None
    return out


def _java_hashmap_order(resources: Mapping[str, int]) -> list[str]:
    """The keys in ``HashMap`` iteration order: which failure 4.9.8 reports first.

    HashMap iterates bucket by bucket, ``(h ^ h >>> 16) & (capacity - 1)`` with h the
    String.hashCode, insertion order inside a bucket; capacity 16, doubled whenever the
    size passes 3/4 of it.
    """
    keys = list(resources)
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2
    mask = capacity - 1

    def bucket(key: str) -> int:
        h = java_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & mask

    return sorted(keys, key=bucket)  # sorted() is stable: insertion order within a bucket


# =========================================================================== validate


_GLOBAL_WHITE: Final = Allowed("global_white")
# A verdict for resources longer than this is not remembered (a client's huge topic names
# must not stay pinned in an account's memo).
_MAX_MEMO_RESOURCE_CHARS: Final = 1024


def validate(
    acl: AclSet,
    code: int,
    ext: Mapping[str, str] | None,
    body: bytes | None,
    version: int,
    peer: str,
    heartbeat: HeartbeatData | None = None,
) -> Decision:
    """Decide one request, in 4.9.8's order of checks (spec 2.5). Never raises.

    ``peer`` is the remote host without port (``address.peer_host`` cuts a Java-style
    ``host:port``); ``version`` is the request header's version (for ``_UNIQUE_KEY_QUERY``).

    Every request's signature is checked. What follows it (steps 7-11) depends only on
    the account, the code and the resources, and is remembered on the account
    (``Account.decisions``); the white lists are remembered per peer host. Those memos
    die with the account / set they belong to, so a reload or a code 50-53 write is in
    force from the next request.
    """
    try:
        needed = required_resources(code, ext, body, heartbeat)
    except ResourceError as e:
        return Denied("parse", str(e), _PARSE, None if ext is None else ext.get(ACCESS_KEY))

    host = normalize_peer(peer) if ":" in peer else peer
    if acl.is_globally_white(host):  # 1
        return _GLOBAL_WHITE

    access_key = None if ext is None else ext.get(ACCESS_KEY)
    if access_key is None:  # 2
        return Denied("no_access_key", "No accessKey is configured", _VALIDATE.format(664))
    account = acl.accounts.get(access_key)
    if account is None:  # 3 (4: an account missing behind a known key cannot happen here)
        return Denied("unknown_access_key", f"No acl config for {access_key}", _VALIDATE.format(668), access_key)
    if account.is_white(host):  # 5
        return Allowed("account_white", access_key)
    if not verify(ext, body, account.signing_key, version, acl.signing_order):  # 6
        return Denied(
            "signature", f"Check signature failed for accessKey={access_key}", _VALIDATE.format(684), access_key
        )
    key = (code, tuple(needed.items()))
    decision = account.decisions.get(key)
    if decision is None:
        decision = _decide(account, code, needed)
        if sum(map(len, needed)) <= _MAX_MEMO_RESOURCE_CHARS:
            account.decisions.put(key, decision)
    return decision


def _decide(account: Account, code: int, needed: Mapping[str, int]) -> Decision:
    """Steps 7-11 of spec 2.5, for a request whose signature is good."""
    if needed.get(TRACE_TOPIC) == PUB:  # 7: message trace is always allowed to write
        return Allowed("trace_topic", account.access_key)
    return _check_perm(account, code, needed)


def _check_perm(account: Account, code: int, needed: Mapping[str, int]) -> Decision:
    """``PlainPermissionManager.checkPerm`` (steps 8-11 of spec 2.5)."""
    ak = account.access_key
    if code in ADMIN_CODES and not account.admin:  # 8
        return Denied(
            "admin",
            f"Need admin permission for request code={code}, but accessKey={ak} is not",
            _CHECK_PERM.format(581),
            ak,
        )
    if not needed:  # 9
        return Allowed("no_resource", ak)
    owned = account.resource_perms
    if not owned and account.admin:  # 10: an admin without any topicPerms/groupPerms
        return Allowed("admin", ak)
    resources = _java_hashmap_order(needed) if len(needed) > 1 else list(needed)
    for resource in resources:  # 11
        is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
        explicit = owned.get(resource)
        if explicit is None:
            mine, line = (account.default_group_perm if is_group else account.default_topic_perm), 606
        else:
            mine, line = explicit, 611
        if not check_permission(needed[resource], mine):
            what = f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX) :]}" if is_group else f"topic:{resource}"
            return Denied("permission", f"No default permission for {what}", _CHECK_PERM.format(line), ak)
    return Allowed("permission", ak)


# =========================================================================== the answer
def denial_remark(denied: Denied) -> str:
    """``RemotingHelper.exceptionSimpleDesc``: ``<class>: <message>, <first frame>``."""
    head = ACL_EXCEPTION if denied.message is None else f"{ACL_EXCEPTION}: {denied.message}"
    return f"{head}, {denied.frame}"


def denial_response(request: RemotingCommand, denied: Denied) -> RemotingCommand | None:
    """The answer to a refused request: SYSTEM_ERROR with the remark, or None for a oneway.

    4.9.8 builds it with the server's default serialization (JSON), whatever the request
    used, and with no ext fields and no body (spec 2.7).
    """
    if request.is_oneway:
        return None
    response = RemotingCommand(
        RemotingSysResponseCode.SYSTEM_ERROR,
        opaque=request.opaque,
        remark=denial_remark(denied),
        serialize_type=SerializeType.JSON,
    )
    response.mark_response()
    return response
