"""The cluster credential inside a broker group (issue 12, items 3, 7, 8), real processes.

Master and slave share ``innerClientAuthenticationCredentials``; the master has
``aclEnable=true`` and no white list at all (``globalWhiteRemoteAddresses: []``):

* the slave replicates (the HA handshake proves the credential) and its metadata sync
  (GET_ALL_TOPIC_CONFIG ...) is accepted because it is signed with the credential;
* a slave with the wrong secret, or none, is refused at the HA port (REJECT naming why,
  a log line with peer and AccessKey, ``rocketmq_auth_failures_total``) and gets no
  CommitLog byte, nor the master's metadata;
* a HELLO captured from one connection, replayed on another (new nonce), is refused.
"""

from __future__ import annotations

import asyncio

import pytest

from ha.protocol import (
    MasterAccept,
    MasterChallenge,
    MasterReject,
    SlaveHello,
    SlaveStreamReader,
    encode_hello,
    encode_offset_report,
)
from rmq.auth.credentials import Credential
from rmq.protocol.bodies import TopicConfig, TopicConfigSerializeWrapper
from rmq.protocol.codes import RequestCode, ResponseCode
from tests.cluster.ha_util import CLUSTER, GROUP, acks, ha_group, ha_status, master_conf, slave_conf, wait_in_sync
from tests.integration.broker_util import (
    BrokerApi,
    RawConn,
    acl_account,
    acl_yml,
    produce_and_consume,
    signing_client,
    unique,
    wait_until,
)
from tests.metrics_util import free_ports, scrape

pytestmark = pytest.mark.timeout(180)

CRED = ("clusterAK01", "clusterSecret01")
USER = ("GroupUser01", "groupUserSecret1")
FILE_SIZE = 4 * 1024 * 1024  # tests/harness.py's mappedFileSizeCommitLog
# no white list at all: the slave gets in by the credential only
PLAIN_ACL = acl_yml(acl_account(*USER))


def credential_value(ak: str, sk: str) -> str:
    return f'{{"accessKey":"{ak}","secretKey":"{sk}"}}'


def acl_home(root) -> str:
    home = root / "acl-home"
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    return str(home)


def master(tmp_path, metrics_port: int = 0) -> dict[str, object]:
    extra: dict[str, object] = {
        "aclEnable": "true",
        "rocketmqHome": acl_home(tmp_path),
        "innerClientAuthenticationCredentials": credential_value(*CRED),
    }
    if metrics_port:
        extra.update(metricsPromExporterPort=metrics_port, metricsPromExporterHost="127.0.0.1")
    return master_conf("ASYNC_MASTER", **extra)


async def create_topic(namesrv: str, broker: str, topic: str) -> None:
    """As the cluster credential (an admin on an ACL broker); until the NameServer routes it."""
    from rmq.client.api import MQClientAPI

    async with signing_client(CRED) as rc:
        api = MQClientAPI(rc, [namesrv])
        await api.create_topic(broker, TopicConfig(topic, 2, 2, 6))

        async def routed() -> bool:
            return await api.get_topic_route_info(topic) is not None

        await wait_until(routed, 10, f"route of {topic}")


async def topics_of(broker: str, creds: tuple[str, str] | None) -> set[str]:
    async with BrokerApi(broker, client=signing_client(creds)) as api:
        r = await api.call(RequestCode.GET_ALL_TOPIC_CONFIG)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return set(TopicConfigSerializeWrapper.from_json(r.body).topic_config_table)


# --------------------------------------------------------------------------- the right credential
async def test_slave_with_the_credential_replicates_and_syncs_without_white_listing(tmp_path):
    slave = slave_conf(
        innerClientAuthenticationCredentials=credential_value(*CRED),
        aclEnable="true",
        rocketmqHome=acl_home(tmp_path / "s"),
        slaveSyncInterval=200,
    )
    with ha_group(master(tmp_path), slave) as g:
        topic = unique("CredHA")
        await create_topic(g.ns.addr, g.master.addr, topic)
        assert await produce_and_consume(g.ns.addr, topic, 5, *USER) == [f"m{i}".encode() for i in range(5)]
        top = await wait_in_sync(g, creds=CRED)
        assert top > 0

        async def synced() -> bool:
            return topic in await topics_of(g.slave.addr, CRED)

        await wait_until(synced, 30, "the slave's metadata sync never brought the topic")
        # the master's ACL let the sync in by its signature: nothing was refused
        assert "ACL: refused" not in g.master.log_text()
        assert "slave sync from master" not in g.slave.log_text()
        assert "HA master" in g.slave.log_text() and "accepted this slave" in g.slave.log_text()
        for p in (g.master, g.slave):
            assert CRED[1] not in p.log_text()


