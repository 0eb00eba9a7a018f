"""rmq against Apache RocketMQ 4.9.8, side by side, under RocketMQ's own benchmark tools.

Run from the repository root::

    .venv/bin/python bench/vs_rocketmq_bench.py              # every row, 3 rounds (~9-10 min)
    .venv/bin/python bench/vs_rocketmq_bench.py --quick      # smoke run (1 round, short points)
    .venv/bin/python bench/vs_rocketmq_bench.py --rows async16,sync16 --rounds 5 --json

Per mode one broker.conf (RocketMQ's keys: brokerClusterName, brokerName, brokerId,
listenPort, namesrvAddr, storePathRootDir, flushDiskType, brokerRole,
mappedFileSizeCommitLog, autoCreateTopicEnable, defaultTopicQueueNums, deleteWhen,
fileReservedTime; a slave's brokerRole=SLAVE, brokerId=1, haMasterAddress) is given to both
RocketMQ 4.9.8 (``../shared/rocketmq-4.9.8``: ``bin/rocketmq namesrv`` + ``bin/rocketmq broker
-c FILE``) and rmq (``rmq namesrv`` + ``rmq broker -c FILE``), only ports and paths differing.
Both clusters of a mode run at the same time (each its own NameServer, free ports below
32768, a temp directory), started by ``bench/_cluster.py``; the points alternate between
them, the first one alternating by round. A topic of 4 queues is created on each master
(UPDATE_AND_CREATE_TOPIC, what ``mqadmin updateTopic -r 4 -w 4`` sends) and every queue gets
a first message; then each cluster gets one unmeasured warm-up point (the Java broker's JIT).

Rows (``--rows``): ASYNC_FLUSH and SYNC_FLUSH (ASYNC_MASTER, no slave) at 1, 16 and 64
senders; ASYNC_MASTER and SYNC_MASTER with one slave at ``--ha-threads`` senders; drain.

* A producer point is RocketMQ's benchmark Producer (``-w THREADS -s 1024 -q N``) in one JVM
  kept warm across points (``bench/_rocketmq.py``); N = the previous TPS of that row and
  broker (in the first round the smaller of a prior and 1.5 x the lean sender's rate) x
  ``--point-seconds``. TPS, average RT (over the
  tool's snapshot window, from 1 s after its start to its end) and max RT (the whole run)
  are the tool's own ``[Complete]`` line.
* p99 (rmq's own client, first round only): ``bench/e2e_bench.py``'s lean sender (the Java
  tool's SEND_MESSAGE_V2 stream from Python, same sender count) for 1 s + ``--p99-seconds``
  against each broker, before the row's first producer point: send -> answer latency percentiles over its window.
* drain: RocketMQ's benchmark Consumer (a fresh JVM, a new group whose offsets are set
  ``--drain-backlog`` messages before the end of the topic, topped up with SEND_BATCH_MESSAGE
  if the producer points left fewer). Drain TPS = messages the broker delivered
  (GET_BROKER_RUNTIME_INFO ``msgGetTotalTodayNow``, polled every 50 ms) / time, from the first
  poll that saw the consumer's pulls to the last message; the tool's own ``TPS:`` line covers
  its 1-10 s window and appears only when a drain lasts that long.

Reported per row: medians over rounds of each broker's TPS, rmq/RocketMQ, average and max
RT, and the p99 of rmq's client against both; the SYNC_MASTER / ASYNC_MASTER TPS ratio per
broker. Every process and the temp directory are removed at the end, also on Ctrl-C,
SIGTERM or an error (``--keep`` keeps the directory).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _cluster import IMPLS, Cluster  # noqa: E402
from _rocketmq import ProducerTool, consumer_lines, consumer_process, parse_producer  # noqa: E402
from e2e_bench import (  # noqa: E402
    Bench,
    _clean,
    add_run_args,
    bench_client,
    bench_session,
    commit_offsets,
    fill_backlog,
    fmt,
    max_offsets,
    out,
    prime_queues,
    send_step,
    table,
    uvrun,
)

from rmq.client.errors import MQBrokerError  # noqa: E402

NAMES = {"rocketmq": "RocketMQ", "rmq": "rmq"}
QUEUES = 4


@dataclass(frozen=True)
class Phase:
    """One broker.conf: flush mode, master role, with or without a slave."""

    flush: str
    role: str
    slave: bool


PHASES = {
    "ASYNC_FLUSH": Phase("ASYNC_FLUSH", "ASYNC_MASTER", False),
    "SYNC_FLUSH": Phase("SYNC_FLUSH", "ASYNC_MASTER", False),
    "ASYNC_MASTER": Phase("ASYNC_FLUSH", "ASYNC_MASTER", True),
    "SYNC_MASTER": Phase("ASYNC_FLUSH", "SYNC_MASTER", True),
}


@dataclass(frozen=True)
class Row:
    key: str
    phase: str
    threads: int  # 0: the drain; -1: --ha-threads
    prior_tps: int  # first-round guess of the Java tool's TPS (sets -q)


ROWS = [
    Row("async1", "ASYNC_FLUSH", 1, 3000),
    Row("async16", "ASYNC_FLUSH", 16, 20000),
    Row("async64", "ASYNC_FLUSH", 64, 25000),
    Row("sync1", "SYNC_FLUSH", 1, 1000),
    Row("sync16", "SYNC_FLUSH", 16, 9000),
    Row("sync64", "SYNC_FLUSH", 64, 14000),
    Row("async_master", "ASYNC_MASTER", -1, 18000),
    Row("sync_master", "SYNC_MASTER", -1, 10000),
    Row("drain", "ASYNC_FLUSH", 0, 0),
]
ROW_BY_KEY = {r.key: r for r in ROWS}


def row_threads(r: Row, a: argparse.Namespace) -> int:
    return a.ha_threads if r.threads < 0 else r.threads


def row_label(r: Row, a: argparse.Namespace) -> str:
    if r.threads == 0:
        return "drain (benchmark Consumer)"
    n = row_threads(r, a)
    s = "sender" if n == 1 else "senders"
    ph = PHASES[r.phase]
    return f"{r.phase} + slave, {n} {s}" if ph.slave else f"{r.phase}, {n} {s}"


def broker_conf(ph: Phase) -> dict[str, object]:
    """The mode's broker.conf keys on top of ``Cluster``'s (brokerClusterName, brokerName,
    listenPort, namesrvAddr, brokerIP1, storePathRootDir, flushDiskType)."""
    return {
        "brokerId": 0,
        "brokerRole": ph.role,
        "flushDiskType": ph.flush,
        "mappedFileSizeCommitLog": 1073741824,
        "autoCreateTopicEnable": "true",
        "defaultTopicQueueNums": QUEUES,
        "deleteWhen": "04",
        "fileReservedTime": 48,
    }


# =================================================================================== helpers
async def _runtime_info(addr: str, keys: tuple[str, ...]) -> list[int]:
    from rmq.client.api import MQClientAPI

    rc = bench_client()
    try:
        info = await MQClientAPI(rc).get_broker_runtime_info(addr)
    finally:
        await rc.close()
    return [int(info.get(k, "0")) for k in keys]


def create_topic(c: Cluster, topic: str, size: int) -> None:
    """A 4-queue topic on the master, its route at the NameServer, a first message per queue."""
    from rmq.client.api import MQClientAPI
    from rmq.protocol.bodies import TopicConfig

    async def go() -> None:
        rc = bench_client()
        try:
            api = MQClientAPI(rc, [c.namesrv_addr])
            await api.create_topic(c.broker_addr, TopicConfig(topic, QUEUES, QUEUES))
            deadline = time.monotonic() + 30
            while True:
                route = await api.get_topic_route_info(topic)
                if route is not None and route.queue_datas:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic}: no route at the NameServer 30 s after it was created")
                await asyncio.sleep(0.1)
        finally:
            await rc.close()

    uvrun(go())
    prime_queues(c.namesrv_addr, topic, size)


def wait_slave(c: Cluster, timeout: float = 90.0) -> float:
    """Until the slave's CommitLog ends where the master's does (it is connected and
    replicating); the seconds it took."""
    t0 = time.monotonic()
    keys = ("commitLogMaxOffset",)
    m = s = -1
    while True:
        try:
            (m,) = uvrun(_runtime_info(c.broker_addr, keys))
            (s,) = uvrun(_runtime_info(c.slave_addr, keys))
        except MQBrokerError:
            # a RocketMQ 4.9.8 broker answers SYSTEM_ERROR (NoSuchElementException from
            # LinkedList.getLast: no TPS sample yet) during its first second or so
            pass
        else:
            if m > 0 and s == m:
                return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"the slave did not catch up in {timeout:.0f} s (master {m}, slave {s})")
        c.check_alive()
        time.sleep(0.2)


def wait_dispatched(c: Cluster, timeout: float = 120.0) -> None:
    """Until the master's ConsumeQueues cover its whole CommitLog (``dispatchBehindBytes`` 0)."""
    deadline = time.monotonic() + timeout
    while uvrun(_runtime_info(c.broker_addr, ("dispatchBehindBytes",)))[0] > 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"dispatch still behind after {timeout:.0f} s")
        time.sleep(0.1)


