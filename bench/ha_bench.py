"""HA benchmark: SYNC_MASTER vs ASYNC_MASTER producing, and a slave's catch-up.

Run from the repository root::

    .venv/bin/python bench/ha_bench.py                      # ~2-3 min
    .venv/bin/python bench/ha_bench.py --quick              # smoke run
    .venv/bin/python bench/ha_bench.py --json               # + one JSON object on the last line
    .venv/bin/python bench/ha_bench.py --catchup-mb 1000 --run catchup

What runs (every broker is a real ``rmq broker`` process, ephemeral ports, stores in a
temp directory removed afterwards unless ``--keep``):

1. **produce** -- per ``--modes`` (ASYNC_MASTER, SYNC_MASTER), ``--rounds`` (2) times with
   the modes alternating (a noisy neighbour then hits both), a fresh NameServer + master
   + slave; ``--threads`` (64) synchronous senders in one child process, the lean sender of
   ``bench/e2e_bench.py`` (the Java Producer tool's SEND_MESSAGE_V2 stream, 1 KiB bodies,
   WAIT=true), ``--warmup`` then ``--duration`` seconds measured. Only SUCCESS counts as
   sent (a SYNC_MASTER answering SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT is a failure
   here). Beside TPS and latency: the replication lag (master CommitLog end minus the
   slave's ack, GET_BROKER_HA_STATUS polled every 0.1 s), the slave's dispatch lag, and
   the CPU of master and slave.
2. **catch-up** -- an ASYNC_MASTER with a slave; the slave is stopped, ``--catchup-mb``
   MB are put (SEND_BATCH_MESSAGE). Then the machine's own limit, measured right there
   (same memory and page-cache state): one child process sends the same number of bytes
   over a loopback TCP socket (``sendall`` of 1 MiB) to another that ``recv_into``s a
   4 MiB buffer; and the same with the receiver also ``pwrite``-ing every byte into a
   fresh preallocated file (all a slave must do at the least); MB/s from the receiver's
   first to last byte. Then the slave is started again: the rate at which it appends the
   master's bytes (from its first received byte until its CommitLog reached the master's
   end, as the slave logs it), the time from process spawn, the slave's dispatch lag at
   that moment and how long its ConsumeQueues took to be complete, and the ratios to
   the limits. (On a VM, pages the kernel has not used for a while can cost a
   hypervisor fault on first touch; measuring the limit next to the catch-up keeps the
   comparison fair.)

Goals (reported, not gates): SYNC_MASTER TPS >= 0.8 x ASYNC_MASTER (medians of the rounds;
the master's CPU per message is printed beside it: on a machine where the three
processes and other tenants share two CPUs, TPS also depends on who got the CPUs);
catch-up >= 300 MB/s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _cluster import Cluster  # noqa: E402
from e2e_bench import (  # noqa: E402
    Bench,
    BrokerPoller,
    DispatchLagSampler,
    add_run_args,
    bench_session,
    fill_backlog,
    out,
    prime_queues,
    print_profiles,
    send_step,
    uvrun,
)

from rmq.protocol.codes import RequestCode, ResponseCode  # noqa: E402
from rmq.protocol.frame import RemotingCommand  # noqa: E402
from tests.harness import wait_for  # noqa: E402

MB = 1e6
GOAL_SYNC_RATIO = 0.8
GOAL_CATCHUP_MB_S = 300.0


# ============================================================================ the limit
def _blast_receiver(port_q: Any, result_q: Any, path: str | None, nbytes: int) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    buf = bytearray(4 << 20)
    mv = memoryview(buf)
    fd = None
    if path is not None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, nbytes)
    total = 0
    t0 = 0.0
    while True:
        n = conn.recv_into(mv)
        if not n:
            break
        if not total:
            t0 = time.perf_counter()
        if fd is not None:
            os.pwrite(fd, mv[:n], total)
        total += n
    secs = time.perf_counter() - t0
    if fd is not None:
        os.close(fd)
        os.unlink(path)  # type: ignore[arg-type]
    result_q.put((total, secs))


def _blast_sender(port: int, nbytes: int) -> None:
    data = os.urandom(1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as s:
        left = nbytes
        while left > 0:
            s.sendall(data if left >= len(data) else data[:left])
            left -= len(data)


def loopback_limit(nbytes: int, path: str | None) -> float:
    """MB/s of nbytes sent over loopback between two fresh processes (receiver writing
    them to a fresh file at `path` when given)."""
    ctx = mp.get_context("spawn")
    pq, rq = ctx.Queue(), ctx.Queue()
    recv = ctx.Process(target=_blast_receiver, args=(pq, rq, path, nbytes), daemon=True)
    recv.start()
    port = pq.get(timeout=30)
    send = ctx.Process(target=_blast_sender, args=(port, nbytes), daemon=True)
    send.start()
    total, secs = rq.get(timeout=300)
    send.join(30)
    recv.join(30)
    return total / secs / MB


# ============================================================================ sampling
class HALagSampler(BrokerPoller):
    """Polls GET_BROKER_HA_STATUS of the master (replication lag = CommitLog end minus
    the slave's ack) and of the slave (its dispatch lag) every `period` s in a thread."""

    def __init__(self, master: str, slave: str, period: float = 0.1) -> None:
        super().__init__(period, "ha-lag")
        self.master, self.slave = master, slave
        self.samples: list[tuple[float, int, int]] = []  # (time, repl lag, slave dispatch lag)

    async def sample(self, rc: Any) -> None:
        m = await ha_status(rc, self.master)
        s = await ha_status(rc, self.slave)
        conns = m.get("haConnectionInfo") or []
        lag = max((c["diff"] for c in conns), default=-1)
        self.samples.append((time.time(), lag, s.get("dispatchBehindBytes", 0)))

    def window(self, t0: float, t1: float) -> dict[str, float]:
        rows = [r for r in self.samples if t0 <= r[0] <= t1]
        if not rows:
            return {}
        lags = [r[1] for r in rows]
        disp = [r[2] for r in rows]
        return {
            "repl_lag_max_kb": max(lags) / 1e3,
            "repl_lag_mean_kb": sum(lags) / len(lags) / 1e3,
            "no_slave_samples": sum(1 for x in lags if x < 0),
            "slave_dispatch_lag_max_kb": max(disp) / 1e3,
            "slave_dispatch_lag_mean_kb": sum(disp) / len(disp) / 1e3,
        }


async def ha_status(rc: Any, addr: str) -> dict[str, Any]:
    resp = await rc.invoke(addr, RemotingCommand(RequestCode.GET_BROKER_HA_STATUS), 3.0)
    if resp.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"GET_BROKER_HA_STATUS of {addr}: {resp.code} {resp.remark}")
    return json.loads(resp.body)


