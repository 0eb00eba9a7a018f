"""The failover controller in a real `rmq namesrv` process.

The test plays three brokers of one group over the remoting protocol, as brokers
would: BROKER_HEARTBEAT (904) every 200 ms and REGISTER_BROKER. It checks the election
after the master goes silent, the epoch increment, the routes after the promoted
broker re-registers, the fencing of the returning old master, `rmq admin electMaster`
and `controllerStatus`, and that epochs survive a NameServer restart.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from rmq.protocol.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from rmq.protocol.controller import BrokerHeartbeatRequestHeader, BrokerHeartbeatResponseHeader, HeartbeatBody
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import RegisterBrokerRequestHeader
from rmq.remoting.client import RemotingClient
from tests.harness import namesrv_process

T = 3.0
TIMEOUT_MS = 1500
M, S1, S2 = "127.0.0.1:31001", "127.0.0.1:31002", "127.0.0.1:31003"
HA = {M: "127.0.0.1:31101", S1: "127.0.0.1:31102", S2: "127.0.0.1:31103"}


class PlayedBroker:
    """One broker as the controller sees it: what it would put in its heartbeats."""

    def __init__(self, addr: str, broker_id: int, role: str, max_offset: int) -> None:
        self.addr, self.broker_id, self.role, self.max_offset = addr, broker_id, role, max_offset
        self.epoch, self.epoch_start = 0, -1
        self.acks: dict[str, int] = {}
        self.beating = True
        self.last: BrokerHeartbeatResponseHeader | None = None

    def request(self) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader(
            "TestCluster",
            "broker-a",
            self.addr,
            self.broker_id,
            self.role,
            self.epoch,
            self.max_offset,
            self.epoch_start,
        )
        return RemotingCommand(
            RequestCode.BROKER_HEARTBEAT,
            ext_fields=h.to_ext_fields(),
            body=HeartbeatBody(HA[self.addr], self.acks).to_json(),
        )

    def obey(self, a: BrokerHeartbeatResponseHeader) -> None:
        """What the wiring does with the answer: take the id and, once named master,
        the role and the epoch (starting at its own max offset)."""
        self.last = a
        if a.master_addr is None:
            return
        self.broker_id = a.broker_id
        if a.master_addr == self.addr and self.role == "SLAVE":
            self.role, self.epoch, self.epoch_start = "SYNC_MASTER", a.master_epoch, self.max_offset
        elif a.master_addr != self.addr:
            self.role = "SLAVE"
        if a.master_addr == self.addr and self.epoch < a.master_epoch:
            self.epoch, self.epoch_start = a.master_epoch, a.epoch_start_offset


async def beat(client: RemotingClient, ns: list[str], brokers: list[PlayedBroker], stop: asyncio.Event) -> None:
    while not stop.is_set():
        for b in brokers:
            if not b.beating:
                continue
            try:
                resp = await client.invoke(ns[0], b.request(), T)
            except Exception:
                continue  # the NameServer is restarting
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            b.obey(BrokerHeartbeatResponseHeader.from_ext_fields(resp.ext_fields))
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
        except TimeoutError:
            pass


def register(addr: str, broker_id: int) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper({"FailoverTopic": TopicConfig("FailoverTopic", 4, 4)}, DataVersion(1, 1))
    header = RegisterBrokerRequestHeader("broker-a", addr, "TestCluster", HA[addr], broker_id)
    return RemotingCommand(
        RequestCode.REGISTER_BROKER,
        version=MQVersion.V4_9_8,
        ext_fields=header.to_ext_fields(),
        body=RegisterBrokerBody(wrapper).to_json(),
    )


async def route_addrs(client: RemotingClient, ns: str) -> dict[int, str]:
    resp = await client.invoke(
        ns,
        RemotingCommand(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, version=MQVersion.V4_9_8, ext_fields={"topic": "FailoverTopic"}
        ),
        T,
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return TopicRouteData.from_json(resp.body).broker_datas[0].broker_addrs


async def until(cond, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


async def admin(*args: str) -> subprocess.CompletedProcess[str]:
    # In a worker thread: the played brokers' heartbeats run on this loop and must not
    # stop while the CLI starts (a blocked loop looks like a dead broker to the controller).
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "rmq.cli", "admin", *args], capture_output=True, text=True, timeout=60
    )


async def test_controller_elects_fences_and_persists(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(
        f"enableControllerInNamesrv=true\ncontrollerMasterTimeout={TIMEOUT_MS}\ncontrollerScanInterval=100\n"
    )
    ns_proc = namesrv_process(tmp_path, "-c", str(conf))
    ns_proc.start()
    m = PlayedBroker(M, 0, "SYNC_MASTER", 5000)
    s1 = PlayedBroker(S1, 1, "SLAVE", 5000)
    s2 = PlayedBroker(S2, 2, "SLAVE", 4000)
    m.acks = {S1: 5000, S2: 4000}
    brokers = [m, s1, s2]
    ns = [ns_proc.addr]
    stop = asyncio.Event()
    client = RemotingClient()
    task = asyncio.create_task(beat(client, ns, brokers, stop))
    try:
        await until(
            lambda: all(b.last is not None and b.last.master_addr == M for b in brokers),
            10,
            "the first master to be adopted",
        )
        assert (m.last.master_epoch, m.last.epoch_start_offset, m.last.broker_id) == (1, 0, 0)
        assert (s1.last.master_ha_addr, s1.last.broker_id, s2.last.broker_id) == (HA[M], 1, 2)
        for b in brokers:
            assert (await client.invoke(ns[0], register(b.addr, b.broker_id), T)).code == 0
        assert await route_addrs(client, ns[0]) == {0: M, 1: S1, 2: S2}

        # the master goes silent: S1 (acked 5000, more than S2) is elected
        m.beating = False
        took = await until(lambda: s1.role == "SYNC_MASTER", 15, "S1 to be elected")
        assert took >= TIMEOUT_MS / 1000 - 0.3
        assert (s1.last.master_epoch, s1.last.epoch_start_offset, s1.broker_id) == (2, 5000, 0)
        await until(lambda: s2.last.master_addr == S1, 5, "S2 to hear of S1")
        assert (s2.last.master_ha_addr, s2.broker_id) == (HA[S1], 2)
        # the promoted broker re-registers as 0: routes follow
        assert (await client.invoke(ns[0], register(S1, 0), T)).code == 0
        assert await route_addrs(client, ns[0]) == {0: S1, 2: S2}

        # the old master comes back still believing it leads epoch 1; it is told to
        # follow S1 under id 1, and its registration as 0 is recorded under 1
        m.epoch, m.epoch_start, m.max_offset = 1, 0, 5600
        m.beating = True
        await until(lambda: m.role == "SLAVE", 5, "the old master to step down")
        assert (m.last.master_addr, m.last.master_epoch, m.broker_id) == (S1, 2, 1)
        assert (await client.invoke(ns[0], register(M, 0), T)).code == 0
        assert await route_addrs(client, ns[0]) == {0: S1, 1: M, 2: S2}
        assert "recorded as id 1" in ns_proc.log_text()

        # the new master reports its slaves (S2 caught up into epoch 2, which began at
        # 5000: a slave behind its epoch's start is not in sync); electMaster moves the
        # group to S2
        s2.max_offset = 5200
        s1.acks = {S2: 5200, M: 5000}
        await asyncio.sleep(0.5)
        bad = await admin("electMaster", "-n", ns[0], "-b", "broker-a", "--brokerAddr", "1.2.3.4:5")
        assert bad.returncode == 1 and bad.stdout == ""
        assert bad.stderr.strip() == (
            "rmq admin electMaster: NameServer answered "
            "CONTROLLER_BROKER_NOT_ALIVE (2006): 1.2.3.4:5 is not a "
            "live broker of broker-a"
        )
        ok = await admin("electMaster", "-n", ns[0], "-b", "broker-a", "--brokerAddr", S2, "--json")
        assert ok.returncode == 0, ok.stderr
        doc = json.loads(ok.stdout)
        assert (doc["masterAddress"], doc["masterEpoch"], doc["epochStartOffset"]) == (S2, 3, 5200)
        await until(
            lambda: s2.role == "SYNC_MASTER" and s1.role == "SLAVE", 5, "the manual switch to reach the brokers"
        )
        await asyncio.sleep(0.5)  # ... and their new roles the controller

        status = await admin("controllerStatus", "-n", ns[0])
        assert status.returncode == 0, status.stderr
        out = status.stdout.splitlines()
        # first the controllers (one, embedded, leading), then the groups
        assert out[0].split()[:3] == ["#NameServer", "#Controller", "#Role"]
        assert out[1].split()[:3] == [ns[0], ns[0], "LEADER"] and "file" in out[1]
        lines = out[2:]
        assert lines[0].startswith(
            f"#Group broker-a (cluster TestCluster): epoch 3 from offset 5200, master {S2} (alive)"
        )
        assert lines[1].split() == [
            "#BrokerName",
            "#BrokerAddr",
            "#BrokerId",
            "#Role",
            "#Epoch",
            "#MaxOffset",
            "#AckOffset",
            "#InSync",
            "#Alive",
            "#LastHeartbeat(ms)",
        ]
        rows = {ln.split()[1]: ln.split() for ln in lines[2:]}
        assert rows[S2][2:4] == ["0", "SYNC_MASTER*"]
        assert rows[M][2:4] == ["1", "SLAVE"]
        # columns line up under their headers
        assert len({ln.index(S2) for ln in lines[2:] if S2 in ln}) == 1

        # restart the NameServer: the epochs it handed out stay taken
        stop.set()
        await task
        ns_proc.stop()
        assert (tmp_path / "namesrv" / "controller.msgpack").exists()
        ns_proc = namesrv_process(tmp_path, "-c", str(conf))
        ns_proc.start()
        ns[0] = ns_proc.addr
        st = json.loads((await admin("controllerStatus", "-n", ns[0], "--json")).stdout)
        g = st["groups"][0]
        assert (g["epoch"], g["epochStartOffset"], g["masterAddr"]) == (3, 5200, S2)
        assert [h["epoch"] for h in g["history"]] == [1, 2, 3]
        stop = asyncio.Event()
        task = asyncio.create_task(beat(client, ns, brokers, stop))
        s1.max_offset = m.max_offset = 5300
        s2.acks = {S1: 5300, M: 5300}
        await until(
            lambda: s1.last is not None and s1.last.master_addr == S2 and s1.last.master_epoch == 3,
            5,
            "the brokers to reach the restarted NameServer",
        )
        await asyncio.sleep(0.5)  # S2's acks reach the controller
        s2.beating = False
        await until(lambda: m.role == "SYNC_MASTER" or s1.role == "SYNC_MASTER", 15, "an election after the restart")
        # same acks: the lower assigned id wins; S1 stepped down after M took id 1, so
        # it got the id S2 left (2)
        assert (m.broker_id, s1.role) == (0, "SLAVE")
        assert s1.broker_id == 2
        assert m.last.master_epoch == 4  # 3 was handed out before the restart
    finally:
        stop.set()
        await task
        await client.close()
        ns_proc.stop()
