"""Several controllers on etcd (issue 13, items 1, 2 and 6 b, c, e): one leads, the
state is in etcd, a standby takes over, etcd members may die, restarts in any order
converge. Real etcd, NameServer and broker processes; each test prints its timings."""

from __future__ import annotations

import asyncio
import time

from nameserver.controller.state import GroupRecord
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import decode_group_statuses
from rmq.remoting.errors import RemotingError
from tests.cluster.controller_util import (
    MASTER_TIMEOUT_MS,
    PREFIX,
    Clock,
    controller_cluster,
    controller_namesrv,
    controller_view,
    free_port,
    leading,
    wait_one_leader,
)
from tests.cluster.etcd_util import EtcdCluster
from tests.cluster.failover_util import controller_conf, restart, role_of, wait_master, wait_slave
from tests.cluster.ha_util import GROUP, ha_status
from tests.harness import broker_process, namesrv_process
from tests.integration.admin_util import ok
from tests.integration.broker_util import BrokerApi, wait_until

TOPIC = "CtlTopic"


async def records(etcd: EtcdCluster) -> dict[str, GroupRecord]:
    async with etcd.client() as c:
        kvs = await c.get_prefix(f"{PREFIX}/controller/groups/")
    out = {}
    for kv in kvs:
        name = kv.key.decode().rsplit("/", 1)[1]
        out[name] = GroupRecord.from_json(name, kv.value)
    return out


async def wait_recorded_in_sync(etcd: EtcdCluster, members: list[str], timeout: float = 20) -> None:
    async def there() -> bool:
        r = (await records(etcd)).get(GROUP)
        return r is not None and r.sync_state == members

    await wait_until(there, timeout, f"the recorded in-sync set never became {members}", 0.05)


async def send_ok(addr: str) -> bool:
    try:
        async with BrokerApi(addr) as api:
            r = await api.send(TOPIC, b"x" * 64, timeout=1.0)
    except (TimeoutError, RemotingError, OSError):
        return False
    return r.code == ResponseCode.SUCCESS


async def test_one_controller_leads_state_in_etcd_standby_forwards() -> None:
    with controller_cluster("ASYNC_MASTER") as cc:
        leader = await wait_one_leader(cc.ns_addrs)
        standby = next(a for a in cc.ns_addrs if a != leader)
        b0, b1 = cc.brokers
        await wait_master(b0.addr)
        await wait_slave(b1.addr)
        await wait_until(lambda: send_ok(b0.addr), 20, "no SEND_OK from the first master")

        await wait_recorded_in_sync(cc.etcd, [b0.addr, b1.addr])
        rec = (await records(cc.etcd))[GROUP]
        assert (rec.master_addr, rec.epoch, rec.ids[b1.addr]) == (b0.addr, 1, 1)
        # the standby answers with the leader's view (forwarded)
        async with BrokerApi(standby) as api:
            r = await api.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {})
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        [g] = decode_group_statuses(r.body)
        assert g.master_addr == b0.addr and {m.addr for m in g.members} == {b0.addr, b1.addr}
        v = await controller_view(standby)
        assert v is not None and v["leader"] == leader and not v["isLeader"]
        eps = v["leadership"]["endpoints"]
        assert len(eps) == 3 and all(e["reachable"] for e in eps) and sum(e["is_leader"] for e in eps) == 1
        # the operator's view: who leads, each controller's view, etcd's health, the group
        run = await asyncio.to_thread(ok, "controllerStatus", "-n", ";".join(cc.ns_addrs))
        rows = {ln.split()[0]: ln.split() for ln in run.out.splitlines() if ln.strip()}
        assert rows[leader][1:4] == [leader, "LEADER", leader], run.out
        assert rows[standby][1:4] == [standby, "STANDBY", leader], run.out
        for ep in cc.etcd.endpoints:
            assert any(ep in k for k in rows) and "true" in next(r for k, r in rows.items() if ep in k), run.out
        assert f"master {b0.addr} (alive)" in run.out
        doc = (await asyncio.to_thread(ok, "controllerStatus", "-n", ";".join(cc.ns_addrs), "--json")).json()
        assert sorted(c["controller"] for c in doc["controllers"]) == sorted(cc.ns_addrs)
        assert [c["isLeader"] for c in doc["controllers"]].count(True) == 1


