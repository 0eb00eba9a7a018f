"""Issue 13, item 3: the master lease (fencing) and the failsafe, with real processes.

A controller NameServer (controllerMasterTimeout 2 s) and brokers of group broker-a in
controller mode heartbeating every 200 ms (ASYNC_MASTER: a send is answered once
written). A writer sends straight to one broker every 20 ms (no client retry) and keeps
every answer with its time.

* An isolated master: its link to the controller goes through a proxy the test blackholes
  (the controller is SIGSTOPped for the master alone; its slave still reaches the
  controller, so it refuses the failsafe). The master keeps answering SEND_OK until
  its lease lapses, then SERVICE_NOT_AVAILABLE with the lease's remark, strictly before
  controllerMasterTimeout after the last heartbeat the controller got from it. Healed
  in time it takes writes again (no election); left cut off, the controller elects the
  slave, after the old master's last SEND_OK.
* The failsafe: the controller NameServer is killed (no controller at all). A master
  whose in-sync slave confirms keeps SEND_OK; once that slave is frozen too (SIGSTOP)
  its lease lapses. A master alone in its in-sync set keeps SEND_OK (nobody can be
  elected in its place), unless the controller allows unclean elections.
* Controllers on etcd (the brokers name the standby first: it answers
  CONTROLLER_NOT_LEADER, the leader SUCCESS). With every etcd member down no
  controller leads: the master keeps SEND_OK by the failsafe (but for a moment: the
  leader capped its last lease at the end of its leadership, and only then can the
  slave tell that nobody leads), and is leased by a controller again once etcd is
  back.

Each test prints its timeline (monotonic seconds from the cut).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nameserver.controller.config import ControllerConfig
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import GetSyncStateDataRequestHeader, decode_group_statuses
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from tests.cluster.controller_util import MASTER_TIMEOUT_MS as ETCD_MASTER_TIMEOUT_MS
from tests.cluster.controller_util import controller_cluster, leading, wait_one_leader
from tests.cluster.failover_util import controller_conf, create_topic, wait_master, wait_slave
from tests.cluster.ha_util import GROUP
from tests.cluster.lease_util import FENCED, OK, Answer, TimedProxy, Writer
from tests.harness import BrokerProcess, NameServerProcess, broker_process, namesrv_process
from tests.integration.broker_util import wait_until

pytestmark = pytest.mark.timeout(120)

MASTER_TIMEOUT_MS = 2000
T = MASTER_TIMEOUT_MS / 1000
BEAT = {"brokerHeartbeatInterval": 200, "sendHeartbeatTimeoutMillis": 200}
TOPIC = "LeaseTopic"
# longest refusal while the failsafe takes over from a lease its controller capped at the
# end of its leadership (a heartbeat, a check and the slave's own heartbeat, ~10-30 ms)
MAX_HANDOVER = 0.5


class Cluster:
    def __init__(self, wd: Path) -> None:
        self.wd = wd
        self.procs: list[BrokerProcess | NameServerProcess] = []
        self.proxies: list[TimedProxy] = []

    async def namesrv(self, *extra: str) -> NameServerProcess:
        ns = namesrv_process(self.wd, "--controller", "--controller-master-timeout-ms", str(MASTER_TIMEOUT_MS), *extra)
        self.procs.append(ns)
        await asyncio.to_thread(ns.start)
        return ns

    async def broker(self, name: str, ns: str, broker_id: int, **extra: object) -> BrokerProcess:
        p = broker_process(self.wd / name, ns, GROUP, controller_conf("ASYNC_MASTER", broker_id, **BEAT, **extra))
        self.procs.append(p)
        await asyncio.to_thread(p.start)  # (the loop keeps proxying meanwhile)
        return p

    async def proxy(self, target: str) -> TimedProxy:
        p = await TimedProxy(target).start()
        self.proxies.append(p)
        return p


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="rmq-lease-", ignore_cleanup_errors=True) as d:
        c = Cluster(Path(d))
        try:
            yield c
        finally:
            for p in reversed(c.procs):
                p.signal(signal.SIGCONT)
                p.stop()
            for x in c.proxies:
                x.heal()
                await x.aclose()


async def wait_in_sync(ns: str, slave: str) -> None:
    """Until the controller counts the slave in the group's in-sync set, and a few
    heartbeats more (the master's answers name it)."""

    async def in_sync() -> bool:
        async with RemotingClient() as c:
            h = GetSyncStateDataRequestHeader(GROUP)
            r = await c.invoke(
                ns, RemotingCommand(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, ext_fields=h.to_ext_fields()), 3
            )
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return any(m.addr == slave and m.in_sync for g in decode_group_statuses(r.body) for m in g.members)

    await wait_until(in_sync, 30, f"{slave} never got in sync", 0.1)
    await asyncio.sleep(0.6)


async def writer_on(master: BrokerProcess) -> Writer:
    await create_topic(master.addr, TOPIC, 4)
    w = Writer(master.addr, TOPIC).start()
    await w.wait_for(OK, 0.0, 10)
    return w


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def timeline(t0: float, **events: float) -> str:
    return ", ".join(f"{k} {v - t0:+.3f}s" for k, v in sorted(events.items(), key=lambda kv: kv[1]))


@dataclass
class Lapse:
    cut: float
    last_heartbeat: float  # the last bytes the controller got from the master
    refused: Answer  # the first SERVICE_NOT_AVAILABLE
    last_ok: Answer  # the last SEND_OK before it

    def show(self, what: str, **more: float) -> None:
        t = self.last_heartbeat
        print(
            f"\n{what}: "
            + timeline(
                t,
                last_heartbeat=t,
                cut=self.cut,
                last_send_ok=self.last_ok.got,
                first_refusal=self.refused.got,
                controller_may_elect=t + T,
                **more,
            )
        )


async def blackhole_until_fenced(proxy: TimedProxy, w: Writer) -> Lapse:
    """Blackhole the master's link to the controller; the master must keep acking after
    the cut, then refuse strictly before the controller may elect a successor
    (controllerMasterTimeout after the last heartbeat it got)."""
    proxy.blackhole()
    cut = time.monotonic()
    refused = await w.wait_for(FENCED, cut, T + 3)
    last_hb = proxy.last_up  # (still blackholed)
    last_ok = w.last(OK, refused.sent)
    assert last_ok is not None and last_ok.sent > cut, "stopped acking at the cut, not when the lease ran out"
    assert refused.got < last_hb + T, f"refused {refused.got - last_hb:.3f}s after the last heartbeat"
    return Lapse(cut, last_hb, refused, last_ok)


async def test_isolated_master_stops_acking_before_a_successor_may_be_elected() -> None:
    async with cluster() as c:
        ns = await c.namesrv()
        proxy = await c.proxy(ns.addr)
        # each broker also has a dead controller address: the master a closed port, the
        # slave one that answers nothing (a blackholed proxy), listed first
        dead = await c.proxy(ns.addr)
        dead.blackhole()
        a = await c.broker("a", ns.addr, 0, controllerAddr=f"{proxy.addr};{closed_port()}")
        b = await c.broker("b", ns.addr, 1, controllerAddr=f"{dead.addr};{ns.addr}")
        await wait_master(a.addr)
        await wait_slave(b.addr)
        await wait_in_sync(ns.addr, b.addr)
        w = await writer_on(a)
        try:
            # --- 1: blackholed, then healed as soon as the master refuses
            lapse = await blackhole_until_fenced(proxy, w)
            proxy.heal()
            healed = time.monotonic()
            back = await w.wait_for(OK, healed, 3)
            lapse.show("isolated master, healed", healed=healed, send_ok_again=back.got)
            remark = lapse.refused.remark
            print(f"  remark: {remark}")
            assert "master lease of broker-a expired" in remark
            assert "not accepting writes so clients retry elsewhere" in remark
            # the slave refused the failsafe because it reaches the controller
            assert f"controller {ns.addr} answers this slave" in a.log_text()
            assert "sends are answered SERVICE_NOT_AVAILABLE" in a.log_text()
            assert "held again (controller " in a.log_text()
            await wait_master(a.addr, 2)  # nobody was elected
            await asyncio.sleep(0.5)
            assert w.codes_between(back.sent, time.monotonic()) == {OK}

            # --- 2: cut off for good: the controller elects the slave after the old
            # master's last SEND_OK
            lapse = await blackhole_until_fenced(proxy, w)
            await wait_master(b.addr, 3 * T)
            elected = time.monotonic()
            lapse.show("isolated master, left cut off", slave_seen_master=elected)
            refused = lapse.refused
            assert w.codes_between(refused.got, elected) == {FENCED}, "the old master acked after its lease"
            proxy.heal()
            await wait_slave(a.addr, 10)
        finally:
            await w.stop()


async def test_failsafe_keeps_the_master_while_no_controller_answers_and_its_slave_confirms() -> None:
    async with cluster() as c:
        ns = await c.namesrv()
        a = await c.broker("a", ns.addr, 0)
        b = await c.broker("b", ns.addr, 1)
        await wait_master(a.addr)
        await wait_slave(b.addr)
        await wait_in_sync(ns.addr, b.addr)
        w = await writer_on(a)
        try:
            ns.kill()  # no controller at all
            killed = time.monotonic()
            await asyncio.sleep(2 * T)  # longer than any lease (< controllerMasterTimeout)
            held = time.monotonic()
            assert w.codes_between(killed, held) == {OK}, "the master stopped although its slave confirmed"
            assert "every other member (" in a.log_text() and "keeps taking writes" in a.log_text()
            assert f"confirmed to master {a.addr}" in b.log_text()

            b.signal(signal.SIGSTOP)  # the slave cannot confirm any more
            stopped = time.monotonic()
            refused = await w.wait_for(FENCED, stopped, T + 3)
            last_ok = w.last(OK, refused.sent)
            assert last_ok is not None
            print(
                "\nfailsafe: "
                + timeline(
                    killed,
                    controller_killed=killed,
                    still_send_ok=held,
                    slave_stopped=stopped,
                    last_send_ok=last_ok.got,
                    first_refusal=refused.got,
                )
            )
            print(f"  remark: {refused.remark}")
            for who, p in (("master", a), ("slave", b)):
                for line in p.log_text().splitlines():
                    if "failsafe:" in line:
                        print(f"  {who}: {line.split(' rmq.broker.role ', 1)[-1]}")
            assert "expired" in refused.remark and "failsafe" in refused.remark
            assert f"{b.addr}: no answer" in a.log_text() and "the lease lapses" in a.log_text()
        finally:
            await w.stop()
            b.signal(signal.SIGCONT)


async def test_failsafe_while_etcd_is_down_then_leased_again() -> None:
    with controller_cluster("ASYNC_MASTER", etcd_members=1, brokers=0) as cc:
        leader = await wait_one_leader(cc.ns_addrs)
        standby = next(a for a in cc.ns_addrs if a != leader)
        lease = ControllerConfig(controllerMasterTimeout=ETCD_MASTER_TIMEOUT_MS).master_lease_ms / 1000
        async with cluster() as c:
            a = await c.broker("a", leader, 0, controllerAddr=f"{standby};{leader}")
            b = await c.broker("b", leader, 1, controllerAddr=f"{standby};{leader}")
            await wait_master(a.addr)
            await wait_slave(b.addr)
            await wait_in_sync(leader, b.addr)
            w = await writer_on(a)
            try:
                cc.etcd.stop_all()
                stopped = time.monotonic()
                await wait_until(lambda: no_leader(cc.ns_addrs), 10, "a controller still leads without etcd", 0.1)
                nobody = time.monotonic()
                await asyncio.sleep(1.5 * lease)  # (the failsafe extended the lease at least twice)
                held = time.monotonic()
                # the one moment writes are refused: the last leader capped its last lease at
                # the end of its leadership; the master asks its slave as that lease ends
                gaps = w.outages(stopped, held)
                assert len(gaps) <= 1, f"the master stopped and resumed {len(gaps)} times"
                for first, last in gaps:
                    assert last.got - first.sent < MAX_HANDOVER, "the failsafe took over too late"
                    assert "expired" in first.remark, first.remark
                assert "keeps taking writes" in a.log_text()
                cc.etcd.start_all()
                restarted = time.monotonic()
                await wait_until(lambda: "failsafe over" in a.log_text(), 20, "no controller answered again", 0.1)
                back = time.monotonic()
                await asyncio.sleep(lease)  # leased by the controller again, past a whole lease
                marks = {
                    "etcd_stopped": stopped,
                    "no_controller_leads": nobody,
                    "still_send_ok": held,
                    "etcd_started": restarted,
                    "controller_answers_master": back,
                }
                for first, last in gaps:
                    marks |= {"refused_from": first.sent, "refused_until": last.got}
                print("\netcd down: " + timeline(stopped, **marks))
                assert w.outages(held, time.monotonic()) == []
                await wait_master(a.addr, 1)
            finally:
                await w.stop()


async def no_leader(addrs: list[str]) -> bool:
    return not await leading(addrs)


@pytest.mark.parametrize("unclean", [False, True], ids=["clean", "unclean"])
async def test_failsafe_of_a_master_alone_in_its_in_sync_set(unclean: bool) -> None:
    async with cluster() as c:
        extra: list[str] = []
        if unclean:
            conf = c.wd / "namesrv.properties"
            conf.write_text("enableElectUncleanMaster=true\n")
            extra = ["-c", str(conf)]
        ns = await c.namesrv(*extra)
        a = await c.broker("a", ns.addr, 0)
        await wait_master(a.addr)
        w = await writer_on(a)
        await asyncio.sleep(0.5)
        try:
            ns.kill()
            killed = time.monotonic()
            if unclean:
                refused = await w.wait_for(FENCED, killed, T + 3)
                print(f"\nalone, unclean elections allowed: refused {refused.got - killed:.3f}s after the kill")
                assert "expired" in refused.remark
                assert "enableElectUncleanMaster" in a.log_text()
            else:
                await asyncio.sleep(2 * T)
                assert w.codes_between(killed, time.monotonic()) == {OK}
                assert "this master is the whole set" in a.log_text()
        finally:
            await w.stop()
