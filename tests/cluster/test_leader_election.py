"""nameserver.leader_election.LeaderElection on a real 3-member etcd cluster; each contender has
its own EtcdClient, as separate controller processes would.

* two contenders: exactly one leads, the other sees its value; the leader dies without revoking
  its lease (stop(revoke=False)) -> the other takes over once etcd expires the lease (measured,
  printed); an orderly stop() hands over at the next poll;
* the leader loses etcd (every member SIGSTOPped): on_lost comes before etcd could expire its
  lease (renewed_at + granted TTL, counted from the keepalive's send time) and before the
  standby is elected once etcd is back;
* the leader is cut off from etcd alone (its client goes through relays that go silent): it
  steps down before the standby, which still reaches etcd, is elected; a txn fenced with the
  deposed leader's fence() fails, the new leader's succeeds;
* etcd's leader, the first endpoint of both clients, is killed: the leadership survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from nameserver.etcd import EtcdClient, Op
from nameserver.leader_election import LeaderElection, NotLeaderError
from tests.cluster.etcd_util import EtcdCluster, TcpProxy, etcd_cluster
from tests.integration.broker_util import wait_until

pytestmark = pytest.mark.timeout(60)

KEY = "/rmq/controller/leader"


@pytest.fixture
def three(tmp_path) -> EtcdCluster:
    with etcd_cluster(tmp_path, 3) as c:
        yield c


class Events:
    """(who, "elected" | "lost", time.monotonic()) as the callbacks report them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, float]] = []

    def callbacks(self, who: str) -> dict[str, object]:
        return {
            "on_elected": lambda: self.seen.append((who, "elected", time.monotonic())),
            "on_lost": lambda: self.seen.append((who, "lost", time.monotonic())),
        }

    def at(self, who: str, what: str) -> list[float]:
        return [t for w, e, t in self.seen if (w, e) == (who, what)]


@contextlib.asynccontextmanager
async def contender(
    events: Events, who: str, client: EtcdClient, ttl_s: float = 2.0, start: bool = True
) -> AsyncIterator[LeaderElection]:
    e = LeaderElection(client, KEY, who.encode(), ttl_s=ttl_s, **events.callbacks(who))
    if start:
        e.start()
    try:
        yield e
    finally:
        await e.stop()
        await client.aclose()


async def test_one_leads_and_the_other_takes_over(three):
    ev = Events()
    async with contender(ev, "a", three.client()) as a, contender(ev, "b", three.client()) as b:
        await wait_until(lambda: a.is_leader or b.is_leader, 5, "nobody elected")
        leader, standby = (a, b) if a.is_leader else (b, a)
        await asyncio.sleep(1.0)  # a few polls and renewals
        assert leader.is_leader and not standby.is_leader
        assert standby.leader_value() == leader.value == leader.leader_value()
        assert leader.leader_revision and standby.leader_revision is None
        assert [e for _, e, _ in ev.seen] == ["elected"]

        # the leader dies: its lease is left to expire
        renewed_at, ttl = leader.renewed_at, leader.granted_ttl
        assert renewed_at is not None and ttl == 2
        await leader.stop(revoke=False)
        crashed = time.monotonic()
        await wait_until(lambda: standby.is_leader, ttl + ttl / 3 + 1.5, "the standby did not take over")
        took = ev.at(standby.value.decode(), "elected")[0] - crashed
        print(f"takeover after a crash (ttl {ttl} s): {took:.3f} s")
        # not before etcd could expire the old lease, and within ttl + a poll + a round trip
        assert ev.at(standby.value.decode(), "elected")[0] >= renewed_at + ttl
        assert took <= ttl + ttl / 3 + 0.5

        # an orderly stop revokes the lease: the next poll takes over
        async with contender(ev, "c", three.client()) as c:
            await wait_until(lambda: c.leader_value() == standby.value, 3, "c did not see the leader")
            await standby.stop()
            stopped = time.monotonic()
            await wait_until(lambda: c.is_leader, 3, "c did not take over")
            print(f"takeover after stop(): {time.monotonic() - stopped:.3f} s")
            assert time.monotonic() - stopped < 2 / 3 + 0.5


