"""Restart after SIGKILL: how soon a broker serves again, for stores of 1, 4 and 8 GiB.

    python bench/recovery_bench.py                          # 1, 4, 8 GiB; RocketMQ 4.9.8 beside
    python bench/recovery_bench.py --sizes 1,2 --no-rocketmq
    python bench/recovery_bench.py --before-src /tmp/rmq-old   # + an older rmq checkout, same store
    python bench/recovery_bench.py --dir /tmp/rb --keep --json

What one run does (one store directory, grown from size to size):

1. The store is grown to the next size (--sizes, GiB of CommitLog) in a child process
   with the store's own writer (MessageStore.put_nowait, default configuration: 1 GiB
   CommitLog files, index on, ASYNC_FLUSH): topic BenchmarkTest, 4 queues, 1 KiB
   bodies with a UNIQ_KEY as the Java producer sends them. Clean shutdown.
2. A real `rmq broker` is started on it, takes --load-seconds of sends from --senders
   concurrent senders (1 KiB, the same topic) and is SIGKILLed with sends in flight.
3. It is started again and timed from the moment the process is spawned: until its
   port accepts a connection, until the first SEND_MESSAGE_V2 answers SUCCESS, until
   the first PULL_MESSAGE of queue 0 from offset 0 answers FOUND; the broker's CPU time
   (utime+stime) at that point; the recovery phases from its log line "store recovered
   ... consume queues / CommitLog scan / index". The goal: serving within 5 s.
   Unless --no-power-loss, it is loaded and SIGKILLed once more, its `abort` file is
   made to name another boot, and it is timed again: the path a restart after a power
   loss takes (only what the checkpoint proves synced is trusted).
4. Peers, on the same store, in the same run: RocketMQ 4.9.8's broker
   (../shared/rocketmq-4.9.8; unless --no-rocketmq or no java) restarted after the
   rmq broker is SIGKILLed mid-load again, timed the same way, then stopped with
   SIGTERM; with --before-src DIR, an older rmq checkout (e.g. `git worktree add
   /tmp/rmq-old <commit>`) goes through steps 2-3 itself (its own kill: its `abort`
   file names no boot) at --before-sizes. And the limit: the disk's sequential read
   speed (dd iflag=direct of one CommitLog file), i.e. what reading the whole store
   back would cost.

Everything is removed at the end unless --keep. MB = 10**6 bytes; GiB = 2**30.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _cluster import proc_cpu  # noqa: E402

from rmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode  # noqa: E402
from rmq.protocol.frame import RemotingCommand  # noqa: E402
from rmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader  # noqa: E402
from rmq.protocol.message import properties_to_string  # noqa: E402
from rmq.remoting.client import RemotingClient  # noqa: E402

GIB = 1 << 30
TOPIC = "BenchmarkTest"
QUEUES = 4
BODY = b"r" * 1024
ROCKETMQ = ROOT.parent / "shared" / "rocketmq-4.9.8" / "bin" / "rocketmq"
RECOVERED = re.compile(
    r"store recovered \((\w+)\) in (\d+) ms: consume queues (\d+) ms, CommitLog scan (\d+) ms "
    r"\((\d+) records checked, (\d+) re-dispatched\), index (\d+) ms; CommitLog ends at (\d+)"
)
GOAL_S = 5.0


# ----------------------------------------------------------------------------- the writer
def build(root: str, target: int) -> None:
    """Child process: grow the store at root to target bytes of CommitLog."""
    import uvloop

    from rmq.protocol.message import MessageExtBrokerInner
    from rmq.store.config import FlushDiskType, MessageStoreConfig
    from rmq.store.message_store import MessageStore

    async def run() -> None:
        st = MessageStore(MessageStoreConfig(storePathRootDir=root, flushDiskType=FlushDiskType.ASYNC_FLUSH))
        st.load()
        await st.start()
        t0 = time.perf_counter()
        start = st.commitlog.max_offset
        i = 0
        tag = os.urandom(4).hex().upper()
        while st.commitlog.max_offset < target:
            now = int(time.time() * 1000)
            for _ in range(256):
                props = {"UNIQ_KEY": f"7F000001{tag}{i:016X}", "WAIT": "true", "TAGS": "TagA"}
                st.put_nowait(
                    MessageExtBrokerInner(
                        topic=TOPIC, body=BODY, queue_id=i % QUEUES, properties=props, born_timestamp=now
                    )
                )
                i += 1
            await asyncio.sleep(0)
        await st.reput.wait_caught_up()
        took = time.perf_counter() - t0
        await st.shutdown()
        print(f"built: +{i} messages, {(st.commitlog.max_offset - start) / 1e6 / took:.0f} MB/s", flush=True)

    uvloop.run(run())


# ----------------------------------------------------------------------------- brokers
def free_port() -> int:
    """A port below 32768 (the kernel's client range starts there) with its -2 and +1
    free too (RocketMQ's fast and HA ports)."""
    import random

    for _ in range(200):
        p = random.randint(20000, 30000)
        ok = True
        for q in (p - 2, p, p + 1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
        if ok:
            return p
    raise RuntimeError("no free port")


@dataclass
class Broker:
    kind: str  # "rmq", "rmq-before", "rocketmq"
    root: Path
    workdir: Path
    src: Path = ROOT
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    spawned: float = 0.0

    def start(self) -> None:
        self.port = free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = {
            "brokerClusterName": "RecoveryBench",
            "brokerName": "broker-a",
            "brokerId": 0,
            "brokerIP1": "127.0.0.1",
            "listenPort": self.port,
            "storePathRootDir": str(self.root),
            "flushDiskType": "ASYNC_FLUSH",
            "autoCreateTopicEnable": "true",
        }
        env = dict(os.environ)
        if self.kind == "rocketmq":
            conf["storePathCommitLog"] = str(self.root / "commitlog")
            env.update(ROCKETMQ_USER_HOME=str(self.workdir), JAVA_HEAP="1g")
            argv = [str(ROCKETMQ), "broker", "-c", str(self.workdir / f"{self.kind}.conf")]
        else:
            env["PYTHONPATH"] = str(self.src)
            argv = [sys.executable, "-m", "rmq.cli", "broker", "-c", str(self.workdir / f"{self.kind}.conf")]
        (self.workdir / f"{self.kind}.conf").write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        n = 0
        while (self.workdir / f"{self.kind}.{n}.log").exists():
            n += 1
        self.log_path = self.workdir / f"{self.kind}.{n}.log"
        log = open(self.log_path, "wb")
        self.spawned = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(self.src), start_new_session=True
        )
        log.close()

    def log_text(self) -> str:
        assert self.log_path is not None
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 60) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def send_cmd(queue_id: int, n: int) -> RemotingCommand:
    props = properties_to_string({"UNIQ_KEY": f"0A000001{os.getpid():08X}{n:016X}", "WAIT": "true", "TAGS": "TagA"})
    h = SendMessageRequestHeader(
        "RecoveryBenchPG",
        TOPIC,
        "TBW102",
        QUEUES,
        queue_id,
        0,
        int(time.time() * 1000),
        0,
        props,
        0,
        False,
        False,
        None,
    )
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=h.to_v2_ext_fields(), body=BODY)


