"""`rmq dev` / `make run`: a local cluster under one data directory with a live status line.

Starts a NameServer (9876), a master broker (10911, HA port 10912) and its slave
(10921), broker group broker-a, as child processes, with their logs and stores under
the data directory (``<data>/broker-a``, ``<data>/broker-a-s``), and prints one status
line a second (TPS in/out, messages stored, dispatch lag) from the master's
GET_BROKER_RUNTIME_INFO plus the replication lag (master CommitLog end minus the
slave's ack) from GET_BROKER_HA_STATUS. Ctrl-C (or SIGTERM) stops the slave, the
master, then the NameServer, each cleanly.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.errors import ProtocolError
from rmq.protocol.route import KVTable, loads_fastjson
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError

NAMESRV_PORT = 9876
BROKER_PORT = 10911
SLAVE_PORT = 10921

BROKER_CONF = """\
# rmq dev {what} (RocketMQ key names). Edit and restart `make run` to change it.
brokerClusterName=DevCluster
brokerName=broker-a
brokerId={broker_id}
brokerRole={role}
flushDiskType=ASYNC_FLUSH
brokerIP1=127.0.0.1
listenPort={port}
storePathRootDir={store}
autoCreateTopicEnable=true
mappedFileSizeCommitLog=134217728
"""


class Child:
    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        self._fh = open(log, "ab")
        # the log is appended to across runs: look for readiness in this run's part only
        self._start = self._fh.tell()
        # Own session: Ctrl-C reaches only `rmq dev`, which stops children in order.
        self.proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", *args],
                                     stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with open(self.log, "rb") as f:
                f.seek(self._start)
                if text in f.read().decode(errors="replace"):
                    return True
            time.sleep(0.1)
        return False

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()
        return self.proc.returncode

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


async def _request(client: RemotingClient, addr: str, code: int) -> bytes | None:
    try:
        resp = await client.invoke(addr, RemotingCommand(code), 2.0)
    except (RemotingError, OSError):
        return None
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    return resp.body


async def _runtime_info(client: RemotingClient, addr: str) -> dict[str, str] | None:
    body = await _request(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return KVTable.from_json(body).table if body is not None else None


async def _replication(client: RemotingClient, addr: str) -> str:
    """'repl lag N B' (master end minus the slowest slave's ack), or why not."""
    body = await _request(client, addr, RequestCode.GET_BROKER_HA_STATUS)
    if body is None:
        return "repl ?"
    try:
        info = loads_fastjson(body)
        conns = info.get("haConnectionInfo") or []
        if not conns:
            return "no slave"
        return f"repl lag {max(int(c.get('diff') or 0) for c in conns):,} B"
    except (ProtocolError, AttributeError, TypeError, ValueError):
        return "repl ?"


async def _status(broker_addr: str, stop: asyncio.Event) -> None:
    client = RemotingClient()
    try:
        while not stop.is_set():
            info = await _runtime_info(client, broker_addr)
            if info is None:
                line = "broker not answering"
            else:
                stored = int(info.get("commitLogMaxOffset", 0))
                line = (f"TPS in {float(info.get('putTps', 0)):7.0f} | out "
                        f"{float(info.get('getFoundTps', 0)):7.0f} | put "
                        f"{info.get('msgPutTotalTodayNow', '0'):>8} | CommitLog {stored / 1e6:8.1f} MB"
                        f" | dispatch lag {info.get('dispatchBehindBytes', '0')} B | "
                        f"{await _replication(client, broker_addr)}")
            sys.stdout.write("\r" + line.ljust(120))
            sys.stdout.flush()
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
    finally:
        await client.close()


def run_dev(data: str) -> int:
    root = Path(data).resolve()
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "broker-a.conf"
    if not conf.exists():
        conf.write_text(BROKER_CONF.format(what="broker", broker_id=0, role="ASYNC_MASTER",
                                           port=BROKER_PORT, store=root / "broker-a" / "store"))
    slave_conf = root / "broker-a-s.conf"
    if not slave_conf.exists():
        slave_conf.write_text(BROKER_CONF.format(what="slave of broker-a", broker_id=1,
                                                 role="SLAVE", port=SLAVE_PORT,
                                                 store=root / "broker-a-s" / "store"))
    ns = Child("namesrv", ["namesrv", "-p", str(NAMESRV_PORT), "--host", "127.0.0.1",
                           "--kv-path", str(root / "namesrv" / "kvConfig.msgpack")],
               root / "namesrv.log")
    if not ns.wait_for("NameServer listening", 15):
        print(f"rmq dev: the NameServer did not start (port {NAMESRV_PORT} in use?):\n{ns.tail()}",
              file=sys.stderr)
        ns.stop()
        return 1
    broker = Child("broker", ["broker", "-c", str(conf), "-n", f"127.0.0.1:{NAMESRV_PORT}"],
                   root / "broker-a.log")
    if not broker.wait_for("boot success", 60):
        print(f"rmq dev: the broker did not start:\n{broker.tail()}", file=sys.stderr)
        broker.stop()
        ns.stop()
        return 1
    slave = Child("slave", ["broker", "-c", str(slave_conf), "-n", f"127.0.0.1:{NAMESRV_PORT}"],
                  root / "broker-a-s.log")
    if not slave.wait_for("boot success", 60):
        print(f"rmq dev: the slave did not start:\n{slave.tail()}", file=sys.stderr)
        slave.stop()
        broker.stop()
        ns.stop()
        return 1
    print(f"rmq dev: NameServer 127.0.0.1:{NAMESRV_PORT}, broker-a master 127.0.0.1:{BROKER_PORT} "
          f"+ slave 127.0.0.1:{SLAVE_PORT} (DevCluster); data and logs under {root}; "
          f"Ctrl-C stops them", flush=True)
    print(f"  try: rmq produce -n 127.0.0.1:{NAMESRV_PORT} -t DevTopic -n 1000   /   "
          f"rmq consume -n 127.0.0.1:{NAMESRV_PORT} -t DevTopic -g DevGroup", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        status = asyncio.create_task(_status(f"127.0.0.1:{BROKER_PORT}", stop))
        while not stop.is_set():
            if any(c.proc.poll() is not None for c in (broker, slave, ns)):
                print("\nrmq dev: a child process exited unexpectedly", file=sys.stderr)
                stop.set()
                break
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except asyncio.TimeoutError:
                pass
        await status

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    print("\nrmq dev: stopping the slave ...", flush=True)
    rc_s = slave.stop()
    print("rmq dev: stopping the master ...", flush=True)
    rc_b = broker.stop()
    print("rmq dev: stopping the NameServer ...", flush=True)
    rc_n = ns.stop()
    clean = all(not (root / d / "store" / "abort").exists() for d in ("broker-a", "broker-a-s"))
    print(f"rmq dev: stopped (slave exit {rc_s}, master exit {rc_b}, NameServer exit {rc_n}, "
          f"stores {'closed cleanly' if clean else 'NOT closed cleanly: abort file left'})")
    return 0 if rc_s == 0 and rc_b == 0 and rc_n == 0 and clean else 1
