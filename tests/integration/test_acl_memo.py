"""The broker's remembered ACL verdicts (rmq.auth.cache) against a real ``rmq broker``: after
many allowed sends on one connection, a code 50 / 51 write is in force on the very next
request (no wait), another topic is not served from the remembered verdict, a changed
secret is not served from the old one, and a request whose signature does not match is
refused however often the same request passed before."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rmq.auth.acl_update import AccountDelete, AccountUpdate
from rmq.auth.signing import SIGNATURE
from rmq.client.acl import AclClientRPCHook
from rmq.protocol.codes import RemotingSysResponseCode, RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from tests.integration import test_acl
from tests.integration.broker_util import BrokerApi, unique
from tests.integration.test_acl import ADMIN, CHECK_PERM, USER, VALIDATE, client, create_topic, remark

pytestmark = pytest.mark.timeout(120)

WARM = 50  # sends that must have been answered from the remembered verdict


# test_acl's NameServer + ACL broker (PLAIN_ACL), one for this module
cluster = test_acl.cluster


async def write_account(cluster: SimpleNamespace, code: int, ext: dict[str, str]) -> None:
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        r = await api.call(code, ext)
        assert r.code == ResponseCode.SUCCESS, r.remark


async def test_account_writes_are_in_force_on_the_next_request_after_many_allowed(cluster):
    topic, other = unique("MemoT"), unique("MemoOther")
    await create_topic(cluster, topic)
    await create_topic(cluster, other)
    ak, sk = unique("MemoUser"), "memo-secret-1"
    update = AccountUpdate(ak, sk, default_topic_perm="DENY", topic_perms=(f"{topic}=PUB",))
    await write_account(cluster, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, update.to_ext_fields())

    async with BrokerApi(cluster.broker, client=client((ak, sk))) as api:
        for _ in range(WARM):
            await api.send_ok(topic, b"warm")
        # another topic on the same connection: not served from the remembered verdict
        r = await api.send(other, b"x")
        assert r.remark == remark(f"No default permission for topic:{other}", CHECK_PERM.format(606))

        # code 50 takes the permission away: refused at once, no reload to wait for
        denied = AccountUpdate(ak, sk, topic_perms=(f"{topic}=DENY",))
        await write_account(cluster, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, denied.to_ext_fields())
        r = await api.send(topic, b"after-deny")
        assert r.remark == remark(f"No default permission for topic:{topic}", CHECK_PERM.format(611))

        await write_account(cluster, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, update.to_ext_fields())
        await api.send_ok(topic, b"allowed-again")

    # a new secret: the old one is refused at once, the new one works
    await write_account(
        cluster, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, AccountUpdate(ak, "memo-secret-2").to_ext_fields()
    )
    async with BrokerApi(cluster.broker, client=client((ak, sk))) as api:
        r = await api.send(topic, b"old-secret")
        assert r.remark == remark(f"Check signature failed for accessKey={ak}", VALIDATE.format(684))
    async with BrokerApi(cluster.broker, client=client((ak, "memo-secret-2"))) as api:
        await api.send_ok(topic, b"new-secret")
        # code 51 deletes the account: unknown on the next request
        await write_account(cluster, RequestCode.DELETE_ACL_CONFIG, AccountDelete(ak).to_ext_fields())
        r = await api.send(topic, b"deleted")
        assert r.remark == remark(f"No acl config for {ak}", VALIDATE.format(668))


async def test_a_request_whose_signature_does_not_match_is_refused_after_many_allowed(cluster):
    topic = unique("MemoSig")
    await create_topic(cluster, topic)
    # USER may send to any topic (defaultTopicPerm PUB|SUB)
    async with BrokerApi(cluster.broker, client=client(USER)) as api:
        for _ in range(WARM):
            await api.send_ok(topic, b"warm")
        # one signed request, sent as it is (passes), with another body, another topic or
        # a changed signature (refused)
        header = api.send_header(topic, properties="WAIT\x01true\x02")
        signed = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_v2_ext_fields(), body=b"body")
        AclClientRPCHook(*USER)("", signed)
        ext = dict(signed.ext_fields or {})
        async with BrokerApi(cluster.broker) as raw:  # sends the ext fields as given, unsigned
            assert (await raw.call(RequestCode.SEND_MESSAGE_V2, dict(ext), b"body")).code == ResponseCode.SUCCESS
            for tampered, body in (
                (dict(ext), b"other-body"),
                ({**ext, "b": unique("MemoSigOther")}, b"body"),
                ({**ext, SIGNATURE: ("B" if ext[SIGNATURE][0] == "A" else "A") + ext[SIGNATURE][1:]}, b"body"),
            ):
                r = await raw.call(RequestCode.SEND_MESSAGE_V2, tampered, body)
                assert r.code == RemotingSysResponseCode.SYSTEM_ERROR
                assert r.remark == remark(f"Check signature failed for accessKey={USER[0]}", VALIDATE.format(684))