def pull_cmd(queue_id: int, offset: int) -> RemotingCommand:
    h = PullMessageRequestHeader(
        "RecoveryBenchCG", TOPIC, queue_id, offset, 1, PullSysFlag.SUBSCRIPTION, 0, 0, 0, "*", "TAG"
    )
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=h.to_ext_fields())


async def load_then_kill(br: Broker, seconds: float, senders: int) -> tuple[int, float]:
    """Sends from `senders` tasks for `seconds`, then SIGKILL with sends in flight.
    Returns (messages answered SEND_OK, their rate per second)."""
    client = RemotingClient()
    ok = 0
    stop = False

    async def sender(k: int) -> None:
        nonlocal ok
        n = k
        while not stop:
            try:
                r = await client.invoke(br.addr, send_cmd(n % QUEUES, n), 5.0)
            except Exception:
                return
            if r.code == ResponseCode.SUCCESS:
                ok += 1
            n += senders

    tasks = [asyncio.create_task(sender(k)) for k in range(senders)]
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    acked = ok
    rate = acked / (time.perf_counter() - t0)
    br.kill()
    stop = True
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.close()
    return acked, rate


async def wait_booted(br: Broker, timeout: float = 600) -> None:
    """Until the broker answers a request (a normal start; not timed)."""
    client = RemotingClient()
    try:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            assert br.proc is not None
            if br.proc.poll() is not None:
                raise RuntimeError(f"{br.kind} exited:\n{br.log_text()[-3000:]}")
            try:
                r = await client.invoke(br.addr, send_cmd(0, 0), 2.0)
                if r.code == ResponseCode.SUCCESS:
                    return
            except Exception:
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{br.kind} not serving within {timeout}s")
    finally:
        await client.close()