async def test_leader_that_loses_etcd_steps_down_before_its_lease_can_expire(three):
    ev = Events()
    async with contender(ev, "a", three.client()) as a:
        await wait_until(lambda: a.is_leader, 5, "a not elected")
        async with contender(ev, "b", three.client()) as b:
            await wait_until(lambda: b.leader_value() == b"a", 3, "b did not see a")
            for i in range(3):
                three.pause(i)
            paused = time.monotonic()
            await wait_until(lambda: ev.at("a", "lost"), 4, "a did not step down")
            lost = ev.at("a", "lost")[0]
            assert a.renewed_at is not None and a.deadline is not None
            server_expiry = a.renewed_at + a.granted_ttl  # etcd counts from a later receive time
            print(
                f"etcd frozen: a stepped down {lost - paused:.3f} s later, "
                f"{server_expiry - lost:.3f} s before etcd could expire its lease"
            )
            assert not a.is_leader
            assert lost < server_expiry
            assert a.deadline - 0.05 <= lost <= a.deadline + 0.05  # held on as long as it could
            for i in range(3):
                three.resume(i)
            await wait_until(lambda: a.is_leader or b.is_leader, 8, "nobody elected after etcd came back")
            first_elected_after = min(t for _, e, t in ev.seen if e == "elected" and t > paused)
            assert lost < first_elected_after


async def test_partitioned_leader_is_fenced(three):
    ev = Events()
    async with contextlib.AsyncExitStack() as stack:
        relays = [await stack.enter_async_context(TcpProxy(ep)) for ep in three.endpoints]
        a = await stack.enter_async_context(contender(ev, "a", three.client(endpoints=[r.addr for r in relays])))
        await wait_until(lambda: a.is_leader, 5, "a not elected")
        b = await stack.enter_async_context(contender(ev, "b", three.client()))
        await wait_until(lambda: b.leader_value() == b"a", 3, "b did not see a")
        fence_a = a.fence()
        async with three.client() as etcd:
            assert (await etcd.txn([fence_a], [Op.put("/rmq/decision", b"by a")])).succeeded

            for r in relays:
                r.blackhole()
            cut = time.monotonic()
            await wait_until(lambda: b.is_leader, 2 + 2 / 3 + 2, "b did not take over")
            lost, elected = ev.at("a", "lost")[0], ev.at("b", "elected")[0]
            print(f"a cut off: a stepped down after {lost - cut:.3f} s, b elected after {elected - cut:.3f} s")
            assert lost < elected
            with pytest.raises(NotLeaderError):
                a.fence()

            stale = await etcd.txn([fence_a], [Op.put("/rmq/decision", b"by a, deposed")], [Op.get("/rmq/decision")])
            assert not stale.succeeded and stale.kv is not None and stale.kv.value == b"by a"
            fresh = await etcd.txn([b.fence()], [Op.put("/rmq/decision", b"by b")])
            assert fresh.succeeded
            assert b.fence() != fence_a

            for r in relays:
                r.heal()
            await wait_until(lambda: a.leader_value() == b"b", 5, "a did not see b lead once reconnected")
            assert not a.is_leader and b.is_leader


async def test_killing_etcds_leader_first_endpoint_keeps_the_leadership(three):
    three.move_leader(0)  # the hard case: the member that goes is etcd's leader
    ev = Events()
    async with contender(ev, "a", three.client(), ttl_s=3) as a, contender(ev, "b", three.client(), ttl_s=3) as b:
        await wait_until(lambda: a.is_leader or b.is_leader, 5, "nobody elected")
        leader = a if a.is_leader else b
        three.kill(0)
        killed = time.monotonic()
        while time.monotonic() - killed < 4.0:  # longer than the TTL
            assert leader.is_leader and not (a.is_leader and b.is_leader)
            await asyncio.sleep(0.05)
        assert [e for _, e, _ in ev.seen] == ["elected"]
        async with three.client() as etcd:
            assert (await etcd.txn([leader.fence()], [Op.put("/rmq/decision", b"still")])).succeeded
        print(f"etcd leader killed; controller lease renewed {time.monotonic() - leader.renewed_at:.3f} s ago")
