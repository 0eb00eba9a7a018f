"""Helpers for the partition tests (test_partitions.py): a controller-mode broker group
whose processes run in the namespaces of a NetRig (tests/cluster/netns.py), the
controller's view of the group, and a raw send loop that records every answer with
the time it was asked and answered (time.monotonic(), one clock for every process of
the machine, whatever namespace it runs in).

The send loop also runs as a process of its own, inside a namespace next to a broker:

    python -m tests.cluster.partition_util ADDR TOPIC OUT [--senders N] [--pace-ms MS]

appends one line per answer to OUT (``Send.line``) until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import GroupStatus, decode_group_statuses
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError
from tests.cluster.failover_util import controller_conf, store_host
from tests.cluster.ha_util import GROUP, ha_status
from tests.cluster.netns import Host
from tests.harness import BrokerProcess, NameServerProcess, RmqProcess, broker_process, namesrv_process
from tests.integration.broker_util import BrokerApi, props, uniq_key, wait_until

REPO = Path(__file__).resolve().parents[2]
SEND_TIMEOUT = 5.0  # above slaveTimeout (3 s): a SYNC_MASTER's FLUSH_SLAVE_TIMEOUT is an answer
NO_ANSWER = -1  # Send.code of a send that raised (timeout, connection lost)


# ----------------------------------------------------------------------------- processes
class Cluster:
    """The rmq processes of one test, each in a rig host; ``stop_all`` (run by
    ``cluster()`` however the test ends) stops them, the newest first."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[RmqProcess] = []
        self.ns_addr = ""

    def namesrv(self, host: Host, master_timeout_ms: int) -> NameServerProcess:
        """A NameServer running the controller, listening on ``host``'s address."""
        p = namesrv_process(
            self.workdir, "--host", host.ip, "--controller", "--controller-master-timeout-ms", str(master_timeout_ms)
        )
        self._start(p, host)
        self.ns_addr = f"{host.ip}:{p.port}"
        return p

    def broker(self, host: Host, name: str, role: str, broker_id: int, **extra: object) -> BrokerProcess:
        """A broker of group broker-a in controller mode, announcing ``host``'s address."""
        conf = controller_conf(role, broker_id, brokerIP1=host.ip, **extra)
        p = broker_process(self.workdir / name, self.ns_addr, GROUP, conf)
        self._start(p, host)
        return p

    def _start(self, p: RmqProcess, host: Host) -> None:
        p.prefix = host.exec_prefix
        self.procs.append(p)
        p.start()

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            p.stop(timeout=5.0)


@contextlib.contextmanager
def cluster(workdir: Path) -> Iterator[Cluster]:
    c = Cluster(workdir)
    try:
        yield c
    finally:
        c.stop_all()


# ----------------------------------------------------------------------------- controller
async def group_status(client: RemotingClient, ns_addr: str, timeout: float = 2.0) -> GroupStatus:
    """The controller's view of broker-a (CONTROLLER_GET_SYNC_STATE_DATA)."""
    cmd = RemotingCommand(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, ext_fields={"brokerName": GROUP})
    r = await client.invoke(ns_addr, cmd, timeout)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    [g] = decode_group_statuses(r.body)
    return g


@dataclass
class Election:
    """When the controller's epoch moved past ``epoch``: after ``after`` (the last poll
    that still showed the old epoch was sent then: the decision came later) and before
    ``seen`` (the answer that showed the new one arrived then)."""

    after: float
    seen: float
    status: GroupStatus


async def watch_election(ns_addr: str, epoch: int, timeout: float = 30.0, interval: float = 0.02) -> Election:
    """Poll the controller until broker-a's epoch is above ``epoch``."""
    client = RemotingClient()
    try:
        deadline = time.monotonic() + timeout
        after = time.monotonic()
        while True:
            sent = time.monotonic()
            g = await group_status(client, ns_addr)
            if g.epoch > epoch:
                return Election(after, time.monotonic(), g)
            after = sent
            assert time.monotonic() < deadline, f"no election past epoch {epoch} in {timeout}s: {g}"
            await asyncio.sleep(interval)
    finally:
        await client.close()


async def wait_in_sync_set(ns_addr: str, slave_addr: str, timeout: float = 30.0) -> GroupStatus:
    """Until the controller records ``slave_addr`` in broker-a's in-sync set (only then
    may it be elected)."""
    client = RemotingClient()
    try:
        deadline = time.monotonic() + timeout
        while True:
            g = await group_status(client, ns_addr)
            if any(m.addr == slave_addr and m.in_sync and m.alive for m in g.members):
                return g
            assert time.monotonic() < deadline, f"{slave_addr} never in the in-sync set: {g}"
            await asyncio.sleep(0.05)
    finally:
        await client.close()


async def wait_same_end(x_addr: str, y_addr: str, timeout: float = 30.0) -> None:
    """Until two brokers (a master and its slave, no writes going on) have the same
    CommitLog end and have both dispatched it."""

    async def same() -> bool:
        x, y = await ha_status(x_addr), await ha_status(y_addr)
        ends = x["commitLogMaxOffset"] == y["commitLogMaxOffset"]
        return ends and x["dispatchBehindBytes"] == 0 and y["dispatchBehindBytes"] == 0

    await wait_until(same, timeout, f"{x_addr} and {y_addr} never reached the same end", 0.05)