@dataclass
class Restart:
    size_gib: float
    broker: str
    commitlog_gib: float
    port_open_s: float = -1
    first_send_ok_s: float = -1
    first_pull_found_s: float = -1
    broker_cpu_s: float = -1
    broker_cpu_wait_s: float = -1  # runnable, waiting for a CPU (schedstat, all threads)
    load_avg: float = -1
    phases: dict[str, float] = field(default_factory=dict)
    acked_before_kill: int = 0
    load_rate: float = 0


def cpu_wait(pid: int) -> float:
    """Seconds the process's threads were runnable but not running (the machine is shared)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


async def first_success(
    client: RemotingClient, br: Broker, make: Callable[[], RemotingCommand], deadline: float
) -> float:
    """Send make()'s request until it answers SUCCESS (SEND_OK, PULL FOUND); when."""
    while True:
        try:
            resp = await client.invoke(br.addr, make(), 5.0)
            if resp.code == ResponseCode.SUCCESS:
                return time.perf_counter()
        except Exception:
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{br.kind}: no SUCCESS answer before the deadline")
        await asyncio.sleep(0.01)


async def timed_restart(br: Broker, r: Restart, timeout: float = 900) -> None:
    br.start()
    assert br.proc is not None
    t0 = br.spawned
    deadline = t0 + timeout
    while True:  # port open
        if br.proc.poll() is not None:
            raise RuntimeError(f"{br.kind} exited:\n{br.log_text()[-3000:]}")
        with socket.socket() as s:
            s.settimeout(0.2)
            try:
                s.connect(("127.0.0.1", br.port))
                r.port_open_s = time.perf_counter() - t0
                break
            except OSError:
                pass
        if time.perf_counter() > deadline:
            raise RuntimeError("port never opened")
        await asyncio.sleep(0.01)
    client = RemotingClient()
    try:
        sends = iter(range(1 << 62))
        r.first_send_ok_s = await first_success(client, br, lambda: send_cmd(0, next(sends)), deadline) - t0
        r.first_pull_found_s = await first_success(client, br, lambda: pull_cmd(0, 0), deadline) - t0
        r.broker_cpu_s = proc_cpu(br.proc.pid)
        r.broker_cpu_wait_s = cpu_wait(br.proc.pid)
        r.load_avg = os.getloadavg()[0]
    finally:
        await client.close()
    if br.kind != "rocketmq":
        m = RECOVERED.search(br.log_text())
        if m is not None:
            r.phases = {
                "recovery_ms": float(m.group(2)),
                "cq_ms": float(m.group(3)),
                "commitlog_scan_ms": float(m.group(4)),
                "records_checked": float(m.group(5)),
                "redispatched": float(m.group(6)),
                "index_ms": float(m.group(7)),
            }
            r.commitlog_gib = int(m.group(8)) / GIB
        else:
            m2 = re.findall(r"rebuilding the index from CommitLog offset (\d+) to (\d+)", br.log_text())
            if m2:
                r.phases = {"index_rebuilt_mb": (int(m2[-1][1]) - int(m2[-1][0])) / 1e6}


