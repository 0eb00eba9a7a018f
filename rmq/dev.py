"""`rmq dev` / `make run`: a local cluster under one data directory with a live status line.

Starts a NameServer (9876) and a broker (10911) as child processes, with their logs and
stores under the data directory, and prints one status line a second (TPS in/out,
messages stored, dispatch lag) from the broker's GET_BROKER_RUNTIME_INFO. Ctrl-C (or
SIGTERM) stops the broker, then the NameServer, each cleanly.
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
from rmq.protocol.route import KVTable
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError

NAMESRV_PORT = 9876
BROKER_PORT = 10911

BROKER_CONF = """\
# rmq dev broker (RocketMQ key names). Edit and restart `make run` to change it.
brokerClusterName=DevCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
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
        # Own session: Ctrl-C reaches only `rmq dev`, which stops children in order.
        self.proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", *args],
                                     stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if text in self.log.read_text(errors="replace"):
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


async def _runtime_info(client: RemotingClient, addr: str) -> dict[str, str] | None:
    try:
        resp = await client.invoke(addr, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO), 2.0)
    except (RemotingError, OSError):
        return None
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    return KVTable.from_json(resp.body).table


async def _status(broker_addr: str, stop: asyncio.Event) -> None:
    client = RemotingClient()
    try:
        while not stop.is_set():
            info = await _runtime_info(client, broker_addr)
            if info is None:
                line = "broker not answering"
            else:
                stored = int(info.get("commitLogMaxOffset", 0))
                line = (f"TPS in {float(info.get('putTps', 0)):8.0f} | out "
                        f"{float(info.get('getFoundTps', 0)):8.0f} | put since start "
                        f"{info.get('msgPutTotalTodayNow', '0'):>9} | CommitLog {stored / 1e6:9.1f} MB"
                        f" | dispatch lag {info.get('dispatchBehindBytes', '0')} B")
            sys.stdout.write("\r" + line.ljust(110))
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
        conf.write_text(BROKER_CONF.format(port=BROKER_PORT, store=root / "broker-a" / "store"))
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
    print(f"rmq dev: NameServer 127.0.0.1:{NAMESRV_PORT}, broker broker-a 127.0.0.1:{BROKER_PORT} "
          f"(DevCluster); data and logs under {root}; Ctrl-C stops both", flush=True)
    print(f"  try: rmq produce -n 127.0.0.1:{NAMESRV_PORT} -t DevTopic -n 1000   /   "
          f"rmq consume -n 127.0.0.1:{NAMESRV_PORT} -t DevTopic -g DevGroup", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        status = asyncio.create_task(_status(f"127.0.0.1:{BROKER_PORT}", stop))
        while not stop.is_set():
            if broker.proc.poll() is not None or ns.proc.poll() is not None:
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
    print("\nrmq dev: stopping the broker ...", flush=True)
    rc_b = broker.stop()
    print("rmq dev: stopping the NameServer ...", flush=True)
    rc_n = ns.stop()
    clean = not (root / "broker-a" / "store" / "abort").exists()
    print(f"rmq dev: stopped (broker exit {rc_b}, NameServer exit {rc_n}, "
          f"store {'closed cleanly' if clean else 'NOT closed cleanly: abort file left'})")
    return 0 if rc_b == 0 and rc_n == 0 and clean else 1
