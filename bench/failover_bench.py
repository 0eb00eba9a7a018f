"""Controller-mode failover, embedded and on etcd: master SIGKILL -> first SEND_OK from the new master.

The time with the embedded controller and with controllers on etcd, and where it goes.

Scenarios (``--scenarios``), each a fresh set of real processes per round:

* ``embedded`` — one NameServer running the embedded controller (state in a local file);
  the master is SIGKILLed.
* ``etcd`` — 3 etcd members, 2 NameServers running controllers on them
  (``controllerEtcdEndpoints``; one leads through an etcd lease of controllerElectionTtl,
  the other stands by); the master is SIGKILLed.
* ``etcd-leader`` — the same, and at the same moment the LEADING controller's NameServer
  and the first etcd endpoint of ``controllerEtcdEndpoints`` (the member every controller
  talks to first, as the issue's test kills it) are SIGKILLed too: the standby takes over
  and completes the failover. The endpoints are listed so that the first is an etcd
  follower.
* ``etcd-leader-raft`` — the same, with etcd's raft leader listed first: etcd elects a new
  raft leader, and a new raft leader extends every lease (etcd's lessor Promote), the
  dead controller's too.

One broker group in controller mode (``controllerAddr`` = every controller): brokerId 0 is
adopted as master, brokerId 1 follows; ``--role`` ASYNC_MASTER (default), or SYNC_MASTER
with enableAutoInSyncReplicas=true, inSyncReplicas=2, minInSyncReplicas=1 (a lone master
still answers SEND_OK). Before the kill: the slave is in the controller's in-sync set and
4 producers (through the NameServers) have been sending 256-byte messages for ``--warmup``
s; each retries a failed send every 20 ms, as an application riding out a failover would.
From the kill on, a probe also sends straight to the slave's address every 50 ms. In round
i of N the kill lands (i + 0.5) / N of a heartbeat interval after one of the master's
heartbeats (by the leading controller's clock), so the rounds cover the interval evenly;
each broker starts after a random part of a heartbeat interval, so the phases of the
controller's scan and of the slave's heartbeats are random too.

Measured, wall clock (the logs, the controller's epoch record and this process share it):

* kill -> SEND_OK: the first SEND_OK a producer gets from the new master (the table's
  figure, against the goal controllerMasterTimeout + 2 s); ``probe``: the first SEND_OK
  the new master gives the probe (no route refresh);
* takeover (etcd-leader*): until the standby controller logs that it leads;
* elected: the controller's decision (the epoch 2 record's own time), and how long the
  master had been silent then by the controller's clock;
* writable: until the promoted broker logs that it takes writes.

    .venv/bin/python bench/failover_bench.py                  # 4 scenarios x 3 rounds, 3000 ms (~2-3 min)
    .venv/bin/python bench/failover_bench.py --quick          # one round each
    .venv/bin/python bench/failover_bench.py --scenarios etcd-leader,etcd-leader-raft --rounds 5
    .venv/bin/python bench/failover_bench.py --timeouts 3000,10000 --role SYNC_MASTER --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import BROKER_BOOTED, Proc
from bench._etcd import Etcd, free_ports
from nameserver.controller.config import ControllerConfig
from rmq.client import Message, Producer
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import GetSyncStateDataRequestHeader, GroupStatus, decode_group_statuses
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import SendMessageRequestHeader
from rmq.protocol.message import properties_to_string
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError

GROUP = "broker-a"
TOPIC = "FailoverBench"
PRODUCERS = 4
STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
SCENARIOS = {
    "embedded": "embedded controller: master killed",
    "etcd": "etcd controllers: master killed",
    "etcd-leader": "etcd: master + leading ctl + 1st endpoint (follower)",
    "etcd-leader-raft": "etcd: master + leading ctl + 1st endpoint (raft leader)",
}
READY = 30.0  # s for a precondition (leader, master, slave in sync)
HEARTBEAT_S = 1.0  # brokerHeartbeatInterval (the brokers' default)
CALL_ERRORS = (RemotingError, OSError, TimeoutError)


def _ts(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _rmq(name: str, args: list[str], workdir: Path, ready: str) -> Proc:
    return Proc(name, [sys.executable, "-m", "rmq.cli", *args], workdir, ready)


def _props(path: Path, props: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _namesrv(wd: Path, name: str, port: int, props: dict[str, object]) -> Proc:
    d = wd / name
    conf = _props(d / "namesrv.properties", {"enableControllerInNamesrv": "true", "bindAddress": "127.0.0.1", **props})
    args = ["namesrv", "-p", str(port), "-c", str(conf), "--kv-path", str(d / "kv.msgpack")]
    return _rmq(name, args, d, r"NameServer listening on [\d.]+:(\d+)")


def _broker(wd: Path, name: str, broker_id: int, controllers: str, role: str) -> Proc:
    d = wd / name
    props: dict[str, object] = {
        "brokerClusterName": "BenchCluster",
        "brokerName": GROUP,
        "brokerId": broker_id,
        "brokerRole": role,
        "enableControllerMode": "true",
        "controllerAddr": controllers,
        "listenPort": 0,
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(d / "store"),
        "mappedFileSizeCommitLog": 64 << 20,
    }
    if role == "SYNC_MASTER":
        props |= {"enableAutoInSyncReplicas": "true", "inSyncReplicas": 2, "minInSyncReplicas": 1}
    conf = _props(d / "broker.conf", props)
    return _rmq(name, ["broker", "-c", str(conf), "-n", controllers], d, BROKER_BOOTED)


def _addr(p: Proc) -> str:
    assert p.match is not None
    return p.match.group(1)


def _store_host(offset_msg_id: str) -> str:
    ip = ".".join(str(int(offset_msg_id[i : i + 2], 16)) for i in range(0, 8, 2))
    return f"{ip}:{int(offset_msg_id[8:16], 16)}"


def _kill_at_once(procs: list[Any]) -> float:
    """SIGKILL every process group first, then reap them; the time of the first signal."""
    t = time.time()
    for p in procs:
        if p.alive():
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.kill()
    return t


async def _until(pred: Any, what: str, timeout: float = READY, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = await pred()
        if v:
            return v
        await asyncio.sleep(every)
    raise RuntimeError(f"{what} within {timeout:.0f} s")


# ------------------------------------------------------------------------------- one round
class Round:
    """One scenario's processes and measurements; ``run()`` returns the figures, and
    ``close()`` stops everything however it ended."""

    def __init__(self, wd: Path, scenario: str, args: argparse.Namespace, timeout_ms: int, phase: float) -> None:
        self.wd, self.scenario, self.args, self.timeout_ms = wd, scenario, args, timeout_ms
        self.phase = phase  # s since the master's last heartbeat at the kill
        self.procs: list[Proc] = []
        self.etcd: Etcd | None = None
        self.client = RemotingClient()
        self.tasks: list[asyncio.Task[None]] = []

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.client.close()
        for p in reversed(self.procs):
            p.stop(5.0)
        if self.etcd is not None:
            self.etcd.close()

    def _start(self, p: Proc) -> Proc:
        self.procs.append(p)
        return p.start()

    async def _call(self, addr: str, code: int, ext: dict[str, str] | None = None) -> RemotingCommand | None:
        try:
            r = await self.client.invoke(addr, RemotingCommand(code, ext_fields=ext or {}), 2.0)
        except CALL_ERRORS:
            return None
        return r if r.code == ResponseCode.SUCCESS else None

    async def _group(self, addrs: list[str]) -> GroupStatus | None:
        """The group as the leading controller sees it (a standby forwards)."""
        ext = GetSyncStateDataRequestHeader(GROUP).to_ext_fields()
        for a in addrs:
            r = await self._call(a, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, ext)
            if r is not None:
                groups = decode_group_statuses(r.body)
                if groups:
                    return groups[0]
        return None

    async def _leader(self, addrs: list[str]) -> str | None:
        found = []
        for a in addrs:
            r = await self._call(a, RequestCode.CONTROLLER_GET_METADATA_INFO)
            if r is not None and json.loads(r.body or b"{}").get("isLeader"):
                found.append(a)
        return found[0] if len(found) == 1 else None

    async def run(self) -> dict[str, Any]:
        a = self.args
        props: dict[str, object] = {"controllerMasterTimeout": self.timeout_ms}
        order: list[int] = []  # etcd members in controllerEtcdEndpoints' order
        if self.scenario == "embedded":
            nss = [self._start(_namesrv(self.wd, "ns0", free_ports(1)[0], props))]
        else:
            self.etcd = Etcd(self.wd, 3, election_ms=a.etcd_election_ms)
            self.etcd.start()
            order = _endpoint_order(self.scenario, self.etcd.leader_index())
            endpoints = ";".join(self.etcd.endpoints[i] for i in order)
            props |= {"controllerEtcdEndpoints": endpoints, "controllerElectionTtl": a.ttl_ms}
            nss = [self._start(_namesrv(self.wd, f"ns{i}", p, props)) for i, p in enumerate(free_ports(2))]
        ns_addrs = [f"127.0.0.1:{_addr(n)}" for n in nss]
        leader = ns_addrs[0]
        if self.etcd is not None:
            leader = await _until(lambda: self._leader(ns_addrs), "no single leading controller")
        controllers = ";".join(ns_addrs)
        # each broker starts after a random part of a heartbeat interval: the phases of the
        # controller's scan and of the two brokers' heartbeats are then as random as in a
        # cluster, not fixed by how long each process takes to start
        await asyncio.sleep(random.uniform(0, HEARTBEAT_S))
        old = self._start(_broker(self.wd, "a", 0, controllers, a.role))
        await asyncio.sleep(random.uniform(0, HEARTBEAT_S))
        new = self._start(_broker(self.wd, "b", 1, controllers, a.role))
        old_addr, new_addr = _addr(old), _addr(new)

        first: dict[str, float] = {}
        killed = asyncio.Event()

        async def producer(k: int) -> None:
            async with Producer(f"fb_pg_{k}", controllers, instance_name=f"fb-{k}") as p:
                while True:
                    try:
                        r = await p.send(Message(TOPIC, b"x" * 256))
                    except (MQBrokerError, MQClientError, RemotingError):
                        await asyncio.sleep(0.02)
                        continue
                    host = _store_host(r.offset_msg_id)
                    first.setdefault(host, time.time())
                    if host == new_addr and killed.is_set():
                        return
                    await asyncio.sleep(0.005)

        async def probe() -> None:
            await killed.wait()
            props = properties_to_string({"WAIT": "true"})
            while True:
                h = SendMessageRequestHeader("fb_probe", TOPIC, "TBW102", 4, 0, 0, int(time.time() * 1000), 0, props)
                cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=h.to_v2_ext_fields(), body=b"p" * 64)
                try:
                    r = await self.client.invoke(new_addr, cmd, 1.0)
                    if r.code == ResponseCode.SUCCESS:
                        first["probe"] = time.time()
                        return
                except CALL_ERRORS:
                    pass
                await asyncio.sleep(0.05)

        self.tasks = [asyncio.create_task(producer(k)) for k in range(PRODUCERS)]
        self.tasks.append(asyncio.create_task(probe()))

        async def ready() -> bool:
            g = await self._group(ns_addrs)
            if g is None or g.master_addr != old_addr or old_addr not in first:
                return False
            return any(m.addr == new_addr and m.in_sync and m.alive for m in g.members)

        await _until(ready, f"{old_addr} master with {new_addr} in sync and a SEND_OK")
        await asyncio.sleep(a.warmup)
        if not await ready():
            raise RuntimeError(f"{new_addr} left the in-sync set before the kill")
        # the kill lands self.phase after one of the master's heartbeats (as the leading
        # controller heard them): otherwise it would follow the heartbeat that made the
        # slave's in-sync state visible, by the warm-up, every round
        asked = time.monotonic()
        g = await self._group(ns_addrs)
        beat = next((m for m in g.members if m.addr == old_addr), None) if g else None
        if beat is not None:
            age = beat.last_heartbeat_ago_ms / 1000 + (time.monotonic() - asked) / 2
            await asyncio.sleep((self.phase - age) % HEARTBEAT_S)

        victims: list[Any] = [old]
        etcd_victim = raft_leader = None
        kills_leader = self.scenario.startswith("etcd-leader")
        if kills_leader:
            assert self.etcd is not None
            leader = await _until(lambda: self._leader(ns_addrs), "no single leading controller")
            victims.append(next(n for n, ad in zip(nss, ns_addrs, strict=True) if ad == leader))
            raft_leader = self.etcd.leader_index()
            etcd_victim = order[0]
            victims.append(self.etcd.procs[etcd_victim])
        t0 = _kill_at_once(victims)
        killed.set()
        t_killed = time.time() - t0
        wait_s = self.timeout_ms / 1000 + a.ttl_ms / 1000 + 30
        done = await asyncio.wait(self.tasks, timeout=wait_s)
        if done[1]:
            raise RuntimeError(f"no SEND_OK from {new_addr} within {wait_s:.0f} s of the kill")

        survivors = [ad for ad in ns_addrs if not (kills_leader and ad == leader)]
        g = await _until(lambda: self._group(survivors), "no controller answers after the failover")
        rec = next((h for h in g.history if h.epoch == 2), None)
        if rec is None or rec.master_addr != new_addr:
            raise RuntimeError(f"no epoch 2 with master {new_addr}: {g.history}")
        silent = re.search(r"silent for (\d+) ms", rec.reason)
        writable = re.search(
            STAMP + r" WARNING \S+ controller: \S+ is master of \S+: epoch 2 .*writable after ([\d.]+) ms",
            new.log_text(),
        )
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "timeout_ms": self.timeout_ms,
            "kill_spread_s": t_killed,
            "heartbeat_age_s": self.phase,
            "first": first[new_addr] - t0,
            "probe": first["probe"] - t0,
            "elected": rec.time_ms / 1000 - t0,
            "silent_ms": int(silent.group(1)) if silent else None,
            "reason": rec.reason,
            "writable": _ts(writable.group(1)) - t0 if writable else None,
            "promote_ms": float(writable.group(2)) if writable else None,
            "takeover": None,
            "etcd_killed": etcd_victim,
            "etcd_raft_leader_killed": None if etcd_victim is None else etcd_victim == raft_leader,
            "lease_ttl_s": None,
        }
        for n in nss:
            ttl = re.search(r"elected with lease \S+ \(ttl (\d+) s\)", n.log_text())
            if ttl:
                out["lease_ttl_s"] = int(ttl.group(1))
        if kills_leader:
            other = next(n for n, ad in zip(nss, ns_addrs, strict=True) if ad != leader)
            leads = [
                _ts(m.group(1)) - t0
                for m in re.finditer(STAMP + r" WARNING \S+ controller \S+ leads \(", other.log_text())
            ]
            out["takeover"] = next((t for t in leads if t > -0.5), None)
        return out


def _endpoint_order(scenario: str, raft_leader: int | None) -> list[int]:
    """The etcd members in controllerEtcdEndpoints' order: etcd-leader lists a follower
    first, etcd-leader-raft the raft leader (the first is the one killed)."""
    order = [0, 1, 2]
    if raft_leader is None or scenario not in ("etcd-leader", "etcd-leader-raft"):
        return order
    order.remove(raft_leader)
    return [raft_leader, *order] if scenario == "etcd-leader-raft" else [*order, raft_leader]


async def _run_round(scenario: str, args: argparse.Namespace, timeout_ms: int, phase: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rmq-fb-", ignore_cleanup_errors=True) as d:
        r = Round(Path(d), scenario, args, timeout_ms, phase)
        try:
            return await r.run()
        except BaseException:
            if args.verbose:
                for p in r.procs:
                    print(f"--- {p.name}:\n{p.tail(15)}", file=sys.stderr)
            raise
        finally:
            await r.close()


# ------------------------------------------------------------------------------- output
def _f(v: float | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def _med(rows: list[dict[str, Any]], key: str) -> float | None:
    vs = [r[key] for r in rows if r[key] is not None]
    return statistics.median(vs) if vs else None


def _round_line(r: dict[str, Any], i: int) -> str:
    s = (
        f"  {r['scenario']:<16} {r['timeout_ms']} ms, round {i}: killed {r['heartbeat_age_s']:.2f} s after a "
        f"master heartbeat; elected +{_f(r['elected'])} s "
        f"(master silent {r['silent_ms']} ms), writable +{_f(r['writable'])} s, "
        f"probe SEND_OK +{_f(r['probe'])} s, producer SEND_OK +{r['first']:.2f} s"
    )
    if r["etcd_killed"] is not None:
        role = "etcd's raft leader" if r["etcd_raft_leader_killed"] else "an etcd follower"
        s += (
            f"; takeover +{_f(r['takeover'])} s; the etcd member killed was {role}; "
            f"3 SIGKILLs within {r['kill_spread_s'] * 1000:.0f} ms"
        )
    return s


def _tables(rows: list[dict[str, Any]], args: argparse.Namespace, timeouts: list[int]) -> list[dict[str, Any]]:
    summary = []
    for t in timeouts:
        for sc in args.scenarios:
            rs = [r for r in rows if r["scenario"] == sc and r["timeout_ms"] == t]
            if not rs:
                continue
            xs = [r["first"] for r in rs]
            goal = t / 1000 + 2
            med = statistics.median(xs)
            summary.append(
                {
                    "scenario": sc,
                    "timeout_ms": t,
                    "rounds": len(rs),
                    "min_s": min(xs),
                    "median_s": med,
                    "max_s": max(xs),
                    "goal_s": goal,
                    "meets_goal": med <= goal,
                    **{f"median_{k}_s": _med(rs, k) for k in ("takeover", "elected", "writable", "probe")},
                    "median_silent_ms": _med(rs, "silent_ms"),
                    "median_promote_ms": _med(rs, "promote_ms"),
                }
            )
    w = max(len(v) for v in SCENARIOS.values())
    print()
    print("kill -> first SEND_OK a producer gets from the new master:")
    print(
        f"{'scenario':<{w}} {'timeout ms':>10} {'rounds':>6} {'min s':>6} {'median s':>8} {'max s':>6} {'goal s':>6}  median ok"
    )
    for s in summary:
        print(
            f"{SCENARIOS[s['scenario']]:<{w}} {s['timeout_ms']:>10} {s['rounds']:>6} {s['min_s']:>6.2f} "
            f"{s['median_s']:>8.2f} {s['max_s']:>6.2f} {s['goal_s']:>6.2f}  {'yes' if s['meets_goal'] else 'NO'}"
        )
    print()
    print(
        "where the time goes (medians, s after the SIGKILL; silent: the master's silence at the decision, "
        "ms; promote: the broker's own switch to master, ms):"
    )
    print(
        f"{'scenario':<{w}} {'timeout ms':>10} {'takeover':>8} {'elected':>7} {'silent':>6} {'writable':>8} "
        f"{'promote':>7} {'probe OK':>8} {'producer OK':>11}"
    )
    for s in summary:
        print(
            f"{SCENARIOS[s['scenario']]:<{w}} {s['timeout_ms']:>10} {_f(s['median_takeover_s']):>8} "
            f"{_f(s['median_elected_s']):>7} {_f(s['median_silent_ms'], '.0f'):>6} {_f(s['median_writable_s']):>8} "
            f"{_f(s['median_promote_ms'], '.1f'):>7} {_f(s['median_probe_s']):>8} {s['median_s']:>11.2f}"
        )
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, of: " + ", ".join(SCENARIOS))
    ap.add_argument("--timeouts", default="3000", help="controllerMasterTimeout values in ms (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per scenario (fresh processes each)")
    ap.add_argument("--quick", action="store_true", help="one round per scenario")
    ap.add_argument(
        "--role",
        choices=["ASYNC_MASTER", "SYNC_MASTER"],
        default="ASYNC_MASTER",
        help="the brokers' brokerRole (SYNC_MASTER: + enableAutoInSyncReplicas, inSyncReplicas=2, minInSyncReplicas=1)",
    )
    ap.add_argument("--ttl-ms", type=int, default=3000, help="controllerElectionTtl, the etcd lease (default 3000)")
    ap.add_argument("--etcd-election-ms", type=int, default=1000, help="etcd's --election-timeout (default 1000)")
    ap.add_argument("--warmup", type=float, default=2.0, help="s of sending with the slave in sync before the kill")
    ap.add_argument("--json", action="store_true", help="+ one JSON object on the last output line")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the processes' log tails when a round fails")
    args = ap.parse_args()
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    logging.getLogger("rmq").setLevel(logging.CRITICAL)  # the failed sends are expected
    # a SIGTERM unwinds like Ctrl-C: every round's processes and directories are removed
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    timeouts = [int(t) for t in args.timeouts.split(",")]
    rounds = 1 if args.quick else args.rounds
    cfg = ControllerConfig(controllerMasterTimeout=timeouts[0], controllerElectionTtl=args.ttl_ms)
    print(
        f"controllerMasterTimeout {', '.join(map(str, timeouts))} ms; controllerScanInterval "
        f"{cfg.controllerScanInterval} ms; brokerHeartbeatInterval 1000 ms; master lease "
        f"(controllerMasterLease 0 = 4/5 of the timeout) {cfg.master_lease_ms} ms at {timeouts[0]} ms; "
        f"controllerElectionTtl {args.ttl_ms} ms; etcd 3 members, heartbeat 100 ms, election timeout "
        f"{args.etcd_election_ms} ms; {args.role}; {PRODUCERS} producers + a probe every 50 ms; "
        f"goal: controllerMasterTimeout + 2 s",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    ttl_seen: set[int] = set()
    try:
        for t in timeouts:
            for i in range(rounds):  # scenarios interleaved: a noisy spell hits each of them
                for sc in args.scenarios:
                    # the kill's phase in the master's heartbeat interval, spread evenly over the rounds
                    phase = (i + 0.5) / rounds * HEARTBEAT_S
                    r = asyncio.run(_run_round(sc, args, t, phase))
                    r["round"] = i + 1
                    rows.append(r)
                    if r["lease_ttl_s"] is not None:
                        ttl_seen.add(r["lease_ttl_s"])
                    print(_round_line(r, i + 1), flush=True)
    except KeyboardInterrupt:
        print("interrupted: the round's processes and files are removed", file=sys.stderr)
        return 130
    if ttl_seen:
        print(f"etcd lease granted to the leading controller: ttl {', '.join(map(str, sorted(ttl_seen)))} s")
    summary = _tables(rows, args, timeouts)
    if args.json:
        print(json.dumps({"rounds": rows, "summary": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