def disk_read_mb_s(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return path.stat().st_size / 1e6 / (time.perf_counter() - t0)


# ----------------------------------------------------------------------------- the run
async def run(args: argparse.Namespace, base: Path) -> dict[str, object]:
    root = base / "store"
    work = base / "work"
    rows: list[Restart] = []
    sizes = [float(x) for x in args.sizes.split(",")]
    before_sizes = {float(x) for x in args.before_sizes.split(",")} if args.before_src else set()
    use_rocketmq = args.rocketmq and shutil.which("java") is not None and ROCKETMQ.exists()
    disk = 0.0
    for size in sizes:
        t = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--_build", str(root), str(int(size * GIB))], check=True)
        print(f"[{size:g} GiB] store grown in {time.perf_counter() - t:.0f} s", flush=True)
        if not disk:
            disk = disk_read_mb_s(sorted((root / "commitlog").iterdir())[0])
        # rmq: a life under load, SIGKILL, timed restart
        br = Broker("rmq", root, work)
        br.start()
        await wait_booted(br)
        acked, rate = await load_then_kill(br, args.load_seconds, args.senders)
        r = Restart(size, "rmq (this checkout)", size, acked_before_kill=acked, load_rate=rate)
        await timed_restart(br, r)
        rows.append(r)
        print(f"[{size:g} GiB] {r}", flush=True)
        if args.power_loss:
            # the same broker killed again, its abort file made to name another boot:
            # recovery trusts only what the checkpoint says was synced (RocketMQ's way)
            acked, rate = await load_then_kill(br, args.load_seconds, args.senders)
            (root / "abort").write_bytes(b"00000000-0000-0000-0000-000000000000\n")
            r = Restart(size, "rmq, as after a power loss", size, acked_before_kill=acked, load_rate=rate)
            await timed_restart(br, r)
            rows.append(r)
            print(f"[{size:g} GiB] {r}", flush=True)
        if use_rocketmq:
            acked, rate = await load_then_kill(br, args.load_seconds, args.senders)
            j = Broker("rocketmq", root, work)
            r = Restart(size, "RocketMQ 4.9.8", rows[-1].commitlog_gib, acked_before_kill=acked, load_rate=rate)
            await timed_restart(j, r)
            j.stop()
            rows.append(r)
            print(f"[{size:g} GiB] {r}", flush=True)
        else:
            br.stop()
        if size in before_sizes:
            old = Broker("rmq-before", root, work, src=Path(args.before_src))
            old.start()
            await wait_booted(old)
            acked, rate = await load_then_kill(old, args.load_seconds, args.senders)
            r = Restart(size, "rmq (--before-src)", rows[-1].commitlog_gib, acked_before_kill=acked, load_rate=rate)
            await timed_restart(old, r)
            old.stop()
            rows.append(r)
            print(f"[{size:g} GiB] {r}", flush=True)
    return {"disk_read_mb_s": disk, "rows": [asdict(r) for r in rows]}


def table(res: dict[str, object]) -> str:
    disk = float(res["disk_read_mb_s"])  # type: ignore[arg-type]
    out = [
        f"disk sequential read (dd iflag=direct, one CommitLog file): {disk:.0f} MB/s; goal: serving within {GOAL_S:g} s of the restart",
        "",
        "| CommitLog | broker | port open s | 1st SEND_OK s | 1st PULL found s | broker CPU s (waiting for a CPU s; load avg) | "
        "recovery ms (CQ / CommitLog scan / index) | records checked / re-dispatched | reading the store at disk speed s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:  # type: ignore[attr-defined]
        ph = r["phases"]
        if "recovery_ms" in ph:
            rec = f"{ph['recovery_ms']:.0f} ({ph['cq_ms']:.0f} / {ph['commitlog_scan_ms']:.0f} / {ph['index_ms']:.0f})"
            cnt = f"{ph['records_checked']:.0f} / {ph['redispatched']:.0f}"
        elif "index_rebuilt_mb" in ph:
            rec, cnt = f"index rebuilt over {ph['index_rebuilt_mb']:.0f} MB", ""
        else:
            rec, cnt = "", ""
        verdict = "" if r["first_pull_found_s"] <= GOAL_S else " (over goal)"
        out.append(
            f"| {r['commitlog_gib']:.2f} GiB | {r['broker']} | {r['port_open_s']:.2f} | {r['first_send_ok_s']:.2f} | "
            f"{r['first_pull_found_s']:.2f}{verdict} | {r['broker_cpu_s']:.2f} ({r['broker_cpu_wait_s']:.2f}; "
            f"{r['load_avg']:.1f}) | {rec} | {cnt} | "
            f"{r['commitlog_gib'] * GIB / 1e6 / disk:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--_build":
        build(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4,8", help="GiB of CommitLog, ascending (default 1,4,8)")
    ap.add_argument("--dir", help="where the store goes (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the store")
    ap.add_argument("--load-seconds", type=float, default=3.0, help="sends before each SIGKILL (default 3)")
    ap.add_argument("--senders", type=int, default=32)
    ap.add_argument("--no-rocketmq", dest="rocketmq", action="store_false", help="skip the RocketMQ 4.9.8 peer")
    ap.add_argument(
        "--no-power-loss",
        dest="power_loss",
        action="store_false",
        help="skip the restart whose abort file names another boot (the path a power loss takes)",
    )
    ap.add_argument("--before-src", help="an older rmq checkout to time the same way")
    ap.add_argument("--before-sizes", default="1", help="sizes at which --before-src runs (default 1)")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON on the last line")
    args = ap.parse_args()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="recovery-bench-", dir="/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        res = asyncio.run(run(args, base))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print()
    print(table(res))
    print(f"\n(run took {time.perf_counter() - t0:.0f} s)")
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
