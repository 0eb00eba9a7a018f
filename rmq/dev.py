"""`rmq dev` / `make run`: a local cluster under one data directory with a live status line.

Starts a NameServer (9876), a master broker (10911, HA port 10912) and its slave
(10921), broker group broker-a, and a proxy for RocketMQ 5.x clients (gRPC 8081), as child
processes, with their logs and stores under
the data directory (``<data>/broker-a``, ``<data>/broker-a-s``), and prints one status
line a second (TPS in/out, messages stored, dispatch lag) from the master's
GET_BROKER_RUNTIME_INFO plus the replication lag (master CommitLog end minus the
slave's ack) from GET_BROKER_HA_STATUS. Ctrl-C (or SIGTERM) stops the proxy, the slave,
the master, then the NameServer, each cleanly.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from rmq.child_process import ChildProcess
from rmq.protocol.bodies import KVTable, loads_fastjson
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError

NAMESRV_PORT = 9876
BROKER_PORT = 10911
SLAVE_PORT = 10921
PROXY_PORT = 8081

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


def _child(name: str, args: list[str], root: Path, ready: str, log_name: str) -> ChildProcess:
    # Own session (ChildProcess): Ctrl-C reaches only `rmq dev`, which stops children in
    # order. One log per child across runs, under the data directory.
    c = ChildProcess(log_name, [sys.executable, "-m", "rmq.cli", *args], root, ready, append_log=True)
    c.name = name
    return c


def _start(c: ChildProcess, timeout: float, hint: str = "") -> bool:
    try:
        c.start(timeout)
        return True
    except RuntimeError as e:
        print(f"rmq dev: the {c.name} did not start{hint}: {e}", file=sys.stderr)
        return False


async def _request(client: RemotingClient, addr: str, code: int) -> bytes | None:
    try:
        resp = await client.invoke(addr, RemotingCommand(code), 2.0)
    except (RemotingError, OSError):
        return None
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    return resp.body


async def _runtime_info(client: RemotingClient, addr: str) -> KVTable | None:
    body = await _request(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return KVTable.from_json(body) if body is not None else None


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
            kv = await _runtime_info(client, broker_addr)
            if kv is None:
                line = "broker not answering"
            else:
                info = kv.table
                stored = int(info.get("commitLogMaxOffset", 0))
                line = (
                    f"TPS in {kv.first_figure('putTps'):7.0f} | out "
                    f"{kv.first_figure('getTransferedTps'):7.0f} | put "
                    f"{info.get('msgPutTotalTodayNow', '0'):>8} | CommitLog {stored / 1e6:8.1f} MB"
                    f" | dispatch lag {info.get('dispatchBehindBytes', '0')} B | "
                    f"{await _replication(client, broker_addr)}"
                )
            sys.stdout.write("\r" + line.ljust(120))
            sys.stdout.flush()
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass
    finally:
        await client.close()


def run_dev(data: str) -> int:
    root = Path(data).resolve()
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "broker-a.conf"
    if not conf.exists():
        conf.write_text(
            BROKER_CONF.format(
                what="broker", broker_id=0, role="ASYNC_MASTER", port=BROKER_PORT, store=root / "broker-a" / "store"
            )
        )
    slave_conf = root / "broker-a-s.conf"
    if not slave_conf.exists():
        slave_conf.write_text(
            BROKER_CONF.format(
                what="slave of broker-a",
                broker_id=1,
                role="SLAVE",
                port=SLAVE_PORT,
                store=root / "broker-a-s" / "store",
            )
        )
    ns = _child(
        "NameServer",
        [
            "namesrv",
            "-p",
            str(NAMESRV_PORT),
            "--host",
            "127.0.0.1",
            "--kv-path",
            str(root / "namesrv" / "kvConfig.msgpack"),
        ],
        root,
        "NameServer listening",
        "namesrv",
    )
    if not _start(ns, 15, f" (port {NAMESRV_PORT} in use?)"):
        return 1
    broker = _child(
        "broker", ["broker", "-c", str(conf), "-n", f"127.0.0.1:{NAMESRV_PORT}"], root, "boot success", "broker-a"
    )
    if not _start(broker, 60):
        ns.stop()
        return 1
    slave = _child(
        "slave",
        ["broker", "-c", str(slave_conf), "-n", f"127.0.0.1:{NAMESRV_PORT}"],
        root,
        "boot success",
        "broker-a-s",
    )
    if not _start(slave, 60):
        broker.stop()
        ns.stop()
        return 1
    proxy = _child(
        "proxy",
        ["proxy", "-n", f"127.0.0.1:{NAMESRV_PORT}", "-p", str(PROXY_PORT), "-D", "bindAddress=127.0.0.1"],
        root,
        "rmq proxy listening",
        "proxy",
    )
    if not _start(proxy, 30, f" (port {PROXY_PORT} in use?)"):
        slave.stop()
        broker.stop()
        ns.stop()
        return 1
    print(
        f"rmq dev: NameServer 127.0.0.1:{NAMESRV_PORT}, broker-a master 127.0.0.1:{BROKER_PORT} "
        f"+ slave 127.0.0.1:{SLAVE_PORT} (DevCluster); data and logs under {root}; "
        f"Ctrl-C stops them",
        flush=True,
    )
    print(f"rmq dev: proxy for RocketMQ 5.x clients (gRPC) at 127.0.0.1:{PROXY_PORT}", flush=True)
    print(
        f"  try: rmq produce -a 127.0.0.1:{NAMESRV_PORT} -t DevTopic -n 1000   /   "
        f"rmq consume -a 127.0.0.1:{NAMESRV_PORT} -t DevTopic -g DevGroup",
        flush=True,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        status = asyncio.create_task(_status(f"127.0.0.1:{BROKER_PORT}", stop))
        while not stop.is_set():
            if not all(c.alive() for c in (proxy, broker, slave, ns)):
                print("\nrmq dev: a child process exited unexpectedly", file=sys.stderr)
                stop.set()
                break
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except TimeoutError:
                pass
        await status

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    print("\nrmq dev: stopping the proxy ...", flush=True)
    rc_p = proxy.stop()
    print("rmq dev: stopping the slave ...", flush=True)
    rc_s = slave.stop()
    print("rmq dev: stopping the master ...", flush=True)
    rc_b = broker.stop()
    print("rmq dev: stopping the NameServer ...", flush=True)
    rc_n = ns.stop()
    clean = all(not (root / d / "store" / "abort").exists() for d in ("broker-a", "broker-a-s"))
    print(
        f"rmq dev: stopped (proxy exit {rc_p}, slave exit {rc_s}, master exit {rc_b}, NameServer exit {rc_n}, "
        f"stores {'closed cleanly' if clean else 'NOT closed cleanly: abort file left'})"
    )
    return 0 if rc_p == 0 and rc_s == 0 and rc_b == 0 and rc_n == 0 and clean else 1