def median(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def loadavg1() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError):
        return float("nan")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# =================================================================================== the run
class VsBench:
    def __init__(self, a: argparse.Namespace, b: Bench, root: Path, tool: ProducerTool) -> None:
        self.a = a
        self.b = b
        self.root = root
        self.tool = tool
        self.est: dict[tuple[str, str], float] = {}
        # results[row][impl] = {"rounds": [...], "p99": {...}}
        self.results: dict[str, dict[str, dict[str, Any]]] = {}
        self.confs: dict[str, dict[str, object]] = {}

    # ------------------------------------------------------------------ points
    def java_point(self, c: Cluster, impl: str, row: Row, seconds: float, record: bool = True) -> dict[str, Any]:
        a = self.a
        threads = row_threads(row, a)
        est = self.est.get((impl, row.key), row.prior_tps)
        q = max(threads * 20, int(est * seconds))
        for _ in range(2):
            args = ["-n", c.namesrv_addr, "-t", a.topic, "-w", str(threads), "-s", str(a.size), "-q", str(q)]
            t0 = time.time()
            try:
                text = self.tool.run(args, timeout=max(60.0, 10 * seconds))
            except TimeoutError as e:
                self.tool.start()
                return {"error": f"timeout: {str(e)[:300]}"}
            t1 = time.time()
            c.check_alive()
            line = parse_producer(text)
            if line is not None:
                break
            # done before its second snapshot (the estimate was far too high): once more, longer
            q = int(q * max(3.0, 2 * seconds / max(t1 - t0, 0.1)))
        if line is None:
            return {"error": "no [Complete] TPS line (run too short)", "q": q, "seconds": t1 - t0}
        if record:
            self.est[(impl, row.key)] = line.tps
        assert c.cpu is not None
        return {
            "tps": line.tps,
            "avg_rt_ms": line.avg_rt_ms,
            "max_rt_ms": line.max_rt_ms,
            "send_failed": line.send_failed,
            "response_failed": line.response_failed,
            "q": q,
            "seconds": t1 - t0,
            "broker_cpu_pct": c.cpu.percent(t0 + 1.0, t1),
            # rmq: its event-loop thread runnable but kept off the CPU (schedstat); the JVM's
            # main thread does no broker work, so RocketMQ has no such figure
            "loop_wait_pct": c.cpu.wait_percent(t0 + 1.0, t1) if impl == "rmq" else None,
            "load1": loadavg1(),
        }

    def p99_point(self, c: Cluster, row: Row) -> dict[str, Any]:
        self.b.cluster = c
        try:
            r = send_step(self.b, "lean", row_threads(row, self.a), 1, 1.0, self.a.p99_seconds)
        finally:
            self.b.cluster = None
        return {k: r[k] for k in ("tps", "p50_ms", "p99_ms", "avg_ms", "max_ms", "send_failed", "response_failed")}

    def drain(self, c: Cluster, impl: str, k: int) -> dict[str, Any]:
        a = self.a
        ns, topic = c.namesrv_addr, a.topic
        offs = max_offsets(ns, topic)
        topped = 0
        if sum(offs) < a.drain_backlog + 64 * len(offs):
            topped, _ = fill_backlog(ns, topic, a.drain_backlog + 64 * len(offs) - sum(offs), a.size)
            offs = max_offsets(ns, topic)
        wait_dispatched(c)  # a fresh top-up is consumable only once in the ConsumeQueues
        share = a.drain_backlog // len(offs)
        starts = [max(0, o - share) for o in offs]
        total = sum(o - s for o, s in zip(offs, starts, strict=True))
        group = f"vs_drain_r{k}"
        commit_offsets(ns, topic, group, starts)
        res: dict[str, Any] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=lambda: res.update(uvrun(self._watch_drain(c.broker_addr, total, stop))))
        proc = consumer_process(self.root / "consumers" / f"{impl}-r{k}", ns, topic, group)
        watcher.start()
        try:
            proc.start()
            watcher.join(a.drain_timeout)
            log = proc.log_text()
        finally:
            stop.set()
            proc.kill()
            watcher.join()
        c.check_alive()
        if "error" in res or "t1" not in res:
            return {"error": res.get("error", "the drain watcher failed"), "backlog": total, "topped_up": topped}
        lines = consumer_lines(log)
        tps = (res["v1"] - res["v0"]) / max(res["t1"] - res["t0"], 1e-9)
        return {
            "tps": tps,
            "backlog": total,
            "topped_up": topped,
            "drain_s": res["t1"] - res["t0"],
            "tool_tps_line": lines[0].tps if lines else None,
        }

    async def _watch_drain(self, addr: str, total: int, stop: threading.Event) -> dict[str, Any]:
        from rmq.client.api import MQClientAPI

        rc = bench_client()
        api = MQClientAPI(rc)
        try:

            async def count() -> int:
                return int((await api.get_broker_runtime_info(addr)).get("msgGetTotalTodayNow", "0"))

            g0 = await count()
            first: tuple[float, int] | None = None
            deadline = time.time() + self.a.drain_timeout
            v = g0
            while not stop.is_set() and time.time() < deadline:
                try:
                    v = await count()
                except MQBrokerError:  # see wait_slave
                    await asyncio.sleep(0.05)
                    continue
                now = time.time()
                if first is None and v > g0:
                    first = (now, v)
                if first is not None and v - g0 >= total:
                    return {"t0": first[0], "v0": first[1], "t1": now, "v1": v}
                await asyncio.sleep(0.05)
            got = (v - g0) if first is not None else 0
            return {"error": f"drain incomplete: the broker delivered {got} of {total} messages"}
        finally:
            await rc.close()

    # ------------------------------------------------------------------ a phase
    def phase(self, name: str, rows: list[Row]) -> None:
        a = self.a
        ph = PHASES[name]
        conf = broker_conf(ph)
        self.confs[name] = conf
        out(
            f"\n=== {name}: RocketMQ 4.9.8 and rmq, each NameServer + master{' + slave' if ph.slave else ''}; "
            f"broker.conf: " + ", ".join(f"{k}={v}" for k, v in conf.items())
        )
        with contextlib.ExitStack() as stack:
            clusters: dict[str, Cluster] = {}
            for impl in IMPLS:
                c = Cluster(
                    self.root / name.lower() / impl,
                    ph.flush,
                    impl=impl,
                    fixed_ports=True,
                    conf=conf,
                    slave=ph.slave,
                    java_heap=a.java_heap,
                )
                stack.callback(c.stop, True)
                t0 = time.time()
                c.start()
                create_topic(c, a.topic, a.size)
                synced = f", slave {c.slave_addr} in sync after {wait_slave(c):.1f} s" if ph.slave else ""
                out(
                    f"    {NAMES[impl]:>8}: NameServer {c.namesrv_addr}, master {c.broker_addr} (pid {c.broker_pid})"
                    f"{synced}; up in {time.time() - t0:.1f} s"
                )
                clusters[impl] = c
            prod = [r for r in rows if r.threads != 0]
            for impl, c in clusters.items():  # warm-up: the brokers' JIT, page cache, first CommitLog file
                w = self.java_point(c, impl, prod[-1] if prod else ROW_BY_KEY["async16"], a.warmup_seconds, False)
                out(f"    {NAMES[impl]:>8} warm-up: {fmt(w.get('tps'))} TPS{' ' + w['error'] if 'error' in w else ''}")
            for k in range(1, a.rounds + 1):
                order = list(IMPLS) if k % 2 else list(reversed(IMPLS))
                for r in prod:
                    for impl in order:
                        slot = self.results.setdefault(r.key, {}).setdefault(impl, {"rounds": []})
                        if k == 1 and a.p99_seconds > 0:
                            out(f"  [{row_label(r, a)} | {NAMES[impl]}] p99 run (rmq lean sender):")
                            slot["p99"] = self.p99_point(clusters[impl], r)
                            # what this broker takes now bounds the first point's length (the
                            # Java tool sends up to ~2x the lean sender's rate)
                            lean = 1.5 * slot["p99"]["tps"]
                            if lean == lean and (impl, r.key) not in self.est:
                                self.est[(impl, r.key)] = min(r.prior_tps, max(lean, 100.0))
                        p = self.java_point(clusters[impl], impl, r, a.point_seconds)
                        slot["rounds"].append(p)
                        self._say(k, r, impl, p)
                if any(r.threads == 0 for r in rows):
                    for impl in order:
                        slot = self.results.setdefault("drain", {}).setdefault(impl, {"rounds": []})
                        d = self.drain(clusters[impl], impl, k)
                        slot["rounds"].append(d)
                        self._say(k, ROW_BY_KEY["drain"], impl, d)

    def _say(self, k: int, r: Row, impl: str, p: dict[str, Any]) -> None:
        head = f"  round {k} {row_label(r, self.a):<34} {NAMES[impl]:>8}:"
        if "error" in p:
            out(f"{head} FAILED: {p['error']}")
        elif r.threads == 0:
            out(
                f"{head} {p['tps']:>9,.0f} msgs/s ({p['backlog']:,} msgs in {p['drain_s']:.2f} s"
                + (f"; topped up {p['topped_up']:,}" if p["topped_up"] else "")
                + (f"; tool's TPS line {p['tool_tps_line']:,}" if p["tool_tps_line"] is not None else "")
                + ")"
            )
        else:
            out(
                f"{head} {p['tps']:>9,} TPS, avg RT {p['avg_rt_ms']:.3f} ms, max RT {p['max_rt_ms']} ms, "
                f"failed {p['send_failed']}+{p['response_failed']}, broker CPU {p['broker_cpu_pct']:.0f} %"
                + (f" (loop waiting for a CPU {p['loop_wait_pct']:.0f} %)" if p["loop_wait_pct"] is not None else "")
                + f", load {p['load1']:.1f}, {p['q']:,} msgs in {p['seconds']:.1f} s"
            )

    # ------------------------------------------------------------------ summary
    def summary(self) -> dict[str, Any]:
        rows: dict[str, Any] = {}
        for key, per in self.results.items():
            s: dict[str, Any] = {}
            for impl, d in per.items():
                ok = [p for p in d["rounds"] if "error" not in p]
                s[impl] = {
                    "tps": median([p["tps"] for p in ok]),
                    "avg_rt_ms": median([p.get("avg_rt_ms", float("nan")) for p in ok]),
                    "max_rt_ms": median([p.get("max_rt_ms", float("nan")) for p in ok]),
                    "p99_ms": d.get("p99", {}).get("p99_ms", float("nan")),
                    "rounds": d["rounds"],
                    "p99_run": d.get("p99"),
                }
            if "rmq" in s and "rocketmq" in s:
                s["ratio"] = s["rmq"]["tps"] / s["rocketmq"]["tps"] if s["rocketmq"]["tps"] else float("nan")
            rows[key] = s
        sm: dict[str, float] = {}
        if "sync_master" in rows and "async_master" in rows:
            for impl in IMPLS:
                num, den = rows["sync_master"][impl]["tps"], rows["async_master"][impl]["tps"]
                sm[impl] = num / den if den else float("nan")
        return {"rows": rows, "sync_master_vs_async_master": sm}

    def report(self, summ: dict[str, Any]) -> None:
        a = self.a
        rows = summ["rows"]
        out(
            f"\nmedians of {a.rounds} round(s); TPS, avg/max RT = RocketMQ's benchmark Producer "
            f"(drain: benchmark Consumer, msgs/s delivered); p99 = rmq's lean sender, first round"
        )
        header = [
            "row",
            "RocketMQ TPS",
            "rmq TPS",
            "rmq/RocketMQ",
            "RocketMQ avg/max RT ms",
            "rmq avg/max RT ms",
            "p99 ms RocketMQ/rmq",
        ]
        lines = []
        for r in ROWS:
            if r.key not in rows:
                continue
            s = rows[r.key]
            x, y = s.get("rocketmq", {}), s.get("rmq", {})

            def rt(d: dict[str, Any]) -> str:
                return f"{fmt(d.get('avg_rt_ms'), '.3f')} / {fmt(d.get('max_rt_ms'), '.0f')}"

            p99 = f"{fmt(x.get('p99_ms'), '.2f')} / {fmt(y.get('p99_ms'), '.2f')}"
            lines.append(
                [
                    row_label(r, a),
                    fmt(x.get("tps")),
                    fmt(y.get("tps")),
                    fmt(s.get("ratio"), ".2f"),
                    "-" if r.threads == 0 else rt(x),
                    "-" if r.threads == 0 else rt(y),
                    "-" if r.threads == 0 else p99,
                ]
            )
        width = max(len(x[0]) for x in lines)
        table([header[0].ljust(width), *header[1:]], [[ln[0].ljust(width)] + ln[1:] for ln in lines])
        sm = summ["sync_master_vs_async_master"]
        if sm:
            out(
                "\nSYNC_MASTER / ASYNC_MASTER TPS: "
                + ", ".join(f"{NAMES[i]} {fmt(sm.get(i), '.2f')}" for i in IMPLS)
                + " (goal for rmq: >= 0.8)"
            )
        if a.rounds > 1:
            out("\nTPS per round (the spread is the machine's noise):")
            per = []
            for r in ROWS:
                for impl in IMPLS:
                    d = rows.get(r.key, {}).get(impl)
                    if d is None:
                        continue
                    per.append(
                        [f"{row_label(r, a)} {NAMES[impl]}"]
                        + [fmt(p.get("tps")) if "error" not in p else "FAILED" for p in d["rounds"]]
                    )
            width = max(len(p[0]) for p in per)
            table(
                ["row".ljust(width)] + [f"r{k}" for k in range(1, a.rounds + 1)],
                [[p[0].ljust(width)] + p[1:] for p in per],
            )


