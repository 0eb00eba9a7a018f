"""A small launcher for the benchmarks: a real NameServer and broker as subprocesses.

    with Cluster(workdir, "ASYNC_FLUSH") as c:
        c.namesrv_addr, c.broker_addr, c.broker_pid
        c.cpu.seconds(t0, t1)          # broker CPU seconds between two wall-clock times

Both processes run ``python -m rmq.cli ...`` with this interpreter (the broker under
uvloop, as ``rmq broker`` does by default), on ephemeral ports, with their logs and the
store under ``workdir``. A process that is not ready in time, or dies, raises with the
tail of its log. ``stop()`` sends SIGTERM (clean shutdown), SIGKILL after a grace time.

``stats=True`` or ``profile=True`` start the broker through this file instead
(``python bench/_cluster.py inproc-broker ...``): the same ``Broker`` object on uvloop
that ``rmq broker`` runs, in its own process, plus window signals: SIGUSR1 snapshots the
store counters (and switches cProfile on), SIGUSR2 writes the counters' deltas to
``window-<n>.json`` (and the profile to ``profile-<n>.pstats``), so only chosen windows
are measured. Only the event-loop thread is profiled (the flush threads are not). The
profiler's clock is wall time by default (cheap); ``profile_clock="cpu"`` uses that
thread's CPU time (exact under preemption, but a syscall per profiler event).

``impl="rocketmq"`` starts Apache RocketMQ 4.9.8 from ``../shared/rocketmq-4.9.8`` instead
(``bin/rocketmq namesrv -c`` / ``bin/rocketmq broker -c``, see its README) with the same
broker.conf keys; ``fixed_ports=True`` (implied for RocketMQ) picks free ports below 32768
and writes them into the files (``listenPort``, ``namesrvAddr``, a slave's
``haMasterAddress``), so both implementations get the same file with only ports and paths
differing.

``CpuSampler`` reads ``/proc/<pid>/stat`` (utime + stime, all threads) and
``/proc/<pid>/task/<pid>/stat`` (the main = event-loop thread) every 50 ms in a thread, so
CPU over any window can be interpolated afterwards.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rmq.child_process import ChildProcess

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 60.0
# Apache RocketMQ 4.9.8, runnable (its README): the reference the vs-RocketMQ bench measures against
ROCKETMQ_DIR = Path(os.environ.get("RMQ_BENCH_ROCKETMQ_DIR", str(ROOT.parent / "shared" / "rocketmq-4.9.8")))
ROCKETMQ_BIN = ROCKETMQ_DIR / "bin" / "rocketmq"
IMPLS = ("rmq", "rocketmq")
CLK_TCK = os.sysconf("SC_CLK_TCK")
_LEN = struct.Struct(">i")


# ------------------------------------------------------------------------------- CPU
def proc_cpu(pid: int, tid: int | None = None) -> float:
    """utime + stime in seconds of a process (or of one of its threads)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path, "rb") as f:
        data = f.read()
    # the command name may hold spaces and parentheses: split after the last ')'
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def schedstat(path: str = "/proc/thread-self/schedstat") -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for a CPU) of a task, from
    schedstat: a CPU-bound task that other processes keep off the CPU shows up as wait."""
    with open(path) as f:
        run, wait, _ = f.read().split()
    return int(run) / 1e9, int(wait) / 1e9


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name (threads of one name summed)."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            cpu = proc_cpu(pid, int(tid))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if int(tid) == pid:
            name = "main"
        out[name] = out.get(name, 0.0) + cpu
    return out


class Sampler:
    """Samples ``fn()`` (a tuple of cumulative counters) every ``period`` s in a thread,
    with the wall time; ``delta(i, t0, t1)`` interpolates counter ``i`` between two times."""

    def __init__(self, fn: Callable[[], tuple[float, ...]], period: float = 0.05, name: str = "sampler") -> None:
        self.fn = fn
        self.period = period
        self.t: list[float] = []
        self.v: list[tuple[float, ...]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Sampler:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._sample()

    def _sample(self) -> None:
        try:
            v = self.fn()
        except (OSError, ValueError):
            return  # the process is gone
        with self._lock:
            self.t.append(time.time())
            self.v.append(v)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def value(self, i: int, when: float) -> float:
        with self._lock:
            t = list(self.t)
            v = [x[i] for x in self.v]
        if not t:
            return float("nan")
        k = bisect.bisect_left(t, when)
        if k <= 0:
            return v[0]
        if k >= len(t):
            return v[-1]
        t0, t1 = t[k - 1], t[k]
        return v[k - 1] + (v[k] - v[k - 1]) * (when - t0) / max(t1 - t0, 1e-9)

    def delta(self, i: int, t0: float, t1: float) -> float:
        return self.value(i, t1) - self.value(i, t0)


class CpuSampler(Sampler):
    """CPU seconds of one process: counter 0 = all threads, 1 = the main (event-loop)
    thread, 2 = seconds the main thread was runnable but waiting for a CPU."""

    def __init__(self, pid: int, period: float = 0.05) -> None:
        path = f"/proc/{pid}/task/{pid}/schedstat"
        super().__init__(lambda: (proc_cpu(pid), proc_cpu(pid, pid), schedstat(path)[1]), period, f"cpu-{pid}")
        self.pid = pid

    def wait_percent(self, t0: float, t1: float) -> float:
        return 100.0 * self.delta(2, t0, t1) / max(t1 - t0, 1e-9)

    def seconds(self, t0: float, t1: float, main_only: bool = False) -> float:
        return self.delta(1 if main_only else 0, t0, t1)

    def percent(self, t0: float, t1: float, main_only: bool = False) -> float:
        return 100.0 * self.seconds(t0, t1, main_only) / max(t1 - t0, 1e-9)


class MachineSampler(Sampler):
    """The whole machine: counters busy, total (CPU seconds over all CPUs) and steal."""

    def __init__(self, period: float = 0.1) -> None:
        super().__init__(lambda: (*machine_busy_seconds(), steal_seconds()), period, "cpu-machine")

    def busy_percent(self, t0: float, t1: float) -> float:
        """Busy share of all CPUs (100 = every CPU busy)."""
        tot = self.delta(1, t0, t1)
        return 100.0 * self.delta(0, t0, t1) / tot if tot > 0 else float("nan")

    def steal_percent(self, t0: float, t1: float) -> float:
        tot = self.delta(1, t0, t1)
        return 100.0 * self.delta(2, t0, t1) / tot if tot > 0 else float("nan")


def all_processes_cpu() -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds) for every process on the machine."""
    out: dict[int, tuple[str, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        name = data[data.index(b"(") + 1 : data.rindex(b")")].decode(errors="replace")
        fields = data[data.rindex(b")") + 2 :].split()
        out[int(d)] = (name, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


def top_consumers(
    a: dict[int, tuple[str, float]], b: dict[int, tuple[str, float]], seconds: float, n: int = 6
) -> list[tuple[int, str, float]]:
    """The ``n`` processes that used the most CPU between two ``all_processes_cpu`` calls,
    as (pid, name, % of one CPU)."""
    rows = []
    for pid, (name, cpu) in b.items():
        before = a.get(pid, (name, 0.0))[1]
        rows.append((pid, name, 100.0 * (cpu - before) / max(seconds, 1e-9)))
    rows.sort(key=lambda r: -r[2])
    return rows[:n]


def steal_seconds() -> float:
    """Machine-wide CPU time stolen by the hypervisor (noise indicator)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    total = sum(fields[:8])
    idle = fields[3] + fields[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


# ------------------------------------------------------------------------------- raw client
class RawClient(asyncio.Protocol):
    """Length-prefixed request/response on one connection, answers in FIFO order;
    requests written in one loop iteration go out in one writelines (as rmq coalesces)."""

    def __init__(self) -> None:
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.buf = bytearray()
        self.out: list[bytes] = []
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def send(self, frame: bytes) -> asyncio.Future[None]:
        if not self.out:
            self.loop.call_soon(self.flush)
        self.out.append(frame)
        fut = self.loop.create_future()
        self.waiters.append(fut)
        return fut

    def flush(self) -> None:
        out, self.out = self.out, []
        self.transport.writelines(out)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (length,) = _LEN.unpack_from(buf, pos)
            if n - pos - 4 < length:
                break
            pos += 4 + length
            self.waiters.popleft().set_result(None)
        del buf[:pos]


# ------------------------------------------------------------------------------- ports
def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(lo: int = 20000, hi: int = 32000) -> int:
    """A port P below 32768 (the kernel hands 32768+ to client sockets) with P - 2, P and
    P + 1 free now: a broker's listenPort (RocketMQ also binds P - 2 for its VIP channel,
    both bind P + 1 for HA) or a NameServer's."""
    for _ in range(1000):
        p = random.randrange(lo + 2, hi)
        if all(_port_free(x) for x in (p - 2, p, p + 1)):
            return p
    raise RuntimeError(f"no free port block in [{lo}, {hi})")


# ------------------------------------------------------------------------------- processes
BROKER_BOOTED = r"The broker\[[^,]+, ([\d.]+:\d+)\] boot success"


class Proc(ChildProcess):
    """A benchmark child: this checkout first on its import path."""

    def __init__(
        self, name: str, argv: list[str], workdir: Path, ready: str, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(
            name,
            argv,
            workdir,
            ready,
            env={
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **(env or {}),
            },
        )

    def start(self, timeout: float = READY_TIMEOUT) -> Proc:
        super().start(timeout)
        return self


class Cluster:
    """One NameServer + one master broker (``flush`` = ASYNC_FLUSH / SYNC_FLUSH), and with
    ``slave=True`` its slave (brokerId 1, ``slave_conf`` on top; ``start_slave`` /
    ``stop_slave`` also work on their own). ``conf={"brokerRole": "SYNC_MASTER"}`` makes
    the master a SYNC_MASTER. ``impl="rocketmq"``: the same processes of RocketMQ 4.9.8
    (JVM heap ``java_heap``, logs under each process's directory); ``fixed_ports``: see the
    module docstring."""

    def __init__(
        self,
        workdir: Path,
        flush: str,
        *,
        profile: bool = False,
        stats: bool = False,
        profile_clock: str = "wall",
        switch_interval: float | None = None,
        conf: dict[str, object] | None = None,
        slave: bool = False,
        slave_conf: dict[str, object] | None = None,
        impl: str = "rmq",
        fixed_ports: bool = False,
        java_heap: str = "1g",
    ) -> None:
        if impl not in IMPLS:
            raise ValueError(f"impl: one of {IMPLS}, not {impl!r}")
        self.impl = impl
        self.fixed_ports = fixed_ports or impl == "rocketmq"
        self.java_heap = java_heap
        self._ns_port: int | None = None
        self._listen_port: dict[str, int] = {}
        self.workdir = Path(workdir)
        self.flush = flush
        self.profile = profile
        self.profile_clock = profile_clock
        self.switch_interval = switch_interval
        # in-process launcher: window stats (and the profiler when asked)
        self.inproc = profile or stats or switch_interval is not None
        if self.inproc and impl != "rmq":
            raise ValueError("profile/stats/switch_interval: rmq brokers only")
        self.conf = conf or {}
        self.with_slave = slave
        self.slave_conf = slave_conf or {}
        self.namesrv: Proc | None = None
        self.broker: Proc | None = None
        self.slave: Proc | None = None
        self.cpu: CpuSampler | None = None
        self.slave_cpu: CpuSampler | None = None
        self._profile_n = 0

    # --------------------------------------------------------------- lifecycle
    def start(self) -> Cluster:
        """Everything started, or (on any error) everything stopped again."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        py = sys.executable
        nd = self.workdir / "namesrv"
        if self.fixed_ports:
            self._ns_port = free_port_block()
        if self.impl == "rocketmq":
            nd.mkdir(parents=True, exist_ok=True)
            (nd / "namesrv.conf").write_text(f"listenPort={self._ns_port}\n")
            argv = [str(ROCKETMQ_BIN), "namesrv", "-c", str(nd / "namesrv.conf")]
            self.namesrv = Proc("namesrv", argv, nd, r"The Name Server boot success", self._java_env(nd))
        else:
            argv = [py, "-m", "rmq.cli", "namesrv", "-p", str(self._ns_port or 0), "--host", "127.0.0.1"]
            argv += ["--kv-path", str(nd / "kv.msgpack")]
            self.namesrv = Proc("namesrv", argv, nd, r"NameServer listening on [\d.]+:(\d+)")
        self.namesrv.start()
        bd = self.workdir / "broker"
        conf_path = self._broker_conf(bd, {"brokerId": 0, "brokerRole": "ASYNC_MASTER", **self.conf})
        if self.inproc:
            argv = [
                py,
                str(Path(__file__).resolve()),
                "inproc-broker",
                "-c",
                str(conf_path),
                "-n",
                self.namesrv_addr,
                "--out",
                str(bd),
            ]
            if self.profile:
                argv += ["--profile", self.profile_clock]
            if self.switch_interval is not None:
                argv += ["--switch-interval", str(self.switch_interval)]
        else:
            argv = self._broker_argv(conf_path)
        self.broker = Proc("broker", argv, bd, BROKER_BOOTED, self._java_env(bd))
        self.broker.start()
        self.cpu = CpuSampler(self.broker.pid).start()
        if self.with_slave:
            self.start_slave()

    def start_slave(self) -> Proc:
        """The master's slave as ``rmq broker`` (same store settings, brokerId 1)."""
        self.stop_slave()
        sd = self.workdir / "slave"
        props: dict[str, object] = {**self.conf, "brokerRole": "SLAVE", "brokerId": 1}
        if self.fixed_ports:
            # the master's HA port: listenPort + 1, RocketMQ's and rmq's default haListenPort
            props["haMasterAddress"] = f"127.0.0.1:{self._listen_port['broker'] + 1}"
        conf_path = self._broker_conf(sd, {**props, **self.slave_conf})
        self.slave = Proc("slave", self._broker_argv(conf_path), sd, BROKER_BOOTED, self._java_env(sd))
        self.slave.start()
        self.slave_cpu = CpuSampler(self.slave.pid).start()
        return self.slave

    def _broker_conf(self, bd: Path, props: dict[str, object]) -> Path:
        """``bd``/broker.conf (``bd`` created): a broker of this cluster's group with its
        store under ``bd``, ``props`` on top."""
        bd.mkdir(parents=True, exist_ok=True)
        port = 0
        if self.fixed_ports:
            port = self._listen_port[bd.name] = free_port_block()
        conf: dict[str, object] = {
            "brokerClusterName": "BenchCluster",
            "brokerName": "broker-a",
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(bd / "store"),
            "flushDiskType": self.flush,
            **props,
        }
        conf_path = bd / "broker.conf"
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        return conf_path

    def _broker_argv(self, conf_path: Path) -> list[str]:
        if self.impl == "rocketmq":
            return [str(ROCKETMQ_BIN), "broker", "-c", str(conf_path)]
        return [sys.executable, "-m", "rmq.cli", "broker", "-c", str(conf_path), "-n", self.namesrv_addr]

    def _java_env(self, d: Path) -> dict[str, str] | None:
        """RocketMQ's JVMs: logs (and anything else under user.home) in ``d``, heap ``java_heap``."""
        if self.impl != "rocketmq":
            return None
        return {"ROCKETMQ_USER_HOME": str(d), "JAVA_HEAP": self.java_heap}

    def stop_slave(self, kill: bool = False) -> None:
        if self.slave_cpu is not None:
            self.slave_cpu.stop()
            self.slave_cpu = None
        if self.slave is not None:
            self.slave.kill() if kill else self.slave.stop()

    @property
    def slave_addr(self) -> str:
        assert self.slave is not None and self.slave.match is not None
        return self.slave.match.group(1)

    def stop(self, kill: bool = False) -> None:
        """SIGTERM each process (a clean shutdown), or with ``kill`` SIGKILL (faster: a bench
        that throws its stores away need not wait for RocketMQ's ~10 s shutdown)."""
        self.stop_slave(kill)
        if self.cpu is not None:
            self.cpu.stop()
        for p in (self.broker, self.namesrv):
            if p is not None:
                p.kill() if kill else p.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --------------------------------------------------------------- addresses
    @property
    def namesrv_addr(self) -> str:
        if self._ns_port is not None:
            return f"127.0.0.1:{self._ns_port}"
        assert self.namesrv is not None and self.namesrv.match is not None
        return f"127.0.0.1:{self.namesrv.match.group(1)}"

    @property
    def broker_addr(self) -> str:
        assert self.broker is not None and self.broker.match is not None
        return self.broker.match.group(1)

    @property
    def broker_pid(self) -> int:
        assert self.broker is not None
        return self.broker.pid

    def check_alive(self) -> None:
        for p in (self.namesrv, self.broker, self.slave):
            if p is not None and not p.alive():
                raise RuntimeError(f"{p.name} died:\n{p.tail()}")

    # --------------------------------------------------------------- windows
    def window_begin(self) -> None:
        """Start of a measured window: the in-process broker snapshots its store
        counters (and switches cProfile on)."""
        if self.inproc and self.broker is not None:
            self.broker.signal(signal.SIGUSR1)

    def window_end(self) -> tuple[Path | None, dict | None]:
        """End of the window: (pstats file or None, store counters over the window)."""
        if not self.inproc or self.broker is None:
            return None, None
        self._profile_n += 1
        d = self.workdir / "broker"
        n = self._profile_n
        self.broker.signal(signal.SIGUSR2)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if (d / f"window-{n}.json").exists():
                import json

                stats = json.loads((d / f"window-{n}.json").read_text())
                path = d / f"profile-{n}.pstats"
                return (path if path.exists() else None), stats
            time.sleep(0.05)
        return None, None


# ------------------------------------------------------------------------------- in-process broker
def _store_counters(broker) -> dict:  # type: ignore[no-untyped-def]
    st = broker.store
    out: dict[str, float] = {"put_msgs": broker.stats.put_msgs, "get_msgs": broker.stats.get_msgs}
    fs = getattr(getattr(st, "flush_service", None), "stats", None)
    if fs is not None:
        for k in ("fsyncs", "rounds", "waiters", "fsync_seconds", "timeouts"):
            v = getattr(fs, k, None)
            if isinstance(v, (int, float)):
                out[f"flush_{k}"] = v
    for k in ("max_phy_offset",):
        v = getattr(st, k, None)
        if isinstance(v, (int, float)):
            out[k] = v
    return out


def _inproc_broker(argv: list[str]) -> int:
    """What ``rmq broker`` runs (the same Broker object on uvloop), plus: SIGUSR1 starts a
    window (store counters snapshot; cProfile on with ``--profile``), SIGUSR2 ends it
    (``window-<n>.json`` with the counters' deltas; ``profile-<n>.pstats``)."""
    import argparse
    import asyncio
    import cProfile
    import json
    import logging

    sys.path.insert(0, str(ROOT))
    from rmq.broker.broker import Broker
    from rmq.broker.config import load_broker_config

    ap = argparse.ArgumentParser(prog="_cluster.py inproc-broker")
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("-n", "--namesrv", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--profile",
        choices=["cpu", "wall"],
        default=None,
        help="cProfile clock: cpu = the loop thread's CPU time "
        "(time.thread_time, immune to preemption), wall = perf_counter",
    )
    ap.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval for the broker (an experiment: how long a "
        "thread coming back from fdatasync may wait for the GIL)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    loaded = load_broker_config(args.config, args.namesrv, {})
    broker = Broker(loaded.broker, loaded.store)
    state: dict[str, object] = {"prof": None, "n": 0, "c0": None, "t0": 0.0}
    outdir = Path(args.out)

    def begin() -> None:
        state["c0"] = _store_counters(broker)
        state["t0"] = time.time()
        if args.profile and state["prof"] is None:
            timer = time.thread_time if args.profile == "cpu" else time.perf_counter
            p = cProfile.Profile(timer)
            state["prof"] = p
            p.enable()

    def end() -> None:
        n = int(state["n"]) + 1  # type: ignore[call-overload]
        state["n"] = n
        p = state["prof"]
        if p is not None:
            p.disable()  # type: ignore[attr-defined]
            p.dump_stats(str(outdir / f"profile-{n}.pstats"))  # type: ignore[attr-defined]
            state["prof"] = None
        c0 = state["c0"] or {}
        c1 = _store_counters(broker)
        delta = {k: v - c0.get(k, 0) for k, v in c1.items()}  # type: ignore[union-attr]
        delta["seconds"] = time.time() - float(state["t0"])  # type: ignore[arg-type]
        tmp = outdir / f"window-{n}.json.tmp"
        tmp.write_text(json.dumps(delta))
        tmp.rename(outdir / f"window-{n}.json")

    async def run() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, begin)
        loop.add_signal_handler(signal.SIGUSR2, end)
        await broker.start()
        await stop.wait()
        await asyncio.wait_for(broker.shutdown(), 10)
        return 0

    import uvloop

    return uvloop.run(run())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "inproc-broker":
        sys.exit(_inproc_broker(sys.argv[2:]))
    print(__doc__)