# ----------------------------------------------------------------------------- sends
@dataclass(frozen=True)
class Send:
    """One send: asked at ``t0``, answered (or given up) at ``t1`` with ``code``
    (NO_ANSWER if it raised); ``msg_id`` is the broker's offsetMsgId when stored."""

    t0: float
    t1: float
    code: int
    key: str
    msg_id: str

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS

    @property
    def host(self) -> str:
        """ip:port of the broker that stored it (from the offsetMsgId)."""
        return store_host(self.msg_id) if self.msg_id else ""

    @property
    def phy_offset(self) -> int:
        return int(self.msg_id[16:], 16) if self.msg_id else -1

    def line(self) -> str:
        return f"{self.t0:.6f} {self.t1:.6f} {self.code} {self.key} {self.msg_id or '-'}\n"

    @classmethod
    def parse(cls, line: str) -> Send:
        t0, t1, code, key, msg_id = line.split()
        return cls(float(t0), float(t1), int(code), key, "" if msg_id == "-" else msg_id)


def read_sends(path: Path) -> list[Send]:
    """The complete lines of a send log (a process killed mid-line leaves a partial one)."""
    text = path.read_text() if path.exists() else ""
    return [Send.parse(ln) for ln in text.splitlines(keepends=True) if ln.endswith("\n")]


def answer_counts(sends: list[Send]) -> dict[str, int]:
    """How many sends got each answer (response code names; "NO_ANSWER")."""
    out: dict[str, int] = {}
    for s in sends:
        name = "NO_ANSWER" if s.code == NO_ANSWER else ResponseCode.name_of(s.code)
        out[name] = out.get(name, 0) + 1
    return out


@dataclass
class SendStats:
    sends: list[Send] = field(default_factory=list)

    def codes(self) -> dict[str, int]:
        return answer_counts(self.sends)

    def ok(self) -> list[Send]:
        return [s for s in self.sends if s.ok]


async def send_loop(
    addr: str,
    topic: str,
    record: Callable[[Send], None],
    stop: asyncio.Event,
    *,
    senders: int = 4,
    pace: float = 0.005,
    queues: int = 4,
    body_size: int = 512,
) -> None:
    """``senders`` coroutines send to ``addr`` one message at a time each (each with a
    new UNIQ_KEY, waiting ``pace`` after each answer) until ``stop``; every answer,
    or failure to get one, goes to ``record``."""
    body = b"p" * body_size
    client = RemotingClient()

    async def one(k: int) -> None:
        api = BrokerApi(addr, client=client)
        i = 0
        while not stop.is_set():
            key = uniq_key()
            t0 = time.monotonic()
            try:
                r = await api.send(
                    topic,
                    body,
                    queue_id=(k + i) % queues,
                    properties=props(uniq=key, wait="true"),
                    timeout=SEND_TIMEOUT,
                )
                code, msg_id = r.code, (r.ext_fields or {}).get("msgId", "")
            except (RemotingError, OSError, TimeoutError):
                code, msg_id = NO_ANSWER, ""
            t1 = time.monotonic()
            record(Send(t0, t1, code, key, msg_id))
            i += 1
            if code == NO_ANSWER:
                await asyncio.sleep(0.05)
            elif pace:
                await asyncio.sleep(pace)

    try:
        await asyncio.gather(*(one(k) for k in range(senders)))
    finally:
        await client.close()


class SendProcess:
    """``send_loop`` as a process in a rig host, appending to ``out``."""

    def __init__(self, host: Host, addr: str, topic: str, out: Path, *, senders: int = 4, pace_ms: int = 5) -> None:
        self.out = out
        argv = [
            sys.executable,
            "-m",
            "tests.cluster.partition_util",
            addr,
            topic,
            str(out),
            "--senders",
            str(senders),
            "--pace-ms",
            str(pace_ms),
        ]
        self._err: IO[bytes] = open(out.with_suffix(".err"), "wb")
        self.proc = host.spawn(argv, cwd=REPO, stdout=self._err, stderr=subprocess.STDOUT)

    def sends(self) -> list[Send]:
        return read_sends(self.out)

    def stop(self) -> list[Send]:
        """SIGTERM (it stops after the sends in flight), then what it recorded."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(SEND_TIMEOUT + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return self.sends()

    def errors(self) -> str:
        p = self.out.with_suffix(".err")
        return p.read_text(errors="replace") if p.exists() else ""


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("addr")
    ap.add_argument("topic")
    ap.add_argument("out")
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--pace-ms", type=int, default=5)
    args = ap.parse_args(argv)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        with open(args.out, "a", buffering=1) as f:

            def record(s: Send) -> None:
                f.write(s.line())

            await send_loop(args.addr, args.topic, record, stop, senders=args.senders, pace=args.pace_ms / 1000)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(_main())