def status(addr: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        from rmq.remoting.client import RemotingClient

        rc = RemotingClient()
        try:
            return await ha_status(rc, addr)
        finally:
            await rc.close()

    return uvrun(go())


def in_sync(c: Cluster) -> bool:
    m, s = status(c.broker_addr), status(c.slave_addr)
    acks = [x["slaveAckOffset"] for x in m.get("haConnectionInfo") or []]
    return acks == [m["commitLogMaxOffset"]] and s["commitLogMaxOffset"] == m["commitLogMaxOffset"]


# ============================================================================ steps
def produce_mode(b: Bench, mode: str, root: Path) -> dict[str, Any]:
    a = b.args
    out(
        f"\n=== {mode}: NameServer + master + slave ({a.flush}), {a.threads} senders, "
        f"{a.warmup:g} s warm-up + {a.duration:g} s"
    )
    with Cluster(
        root / mode.lower(),
        a.flush,
        conf={"brokerRole": mode},
        slave=True,
        profile=a.profile_broker,
        profile_clock=a.profile_clock,
    ) as c:
        b.cluster = c
        try:
            wait_for(lambda: in_sync(c), 60, "the slave never connected")
            out(f"    master {c.broker_addr} (pid {c.broker_pid}), slave {c.slave_addr} (pid {c.slave.pid})")  # type: ignore[union-attr]
            b.lag = DispatchLagSampler(c.broker_addr).start()
            n, secs = prime_queues(c.namesrv_addr, a.topic, a.size)
            if n:
                out(f"    primed {n} empty queues with one message each: {secs:.2f} s")
            ha = HALagSampler(c.broker_addr, c.slave_addr).start()
            try:
                t_begin = time.time()
                r = send_step(b, "lean", a.threads, 1, a.warmup, a.duration, ok_codes=[ResponseCode.SUCCESS])
                # send_step's window: it starts warmup after its children's t_begin
                t1 = time.time()
                t0 = t1 - a.duration - 1.0
                r.update(ha.window(max(t0, t_begin), t1))
                assert c.slave_cpu is not None
                r["slave_cpu_pct"] = c.slave_cpu.percent(t0, t1)
            finally:
                ha.stop()
                b.lag.stop()
                b.lag = None
            wait_for(lambda: in_sync(c), 60, "the slave did not catch up after the run")
            out(
                f"    replication lag max {r.get('repl_lag_max_kb', float('nan')):,.0f} KB, mean "
                f"{r.get('repl_lag_mean_kb', float('nan')):,.1f} KB; slave dispatch lag max "
                f"{r.get('slave_dispatch_lag_max_kb', float('nan')):,.0f} KB; slave CPU "
                f"{r['slave_cpu_pct']:.0f} %"
            )
            return r
        finally:
            b.cluster = None


def catchup(b: Bench, root: Path) -> dict[str, Any]:
    a = b.args
    out(f"\n=== catch-up: ASYNC_MASTER, {a.catchup_mb} MB put while the slave is down")
    with Cluster(root / "catchup", a.flush, conf={"brokerRole": "ASYNC_MASTER"}, slave=True) as c:
        wait_for(lambda: in_sync(c), 60, "the slave never connected")
        c.stop_slave()
        before = status(c.broker_addr)["commitLogMaxOffset"]
        record = 1200  # a 1 KiB message's CommitLog record, about
        n = int(a.catchup_mb * MB / record)
        put, secs = fill_backlog(c.namesrv_addr, a.topic, n, a.size)
        top = status(c.broker_addr)["commitLogMaxOffset"]
        gap = top - before
        out(f"    put {put:,} messages ({gap / MB:,.0f} MB of CommitLog) in {secs:.1f} s")
        limits = {
            "loopback_mb_per_s": loopback_limit(gap, None),
            "loopback_pwrite_mb_per_s": loopback_limit(gap, str(root / "blast.tmp")),
        }
        out(
            f"    limit: the same {gap / MB:,.0f} MB over loopback TCP between two processes "
            f"{limits['loopback_mb_per_s']:,.0f} MB/s; receiver also pwrite-ing to a fresh "
            f"file {limits['loopback_pwrite_mb_per_s']:,.0f} MB/s"
        )
        t_spawn = time.time()
        c.start_slave()
        wait_for(lambda: status(c.slave_addr)["commitLogMaxOffset"] >= top, 600, "the slave never caught up")
        t_caught = time.time()
        s = status(c.slave_addr)
        cu = s["haClientRuntimeInfo"].get("lastCatchUp") or {}
        lag_at = s["dispatchBehindBytes"]
        wait_for(lambda: status(c.slave_addr)["dispatchBehindBytes"] == 0, 600, "the slave's dispatch never finished")
        t_disp = time.time()
        assert c.slave_cpu is not None
        r = {
            "mb": gap / MB,
            "append_mb_per_s": cu["bytes"] / (cu["micros"] / 1e6) / MB,
            "append_s": cu["micros"] / 1e6,
            "since_handshake_s": cu["microsSinceAccept"] / 1e6,
            "from_spawn_s": t_caught - t_spawn,
            "dispatch_lag_at_catchup_mb": lag_at / MB,
            "dispatch_done_after_s": t_disp - t_caught,
            "slave_cpu_pct": c.slave_cpu.percent(t_spawn, t_caught),
        }
        r.update(limits)
        r["vs_loopback"] = r["append_mb_per_s"] / limits["loopback_mb_per_s"]
        r["vs_loopback_pwrite"] = r["append_mb_per_s"] / limits["loopback_pwrite_mb_per_s"]
        out(
            f"    slave appended {cu['bytes'] / MB:,.0f} MB in {r['append_s']:.2f} s = "
            f"{r['append_mb_per_s']:,.0f} MB/s ({r['from_spawn_s']:.2f} s from process spawn); "
            f"dispatch {lag_at / MB:,.0f} MB behind then, done {r['dispatch_done_after_s']:.2f} s "
            f"later; slave CPU {r['slave_cpu_pct']:.0f} %"
        )
        return r


# ============================================================================ report
def report(res: dict[str, Any]) -> None:
    out("\n" + "=" * 100)
    runs = res.get("produce") or []
    if runs:
        out(
            f"\nproduce, {res['config']['threads']} synchronous senders (lean), "
            f"{res['config']['flush']}, modes alternating:"
        )
        out(
            f"{'mode':<14}{'#':>2}{'TPS':>9}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'fail':>6}"
            f"{'repl lag max/mean KB':>22}{'slave disp KB':>15}{'master CPU%':>12}"
            f"{'+wait%':>7}{'us/msg':>8}{'slave CPU%':>11}{'others%':>9}"
        )
        for r in runs:
            out(
                f"{r['mode']:<14}{r['round']:>2}{r['tps']:>9,.0f}{r['p50_ms']:>8.2f}"
                f"{r['p99_ms']:>8.2f}{r['max_ms']:>8.1f}{r['send_failed'] + r['response_failed']:>6}"
                f"{r.get('repl_lag_max_kb', float('nan')):>12,.0f} /{r.get('repl_lag_mean_kb', float('nan')):>7,.1f}"
                f"{r.get('slave_dispatch_lag_max_kb', float('nan')):>15,.0f}"
                f"{r['broker_cpu_pct']:>12.0f}{r['broker_loop_wait_pct']:>7.0f}"
                f"{r['broker_us_per_msg']:>8.0f}{r['slave_cpu_pct']:>11.0f}"
                f"{r['others_cpu_pct']:>9.0f}"
            )
        by = {m: [r for r in runs if r["mode"] == m] for m in ("ASYNC_MASTER", "SYNC_MASTER")}
        if all(by.values()):
            tps = {m: statistics.median(r["tps"] for r in rs) for m, rs in by.items()}
            us = {m: statistics.median(r["broker_us_per_msg"] for r in rs) for m, rs in by.items()}
            ratio = tps["SYNC_MASTER"] / tps["ASYNC_MASTER"]
            res["sync_vs_async_tps"] = ratio
            res["sync_vs_async_cpu_capacity"] = us["ASYNC_MASTER"] / us["SYNC_MASTER"]
            out(
                f"SYNC_MASTER / ASYNC_MASTER TPS (medians) = {ratio:.2f} (goal >= "
                f"{GOAL_SYNC_RATIO}: {'met' if ratio >= GOAL_SYNC_RATIO else 'NOT met'}); "
                f"master CPU per message {us['SYNC_MASTER']:.0f} vs {us['ASYNC_MASTER']:.0f} us "
                f"(capacity ratio {res['sync_vs_async_cpu_capacity']:.2f})"
            )
    cu = res.get("catchup")
    if cu:
        out(
            f"\ncatch-up of {cu['mb']:,.0f} MB (limits measured next to it: loopback "
            f"{cu['loopback_mb_per_s']:,.0f} MB/s, loopback + pwrite to a fresh file "
            f"{cu['loopback_pwrite_mb_per_s']:,.0f} MB/s):"
        )
        out(
            f"{'append MB/s':>12}{'x loopback':>11}{'x lb+pwrite':>12}{'append s':>9}"
            f"{'from spawn s':>13}{'disp lag MB':>12}{'disp done +s':>13}{'slave CPU%':>11}"
        )
        out(
            f"{cu['append_mb_per_s']:>12,.0f}{cu['vs_loopback']:>11.2f}{cu['vs_loopback_pwrite']:>12.2f}"
            f"{cu['append_s']:>9.2f}{cu['from_spawn_s']:>13.2f}{cu['dispatch_lag_at_catchup_mb']:>12,.0f}"
            f"{cu['dispatch_done_after_s']:>13.2f}{cu['slave_cpu_pct']:>11.0f}"
        )
        out(
            f"catch-up goal >= {GOAL_CATCHUP_MB_S:.0f} MB/s: "
            f"{'met' if cu['append_mb_per_s'] >= GOAL_CATCHUP_MB_S else 'NOT met'}"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--modes", default="ASYNC_MASTER,SYNC_MASTER")
    ap.add_argument("--run", default="produce,catchup")
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    add_run_args(ap)
    ap.add_argument("--catchup-mb", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2, help="produce runs per mode, the modes alternating (default 2)")
    ap.add_argument("--quick", action="store_true", help="3 s points, 1 s warm-up, 100 MB catch-up")
    a = ap.parse_args(argv)
    if a.quick:
        a.warmup, a.duration, a.report_interval, a.catchup_mb, a.rounds = 1.0, 3.0, 1.0, 100, 1
    a.modes = [m.strip().upper() for m in a.modes.split(",") if m.strip()]
    a.run = [r.strip() for r in a.run.split(",") if r.strip()]
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs; {','.join(a.run)}; "
        f"modes {','.join(a.modes)}; {a.threads} senders; body {a.size} B; catch-up "
        f"{a.catchup_mb} MB" + ("; QUICK" if a.quick else "")
    )
    res: dict[str, Any] = {"config": {k: v for k, v in vars(a).items()}}
    with bench_session(a, "rmq-ha-bench-") as (b, root):
        if "produce" in a.run:
            # alternating modes, so that a noisy neighbour does not hit one mode only
            res["produce"] = []
            for k in range(1, a.rounds + 1):
                for m in a.modes:
                    r = produce_mode(b, m, root / f"r{k}")
                    res["produce"].append({"mode": m, "round": k, **r})
        if "catchup" in a.run:
            res["catchup"] = catchup(b, root)
        report(res)
        if b.profiles:
            print_profiles(b.profiles, 30)
    if a.json:
        sys.stdout.write(json.dumps(res, default=str, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