async def test_leading_controller_etcd_member_and_master_killed_at_once() -> None:
    """6 b) and c): with controllerMasterTimeout=3000, the leading controller's
    NameServer, the first etcd endpoint and the master die at the same moment; the
    other controller completes the failover and the new master answers within 10 s."""
    with controller_cluster("ASYNC_MASTER") as cc:
        leader = await wait_one_leader(cc.ns_addrs)
        b0, b1 = cc.brokers
        await wait_master(b0.addr)
        await wait_slave(b1.addr)
        await wait_until(lambda: send_ok(b0.addr), 20, "no SEND_OK from the first master")

        await wait_recorded_in_sync(cc.etcd, [b0.addr, b1.addr])
        clock = Clock()
        ns = next(n for n in cc.namesrvs if n.addr == leader)
        ns.kill()
        cc.etcd.kill(0)
        b0.kill()
        clock.mark(f"killed controller {leader}, etcd member 0 ({cc.etcd.endpoints[0]}) and master {b0.addr}")
        other = next(a for a in cc.ns_addrs if a != leader)
        await wait_until(lambda: leading([other]), 15, f"{other} never took over", 0.05)
        clock.mark(f"controller {other} leads")
        await wait_until(lambda: send_ok(b1.addr), 15, f"{b1.addr} never answered SEND_OK", 0.05)
        took = clock.mark(f"new master {b1.addr} answers SEND_OK")
        rec = (await records(cc.etcd))[GROUP]
        assert (rec.master_addr, rec.epoch) == (b1.addr, 2)
        assert took <= 10.0, f"new master answered after {took:.1f} s (goal: 10 s)"
        print(
            f"failover with the leading controller killed: {took:.2f} s (controllerMasterTimeout {MASTER_TIMEOUT_MS} ms)"
        )

        # item 4: the old master returns, catches up and re-enters the recorded in-sync set
        # within two heartbeats of having caught up, so it can be elected again
        restart(b0)
        await wait_slave(b0.addr)
        caught_up = 0.0

        async def has_caught_up() -> bool:
            nonlocal caught_up
            st = await ha_status(b1.addr)
            conns, top = st["haConnectionInfo"], st["masterCommitLogMaxOffset"]
            if not conns or min(c["slaveAckOffset"] for c in conns) < top:
                return False
            caught_up = clock.mark(f"{b0.addr} caught up with {b1.addr} (ack {top})")
            return True

        await wait_until(has_caught_up, 30, f"{b0.addr} never caught up", 0.05)

        await wait_recorded_in_sync(cc.etcd, [b1.addr, b0.addr], 10)
        back = clock.mark(f"{b0.addr} in the recorded in-sync set")
        assert back - caught_up <= 2.3, f"re-entered {back - caught_up:.2f} s after catching up (two heartbeats)"


async def test_all_etcd_down_no_election_no_flapping_then_resume() -> None:
    """6 c): all etcd members down: nobody is elected, brokers keep their roles; when
    etcd returns the failover happens."""
    with controller_cluster("ASYNC_MASTER") as cc:
        await wait_one_leader(cc.ns_addrs)
        b0, b1 = cc.brokers
        await wait_master(b0.addr)
        await wait_slave(b1.addr)

        await wait_recorded_in_sync(cc.etcd, [b0.addr, b1.addr])
        clock = Clock()
        cc.etcd.stop_all()
        clock.mark("all etcd members killed")
        await wait_until(lambda: _no_leader(cc.ns_addrs), 10, "a controller still leads without etcd", 0.1)
        clock.mark("no controller leads")
        before = [await role_of(b0.addr), await role_of(b1.addr)]
        for _ in range(int(2 * MASTER_TIMEOUT_MS / 500)):
            await asyncio.sleep(0.5)
            assert [await role_of(b0.addr), await role_of(b1.addr)] == before, "roles changed without etcd"
        clock.mark(f"roles unchanged for {2 * MASTER_TIMEOUT_MS} ms: {before}")
        b0.kill()
        clock.mark(f"master {b0.addr} killed while etcd is down")
        await asyncio.sleep(2 * MASTER_TIMEOUT_MS / 1000)
        assert (await role_of(b1.addr))[0] == "SLAVE", "elected without etcd"
        clock.mark("no election without etcd")
        cc.etcd.start_all()
        clock.mark("etcd back")
        await wait_master(b1.addr, timeout=20)
        clock.mark(f"{b1.addr} is master")
        rec = (await records(cc.etcd))[GROUP]
        assert (rec.master_addr, rec.epoch) == (b1.addr, 2)


async def _no_leader(addrs: list[str]) -> bool:
    return not await leading(addrs)


