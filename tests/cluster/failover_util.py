"""Helpers for the failover tests: a controller NameServer and a broker group in
controller mode as real processes, a producer run that keeps going through a
failover (retrying what failed, as an application would), and who answered what.

Brokers in controller mode all carry brokerRole = the role they take while leading;
brokerId 0 lets the controller adopt the first one as master, brokerId 1 starts the
other as a slave. ``restart`` brings a broker back on its old ports (the same
address, as a machine coming back would).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq.client import Message, Producer
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.client.message import SendStatus
from rmq.protocol.codes import ResponseCode
from rmq.remoting.errors import RemotingError
from tests.cluster.ha_util import CLUSTER, GROUP, ha_status
from tests.harness import BrokerProcess, NameServerProcess, broker_process, namesrv_process
from tests.integration.broker_util import BrokerApi, wait_until

MASTER_TIMEOUT_MS = 2000  # controllerMasterTimeout in these tests


def controller_conf(role: str, broker_id: int, **extra: object) -> dict[str, object]:
    return {
        "brokerRole": role,
        "brokerId": broker_id,
        "brokerClusterName": CLUSTER,
        "enableControllerMode": "true",
        "slaveSyncInterval": 1000,
        "slaveReadEnable": "true",
        **extra,
    }


@dataclass
class FailoverGroup:
    ns: NameServerProcess
    a: BrokerProcess  # brokerId 0 at start: the first master
    b: BrokerProcess  # brokerId 1 at start: its slave
    workdir: Path

    def by_addr(self, addr: str) -> BrokerProcess:
        return self.a if self.a.addr == addr else self.b


@contextlib.contextmanager
def failover_group(role: str, **extra: object) -> Iterator[FailoverGroup]:
    """A controller NameServer (controllerMasterTimeout 2 s) and two brokers of group
    broker-a in controller mode; everything is stopped and removed however the test
    ends."""
    with tempfile.TemporaryDirectory(prefix="rmq-fo-", ignore_cleanup_errors=True) as d:
        wd = Path(d)
        ns = namesrv_process(wd, "--controller", "--controller-master-timeout-ms", str(MASTER_TIMEOUT_MS))
        a: BrokerProcess | None = None
        b: BrokerProcess | None = None
        try:
            ns.start()
            a = broker_process(wd / "a", ns.addr, GROUP, controller_conf(role, 0, **extra))
            a.start()
            b = broker_process(wd / "b", ns.addr, GROUP, controller_conf(role, 1, **extra))
            b.start()
            yield FailoverGroup(ns, a, b, wd)
        finally:
            for p in (b, a, ns):
                if p is not None:
                    p.stop()


def ha_port(p: BrokerProcess) -> int:
    """The HA port a controller-mode broker announced at start."""
    m = re.search(r"controller mode: broker \S+ \([\d.:]+, HA [\d.]+:(\d+)\)", p.log_text())
    assert m, f"{p.name}: no controller-mode start line"
    return int(m.group(1))


def restart(p: BrokerProcess, **extra: object) -> BrokerProcess:
    """Start a stopped/killed broker again on the same listen and HA ports."""
    port, hport = p.port, ha_port(p)
    text = p.conf_path.read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith(("listenPort=", "haListenPort="))]
    lines += [f"listenPort={port}", f"haListenPort={hport}"]
    lines += [f"{k}={v}" for k, v in extra.items()]
    p.conf_path.write_text("\n".join(lines) + "\n")
    p.start()
    return p


async def role_of(addr: str) -> tuple[str, int]:
    """(brokerRole, brokerId) a broker reports (haStatus)."""
    s = await ha_status(addr)
    return s["brokerRole"], s["brokerId"]


async def wait_role(addr: str, leads: bool, timeout: float = 30.0) -> None:
    """Until a broker reports itself master with brokerId 0 (leads) or a slave with an
    id > 0."""

    async def there() -> bool:
        try:
            role, bid = await role_of(addr)
        except (RemotingError, OSError, AssertionError):
            return False
        return (role != "SLAVE" and bid == 0) if leads else (role == "SLAVE" and bid > 0)

    await wait_until(there, timeout, f"{addr} never became {'master' if leads else 'a slave'}", 0.05)


async def wait_master(addr: str, timeout: float = 30.0) -> None:
    await wait_role(addr, True, timeout)


async def wait_slave(addr: str, timeout: float = 30.0) -> None:
    await wait_role(addr, False, timeout)


async def create_topic(addr: str, topic: str, queues: int) -> None:
    async with BrokerApi(addr) as api:
        r = await api.create_topic(topic, queues)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


def store_host(offset_msg_id: str) -> str:
    """ip:port of the broker that stored a message, from its offsetMsgId."""
    ip = ".".join(str(int(offset_msg_id[i : i + 2], 16)) for i in range(0, 8, 2))
    return f"{ip}:{int(offset_msg_id[8:16], 16)}"


# ----------------------------------------------------------------------------- produce
@dataclass
class SendLog:
    """What the producers were told. ``acked``: UNIQ_KEY -> broker (ip:port) that
    answered SEND_OK; ``stored``: other stored statuses (key -> (status, broker));
    ``resent``: keys sent more than once (an application retry after an error);
    ``first_at``: broker -> monotonic time of its first stored answer."""

    acked: dict[str, str] = field(default_factory=dict)
    stored: dict[str, tuple[str, str]] = field(default_factory=dict)
    resent: set[str] = field(default_factory=set)
    errors: Counter = field(default_factory=Counter)
    first_at: dict[str, float] = field(default_factory=dict)
    lost_sends: list[str] = field(default_factory=list)  # gave up (deadline)

    def stored_on(self, addr: str) -> set[str]:
        """Keys a broker answered with a stored status (SEND_OK or not)."""
        return {k for k, h in self.acked.items() if h == addr} | {k for k, (_, h) in self.stored.items() if h == addr}


async def produce_through(
    ns_addr: str,
    topic: str,
    *,
    producers: int,
    total: int,
    body_size: int = 200,
    log: SendLog | None = None,
    progress: Callable[[SendLog], None] | None = None,
    give_up_after: float = 60.0,
    pace: float = 0.0,
) -> SendLog:
    """``producers`` Producer instances send ``total`` messages between them, one at a
    time each. A send that raises is retried with the same Message (same UNIQ_KEY)
    every 50 ms until a broker answers, as an application riding out a failover would;
    a stored answer (SEND_OK, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT) is final.
    ``progress(log)`` is called after every answer."""
    log = log or SendLog()
    per = total // producers
    body = b"x" * body_size

    async def one(k: int) -> None:
        async with Producer(f"fo_pg_{k}", ns_addr, instance_name=f"fo-producer-{k}", send_msg_timeout=2000) as p:
            for i in range(per):
                msg = Message(topic, body, keys=f"p{k}-{i}")
                deadline = time.monotonic() + give_up_after
                tries = 0
                while True:
                    tries += 1
                    try:
                        r = await p.send(msg)
                        break
                    except (MQBrokerError, MQClientError, RemotingError) as e:
                        log.errors[type(e).__name__] += 1
                        if time.monotonic() > deadline:
                            log.lost_sends.append(f"p{k}-{i}: {e}")
                            r = None
                            break
                        await asyncio.sleep(0.05)
                if r is None:
                    continue
                key = msg.properties["UNIQ_KEY"]
                if tries > 1:
                    log.resent.add(key)
                host = store_host(r.offset_msg_id)
                log.first_at.setdefault(host, time.monotonic())
                if r.status is SendStatus.SEND_OK:
                    log.acked[key] = host
                else:
                    log.stored[key] = (r.status.name, host)
                if progress is not None:
                    progress(log)
                if pace:
                    await asyncio.sleep(pace)

    await asyncio.gather(*(one(k) for k in range(producers)))
    return log


def duplicates(keys: list[str]) -> dict[str, int]:
    return {k: n for k, n in Counter(keys).items() if n > 1}


async def wait_dispatched(addr: str, timeout: float = 30.0) -> dict[str, Any]:
    """Until a broker has dispatched its whole CommitLog; its HA status."""
    last: dict[str, Any] = {}

    async def done() -> bool:
        nonlocal last
        last = await ha_status(addr)
        return last["dispatchBehindBytes"] == 0

    await wait_until(done, timeout, f"{addr} never finished dispatching", 0.05)
    return last