# --------------------------------------------------------------------------- the wrong one / none
@pytest.mark.parametrize(
    "slave_cred,reason,says",
    [
        ((CRED[0], "wrongSecret01"), "ha_signature", "does not match this master's credential"),
        (None, "ha_no_credential", "requires the cluster credential"),
    ],
    ids=["wrong-secret", "no-credential"],
)
async def test_slave_without_the_credential_is_refused_and_gets_nothing(tmp_path, slave_cred, reason, says):
    (metrics_port,) = free_ports(1)
    extra = {"slaveSyncInterval": 200}
    if slave_cred is not None:
        extra["innerClientAuthenticationCredentials"] = credential_value(*slave_cred)
    with ha_group(master(tmp_path, metrics_port), slave_conf(**extra), start_slave=False) as g:
        topic = unique("CredHA")
        await create_topic(g.ns.addr, g.master.addr, topic)
        assert await produce_and_consume(g.ns.addr, topic, 3, *USER) == [b"m0", b"m1", b"m2"]
        m = await ha_status(g.master.addr, CRED)
        assert m["commitLogMaxOffset"] > 0
        g.slave.start()

        async def rejected() -> str | None:
            s = await ha_status(g.slave.addr)
            return s["haClientRuntimeInfo"].get("lastReject")

        await wait_until(rejected, 30, "the slave was never refused")
        assert says in (await rejected() or "")

        # and its metadata sync was refused too (unsigned or badly signed)
        def sync_failed() -> bool:
            return "slave sync from master" in g.slave.log_text()

        await wait_until(sync_failed, 30, "the slave's metadata sync was never tried")

        s = await ha_status(g.slave.addr)
        assert s["commitLogMaxOffset"] == 0
        assert topic not in await topics_of(g.slave.addr, None)
        m = await ha_status(g.master.addr, CRED)
        assert acks(m) == {} and m["inSyncSlaveNums"] == 0
        log = g.master.log_text()
        ak = slave_cred[0] if slave_cred else "(none)"
        assert "HA handshake from 127.0.0.1:" in log and f"refused, accessKey={ak}" in log
        assert scrape(metrics_port).value("rocketmq_auth_failures_total", reason=reason) >= 1
        for p in (g.master, g.slave):
            assert CRED[1] not in p.log_text() and "wrongSecret01" not in p.log_text()


async def test_slave_with_a_credential_refuses_a_master_without_one(tmp_path):
    m = master_conf("ASYNC_MASTER")
    s = slave_conf(innerClientAuthenticationCredentials=credential_value(*CRED))
    with ha_group(m, s) as g:
        async with BrokerApi(g.master.addr) as api:
            assert (await api.create_topic(unique("NoCred"), 1)).code == ResponseCode.SUCCESS

        async def refused() -> str | None:
            return (await ha_status(g.slave.addr))["haClientRuntimeInfo"].get("lastReject")

        await wait_until(refused, 30, "the slave never gave up on the silent master")
        assert "sent no challenge" in (await refused() or "")
        assert (await ha_status(g.slave.addr))["commitLogMaxOffset"] == 0
        assert acks(await ha_status(g.master.addr)) == {}


# --------------------------------------------------------------------------- raw handshakes
async def read_until(conn: RawConn, want: int) -> list:
    """Read HA handshake frames from the master until ``want`` events (or it closes)."""
    rd = SlaveStreamReader(capacity=1 << 20)
    events: list = []
    while len(events) < want:
        try:
            chunk = await asyncio.wait_for(conn.reader.read(65536), 10)
        except ConnectionResetError:
            break
        if not chunk:
            break
        rd.feed(chunk)
        events += rd.events()
    return events


async def test_replayed_hello_is_refused(tmp_path):
    with ha_group(master(tmp_path), slave_conf(), start_slave=False) as g:
        info = await ha_status(g.master.addr, CRED)
        ha_addr = info["haServerAddr"]
        end = info["commitLogMaxOffset"]
        hello = SlaveHello(CLUSTER, GROUP, 2, commitlog_file_size=FILE_SIZE)

        # a genuine slave's handshake, captured
        c1 = await RawConn.open(ha_addr)
        (ch1,) = await read_until(c1, 1)
        assert isinstance(ch1, MasterChallenge) and len(ch1.nonce) == 16
        captured = encode_hello(hello, Credential(*CRED), ch1.nonce)
        await c1.write(captured)
        (ok,) = await read_until(c1, 1)
        assert isinstance(ok, MasterAccept)
        await c1.close()

        # replayed on a new connection: another nonce, so the proof does not hold
        c2 = await RawConn.open(ha_addr)
        (ch2,) = await read_until(c2, 1)
        assert isinstance(ch2, MasterChallenge) and ch2.nonce != ch1.nonce
        await c2.write(captured + encode_offset_report(end))
        (rej,) = await read_until(c2, 1)
        assert isinstance(rej, MasterReject) and "does not match" in rej.reason
        assert await c2.closed_by_peer(5)
        await c2.close()

        # a HELLO without proof, and one proven with another secret
        for data in (encode_hello(hello), None):
            c = await RawConn.open(ha_addr)
            (ch,) = await read_until(c, 1)
            if data is None:
                data = encode_hello(hello, Credential(CRED[0], "wrongSecret01"), ch.nonce)
            await c.write(data + encode_offset_report(end))
            (rej,) = await read_until(c, 1)
            assert isinstance(rej, MasterReject), rej
            await c.close()

        # reports without any handshake: closed, no answer beyond the challenge
        c = await RawConn.open(ha_addr)
        await c.write(encode_offset_report(end) * 3)
        events = await read_until(c, 2)
        assert len(events) == 1 and isinstance(events[0], MasterChallenge)
        await c.close()

        assert acks(await ha_status(g.master.addr, CRED)) == {}
        log = g.master.log_text()
        assert log.count(f"refused, accessKey={CRED[0]}") >= 2 and "refused, accessKey=(none)" in log