# =================================================================================== main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", default="all", help="comma list of " + ",".join(r.key for r in ROWS) + " (default all)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row, the brokers alternating (default 3)")
    ap.add_argument("--point-seconds", type=float, default=5.0, help="target length of a producer point (default 5)")
    ap.add_argument("--warmup-seconds", type=float, default=3.0, help="unmeasured point per cluster (default 3)")
    ap.add_argument("--p99-seconds", type=float, default=1.5, help="lean-sender p99 window, 0 = none (default 1.5)")
    ap.add_argument("--ha-threads", type=int, default=64, help="senders of the SYNC/ASYNC_MASTER rows (default 64)")
    ap.add_argument("--drain-backlog", type=int, default=500_000, help="messages per drain (default 500000)")
    ap.add_argument("--drain-timeout", type=float, default=120.0)
    ap.add_argument("--java-heap", default="1g", help="RocketMQ JVMs' -Xmx (default 1g)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round, 3 s points, 100k drain")
    add_run_args(ap)
    ap.set_defaults(topic="VsBench4q")
    a = ap.parse_args(argv)
    if a.quick:  # shorter defaults; values given on the command line win
        quick = {"rounds": 1, "point_seconds": 3.0, "warmup_seconds": 2.0, "p99_seconds": 1.0, "drain_backlog": 100_000}
        for k, v in quick.items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
    keys = [r.key for r in ROWS] if a.rows == "all" else [x.strip() for x in a.rows.split(",") if x.strip()]
    for x in keys:
        if x not in ROW_BY_KEY:
            ap.error(f"--rows: unknown row {x} (one of {', '.join(ROW_BY_KEY)})")
    a.rows = keys
    a.report_interval = 1e9  # the lean sender's Java-style lines: only its [Complete] line
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    load0 = loadavg()
    out(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load0} (shared machine); "
        f"rows {','.join(a.rows)}; {a.rounds} round(s); body {a.size} B, {QUEUES}-queue topic {a.topic}; "
        f"~{a.point_seconds:g} s per producer point" + ("; QUICK" if a.quick else "")
    )
    with bench_session(a, "rmq-vs-rocketmq-") as (b, root), ProducerTool(root / "producer-tool") as tool:
        vs = VsBench(a, b, root, tool)
        wanted = [ROW_BY_KEY[k] for k in a.rows]
        for name in PHASES:
            rows = [r for r in ROWS if r.phase == name and r in wanted]
            if rows:
                vs.phase(name, rows)
        summ = vs.summary()
        vs.report(summ)
        out(f"\nload average before {load0}, after {loadavg()} (other work on the machine shares its CPUs)")
    if a.json:
        j = {
            "config": {k: v for k, v in vars(a).items()},
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": [load0, loadavg()]},
            "broker_conf": vs.confs,
            **summ,
        }
        sys.stdout.write(json.dumps(_clean(j), separators=(",", ":"), default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