async def test_restarts_in_any_order_converge_and_epochs_only_grow() -> None:
    """6 e)."""
    with controller_cluster("ASYNC_MASTER") as cc:
        b0, b1 = cc.brokers
        n0, n1 = cc.namesrvs
        await wait_one_leader(cc.ns_addrs)
        await wait_master(b0.addr)
        await wait_slave(b1.addr)
        clock = Clock()
        epochs = [(await records(cc.etcd))[GROUP].epoch]
        orders = [
            ("controllers then brokers", [n0, n1], [b0, b1]),
            ("brokers then controllers", [b1, b0], [n1, n0]),
            ("interleaved", [n1, b0], [b1, n0]),
        ]
        for what, first, second in orders:
            for p in (*first, *second):
                p.kill()
            for p in (*second, *first):
                if p in cc.brokers:
                    restart(p)
                else:
                    p.start()
            clock.mark(f"restarted {what}")
            leader = await wait_one_leader(cc.ns_addrs, timeout=30)

            async def one_master() -> bool:
                roles = [await _role(b.addr) for b in cc.brokers]
                return sum(1 for r in roles if r is not None and r[0] != "SLAVE" and r[1] == 0) == 1 and all(
                    r is not None for r in roles
                )

            await wait_until(one_master, 40, f"no single master after restarting {what}", 0.1)
            rec = (await records(cc.etcd))[GROUP]
            clock.mark(f"converged: controller {leader}, master {rec.master_addr}, epoch {rec.epoch}")
            assert rec.epoch >= epochs[-1], (what, epochs, rec.epoch)
            hist = [h.epoch for h in rec.history]
            assert hist == sorted(hist) and len(set(hist)) == len(hist), hist
            epochs.append(rec.epoch)
        print(f"epochs across restarts: {epochs}")


async def _role(addr: str) -> tuple[str, int] | None:
    try:
        return await role_of(addr)
    except (RemotingError, OSError, AssertionError):
        return None


async def test_embedded_controller_state_migrates_to_etcd(tmp_path) -> None:
    """Item 1: a NameServer restarted with etcd endpoints carries the groups its
    embedded controller managed into etcd (and renames the file)."""
    port = free_port()
    ns = namesrv_process(tmp_path, "--controller", "--controller-master-timeout-ms", str(MASTER_TIMEOUT_MS))
    ns.args = [a if a != "0" else str(port) for a in ns.args]
    b = None
    with EtcdCluster(tmp_path, 1) as etcd:
        try:
            ns.start()
            addr = f"127.0.0.1:{port}"
            b = broker_process(tmp_path / "b0", addr, GROUP, controller_conf("ASYNC_MASTER", 0, controllerAddr=addr))
            b.start()
            await wait_master(b.addr)
            ns.stop()
            state = ns.workdir / "controller.msgpack"
            assert state.exists()
            ns2 = controller_namesrv(tmp_path, "namesrv", port, etcd)
            ns2.start()
            try:
                await wait_one_leader([addr])
                rec = (await records(etcd))[GROUP]
                assert (rec.master_addr, rec.epoch) == (b.addr, 1)
                assert not state.exists() and state.with_name("controller.msgpack.migrated").exists()
                # the broker keeps leading in the same epoch
                await asyncio.sleep(2)
                assert (await role_of(b.addr)) == ((await role_of(b.addr))[0], 0)
                assert (await records(etcd))[GROUP].epoch == 1
            finally:
                ns2.stop()
        finally:
            if b is not None:
                b.stop()
            ns.stop()


async def test_controller_on_etcd_with_tls_and_user_auth(tmp_path) -> None:
    """Item 1: etcd's TLS and user auth."""
    with EtcdCluster(tmp_path, 1, tls=True, auth=("root", "s3cret-pw")) as etcd:
        ns = controller_namesrv(tmp_path, "ns0", free_port(), etcd)
        b = None
        try:
            ns.start()
            b = broker_process(
                tmp_path / "b0", ns.addr, GROUP, controller_conf("ASYNC_MASTER", 0, controllerAddr=ns.addr)
            )
            b.start()
            t0 = time.monotonic()
            await wait_master(b.addr)
            print(f"master under a TLS + auth etcd after {time.monotonic() - t0:.2f} s")
            assert (await records(etcd))[GROUP].master_addr == b.addr
            assert "s3cret-pw" not in ns.log_text()
        finally:
            if b is not None:
                b.stop()
            ns.stop()
