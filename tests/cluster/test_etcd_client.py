"""nameserver.etcd.EtcdClient against real etcd processes (tests/cluster/etcd_util.py).

* compare-and-swap: a txn whose compare holds runs its success ops; one that fails returns the
  current value and revisions from its failure branch's get, in the same round trip;
* get_prefix takes exactly the keys under the prefix;
* endpoints: the first one dead (killed, or frozen with SIGSTOP) -> calls go to the next and the
  client says which one it uses; all dead -> EtcdUnavailable naming each, within
  endpoints x timeout;
* TLS: https with the cluster's CA (a bare host:port means https once a CA is given), a client
  certificate where etcd requires one, and a refusal without it;
* auth: the right password works, a wrong one is EtcdError naming the authentication (and not
  the password); a token etcd has forgotten makes the client authenticate again, once;
* leases: keepalive renews, a lease left alone expires with its key, revoke takes the key;
* status_all: one leader among three, an error for a killed member.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from nameserver.etcd import Compare, EtcdError, EtcdUnavailable, Op
from tests.cluster.etcd_util import EtcdCluster, etcd_cluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def one(tmp_path) -> EtcdCluster:
    with etcd_cluster(tmp_path, 1) as c:
        yield c


@pytest.fixture
def three(tmp_path) -> EtcdCluster:
    with etcd_cluster(tmp_path, 3) as c:
        yield c


async def test_cas_txn_success_and_failure_returns_current(one):
    async with one.client() as etcd:
        rev = await etcd.put("/rmq/state", b"v1")
        kv = await etcd.get("/rmq/state")
        assert kv is not None and kv.value == b"v1" and kv.mod_revision == rev and kv.version == 1

        ok = await etcd.txn(
            [Compare.mod_revision("/rmq/state") == rev], [Op.put("/rmq/state", b"v2")], [Op.get("/rmq/state")]
        )
        assert ok.succeeded and ok.revision == rev + 1 and ok.responses[0].kind == "put" and ok.kv is None

        # the same compare again: stale now; the failure branch shows what is there
        stale = await etcd.txn(
            [Compare.mod_revision("/rmq/state") == rev], [Op.put("/rmq/state", b"v3")], [Op.get("/rmq/state")]
        )
        assert not stale.succeeded and not stale.retried
        assert stale.kv is not None
        assert (stale.kv.value, stale.kv.mod_revision, stale.kv.create_revision) == (b"v2", rev + 1, rev)
        assert (await etcd.get("/rmq/state")).value == b"v2"

        # create-if-absent, value compares, delete inside a txn
        created = await etcd.txn([Compare.create_revision("/rmq/new") == 0], [Op.put("/rmq/new", b"x")])
        again = await etcd.txn([Compare.create_revision("/rmq/new") == 0], [Op.put("/rmq/new", b"y")])
        assert created.succeeded and not again.succeeded
        assert (await etcd.txn([Compare.value("/rmq/new") != b"x"], [Op.delete("/rmq/new")])).succeeded is False
        gone = await etcd.txn(
            [Compare.value("/rmq/new") == b"x", Compare.version("/rmq/new") > 0], [Op.delete("/rmq/new")]
        )
        assert gone.succeeded and gone.responses[0].deleted == 1
        assert await etcd.get("/rmq/new") is None
        assert await etcd.delete("/rmq/state") == 1 and await etcd.delete("/rmq/state") == 0


async def test_get_prefix(one):
    async with one.client() as etcd:
        for k in ("/rmq/groups/b", "/rmq/groups/a", "/rmq/groups0", "/rmq/group", "/rmq/h"):
            await etcd.put(k, k.encode())
        await etcd.put(b"\x01\xff\xff", b"edge")
        await etcd.put(b"\x02", b"after")
        got = await etcd.get_prefix("/rmq/groups/")
        assert [kv.key for kv in got] == [b"/rmq/groups/a", b"/rmq/groups/b"]
        assert [kv.value for kv in got] == [b"/rmq/groups/a", b"/rmq/groups/b"]
        assert [kv.key for kv in await etcd.get_prefix(b"\x01\xff")] == [b"\x01\xff\xff"]
        assert await etcd.get_prefix("/nothing/") == []


async def test_first_endpoint_dead_calls_use_the_next(three):
    three.kill(0)
    # when m0 led, m1 waits for the next leader rather than answer: the client would move on
    three.wait_healthy([1, 2])
    async with three.client() as etcd:
        t0 = time.monotonic()
        await etcd.put("k", b"1")
        assert etcd.current_endpoint == three.endpoints[1]
        r = await etcd.txn([Compare.value("k") == b"1"], [Op.put("k", b"2")])
        lease = await etcd.lease_grant(2)
        assert r.succeeded and await etcd.lease_keepalive(lease.id) == 2
        assert etcd.current_endpoint == three.endpoints[1]
        print(f"first endpoint killed: 4 calls in {time.monotonic() - t0:.3f} s via {etcd.current_endpoint}")

    # frozen rather than dead: the first call waits out one timeout, the next ones go straight on.
    # The frozen one is a follower (a frozen leader would leave the others without one for a while).
    three.restart(0)
    three.wait_healthy()
    frozen = next(i for i in range(3) if i != three.leader_index())
    order = [three.endpoints[frozen]] + [e for i, e in enumerate(three.endpoints) if i != frozen]
    three.pause(frozen)
    async with three.client(endpoints=order, timeout=0.5) as etcd:
        t0 = time.monotonic()
        assert (await etcd.get("k")).value == b"2"
        first = time.monotonic() - t0
        t0 = time.monotonic()
        assert (await etcd.get("k")).value == b"2"
        second = time.monotonic() - t0
        assert etcd.current_endpoint == order[1]
        print(f"first endpoint frozen: first call {first:.3f} s, second {second:.3f} s")
        assert 0.5 <= first < 1.5 and second < 0.4
    three.resume(frozen)


async def test_all_endpoints_dead_raises_unavailable_in_bounded_time(three):
    async with three.client(timeout=0.5) as etcd:
        await etcd.put("k", b"1")
        for i in range(3):
            three.pause(i)
        t0 = time.monotonic()
        with pytest.raises(EtcdUnavailable) as frozen:
            await etcd.get("k")
        took = time.monotonic() - t0
        print(f"3 frozen endpoints: EtcdUnavailable after {took:.3f} s: {frozen.value}")
        assert took < 3 * 0.5 + 0.5
        assert set(frozen.value.errors) == set(three.endpoints)
        assert all(ep in str(frozen.value) for ep in three.endpoints)
        assert "no answer within 0.5 s" in str(frozen.value)

        three.stop_all()
        t0 = time.monotonic()
        with pytest.raises(EtcdUnavailable) as dead:
            await etcd.txn([Compare.version("k") == 1], [Op.delete("k")])
        print(f"3 dead endpoints: EtcdUnavailable after {time.monotonic() - t0:.3f} s: {dead.value}")
        assert time.monotonic() - t0 < 1.0
        assert set(dead.value.errors) == set(three.endpoints)
        assert "Connection refused" in str(dead.value)


async def test_tls_with_ca(tmp_path):
    with etcd_cluster(tmp_path, 1, tls=True) as c:
        async with c.client() as etcd:  # host:port + CA file -> https
            await etcd.put("k", b"tls")
            assert (await etcd.get("k")).value == b"tls"
        async with c.client(endpoints=[f"https://{c.endpoints[0]}"]) as etcd:
            assert (await etcd.get("k")).value == b"tls"
        async with c.client(ca_file=None, endpoints=[f"https://{c.endpoints[0]}"]) as etcd:
            with pytest.raises(EtcdUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
                await etcd.get("k")


async def test_tls_client_certificate(tmp_path):
    with etcd_cluster(tmp_path, 1, client_cert_auth=True) as c:
        async with c.client() as etcd:
            await etcd.put("k", b"mtls")
            assert (await etcd.get("k")).value == b"mtls"
            assert (await etcd.status_all())[0].reachable
        async with c.client(cert_file=None, key_file=None) as etcd:
            with pytest.raises(EtcdUnavailable) as e:
                await etcd.get("k")
            print(f"no client certificate: {e.value}")


async def test_user_auth(caplog, tmp_path):
    caplog.set_level(logging.DEBUG, logger="rmq.nameserver")
    password = "Pa55-w0rd-never-logged"
    with etcd_cluster(tmp_path, 1, auth=("root", password)) as c:
        async with c.client() as etcd:
            await etcd.put("k", b"auth")
            assert (await etcd.get("k")).value == b"auth"
            token = etcd._token
            assert token

            # a restarted member knows the token again (it replays the authentication from its log)
            await asyncio.to_thread(c.restart, 0)
            assert (await etcd.get("k")).value == b"auth" and etcd._token == token

            # a token etcd no longer knows (expired, auth re-enabled): authenticate again, once
            c.invalidate_tokens()
            assert (await etcd.get("k")).value == b"auth"
            renewed = etcd._token
            assert renewed and renewed != token
            assert caplog.text.count("authenticating again") == 1

        async with c.client(password="wrong") as etcd:
            with pytest.raises(EtcdError, match="authentication of user 'root' failed") as bad:
                await etcd.get("k")
            assert "wrong" not in str(bad.value)

        async with c.client(user=None, password=None) as etcd:
            with pytest.raises(EtcdError, match="user name is empty"):
                await etcd.get("k")

        for secret in (password, token, renewed):
            assert secret not in caplog.text


async def test_lease_keepalive_and_expiry(one):
    async with one.client() as etcd:
        lease = await etcd.lease_grant(1)  # etcd's minimum with --election-timeout 500
        assert lease.ttl == 1
        await etcd.put("/rmq/leader", b"me", lease=lease.id)
        assert (await etcd.get("/rmq/leader")).lease == lease.id
        for _ in range(6):  # 1.5 s of keepalives every 0.25 s: the key stays
            await asyncio.sleep(0.25)
            assert await etcd.lease_keepalive(lease.id) == 1
        assert await etcd.get("/rmq/leader") is not None

        t0 = time.monotonic()
        while await etcd.get("/rmq/leader") is not None:
            assert time.monotonic() - t0 < 3.0, "the lease did not expire"
            await asyncio.sleep(0.05)
        print(f"lease of 1 s left alone: key gone after {time.monotonic() - t0:.3f} s")
        assert time.monotonic() - t0 >= 0.9
        assert await etcd.lease_keepalive(lease.id) == 0
        assert await etcd.lease_revoke(lease.id) is False

        other = await etcd.lease_grant(5)
        await etcd.put("/rmq/leader", b"you", lease=other.id)
        assert await etcd.lease_revoke(other.id) is True
        assert await etcd.get("/rmq/leader") is None
        with pytest.raises(EtcdError, match="requested lease not found") as e:
            await etcd.put("/rmq/leader", b"x", lease=other.id)
        assert e.value.code == 5


async def test_status_all_one_leader_and_error_for_killed_member(three):
    async with three.client() as etcd:
        st = await etcd.status_all()
        assert [s.endpoint for s in st] == three.endpoints
        assert all(s.reachable and s.version == "3.4.23" and s.db_size > 0 for s in st)
        assert sum(s.is_leader for s in st) == 1
        assert len({s.leader_id for s in st}) == 1

        victim = 0 if not st[0].is_leader else 1
        three.kill(victim)
        st = await etcd.status_all()
        assert not st[victim].reachable and "Connection refused" in st[victim].error
        assert sum(s.is_leader for s in st if s.reachable) == 1
        print("\n".join(f"{s.endpoint} leader={s.is_leader} {s.error}" for s in st))
