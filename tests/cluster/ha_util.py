"""Helpers for the replication tests: a NameServer, a master and its slave as real
processes (tests/harness.py), the HA status of a broker, byte comparison of stores,
and a concurrent producer run that records which messages were answered SEND_OK.

The failover tests build on the same pieces: ``ha_group`` gives the processes (the
slave can be started later, killed, restarted), ``produce`` can run while a broker is
killed, ``uniq_keys_on`` reads what one broker can serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq.client import Message, Producer
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_records
from rmq.remoting.errors import RemotingError
from tests.harness import BrokerProcess, NameServerProcess, broker_process, namesrv_process
from tests.integration.broker_util import BrokerApi, signing_client, wait_until

CLUSTER = "TestCluster"
GROUP = "broker-a"


def master_conf(role: str = "ASYNC_MASTER", **extra: object) -> dict[str, object]:
    return {"brokerRole": role, "brokerId": 0, "brokerClusterName": CLUSTER, **extra}


def slave_conf(**extra: object) -> dict[str, object]:
    return {"brokerRole": "SLAVE", "brokerId": 1, "brokerClusterName": CLUSTER, **extra}


@dataclass
class HAGroup:
    ns: NameServerProcess
    master: BrokerProcess
    slave: BrokerProcess
    workdir: Path


@contextlib.contextmanager
def ha_group(master: dict[str, object], slave: dict[str, object], *, start_slave: bool = True) -> Iterator[HAGroup]:
    """NameServer + master (+ slave) of broker group broker-a in a temp directory; every
    process is stopped and the directory removed however the test ends."""
    with tempfile.TemporaryDirectory(prefix="rmq-ha-", ignore_cleanup_errors=True) as d:
        wd = Path(d)
        ns = namesrv_process(wd)
        m: BrokerProcess | None = None
        s: BrokerProcess | None = None
        try:
            ns.start()
            m = broker_process(wd, ns.addr, GROUP, master)
            m.start()
            s = broker_process(wd / "slave", ns.addr, GROUP, slave)
            if start_slave:
                s.start()
            yield HAGroup(ns, m, s, wd)  # type: ignore[arg-type]
        finally:
            for p in (s, m, ns):
                if p is not None:
                    p.stop()


async def ha_status(addr: str, creds: tuple[str, str] | None = None) -> dict[str, Any]:
    """GET_BROKER_HA_STATUS (907) of one broker (signed with creds: a broker with ACL)."""
    async with BrokerApi(addr, client=signing_client(creds)) as api:
        r = await api.call(RequestCode.GET_BROKER_HA_STATUS)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return json.loads(r.body)


def acks(info: dict[str, Any]) -> dict[str, int]:
    """Slave address -> acked offset, from a master's HA status."""
    return {c["addr"]: c["slaveAckOffset"] for c in info.get("haConnectionInfo", [])}


async def wait_in_sync(g: HAGroup, timeout: float = 30.0, creds: tuple[str, str] | None = None) -> int:
    """Until the slave has the master's whole CommitLog, acked it, and both dispatched it;
    returns the CommitLog end."""
    top = 0

    async def done() -> bool:
        nonlocal top
        m = await ha_status(g.master.addr, creds)
        s = await ha_status(g.slave.addr, creds)
        top = m["commitLogMaxOffset"]
        return (
            s["commitLogMaxOffset"] == top
            and list(acks(m).values()) == [top]
            and m["dispatchBehindBytes"] == 0
            and s["dispatchBehindBytes"] == 0
        )

    await wait_until(done, timeout, "the slave never caught up with the master", 0.05)
    return top


# ----------------------------------------------------------------------------- files
def _digest(path: Path) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def _is_zero(path: Path) -> bool:
    zero = bytes(8 << 20)
    with open(path, "rb") as f:
        while chunk := f.read(len(zero)):
            if chunk != zero[: len(chunk)]:
                return False
    return True


def assert_commitlogs_identical(master_store: Path, slave_store: Path) -> int:
    """Every CommitLog file of the master equals the slave's; a master file the slave
    lacks may only be an unused preallocated one (all zeros). Returns files compared."""
    mdir, sdir = Path(master_store) / "commitlog", Path(slave_store) / "commitlog"
    n = 0
    for name in sorted(os.listdir(mdir)):
        if not (sdir / name).exists():
            assert _is_zero(mdir / name), f"CommitLog file {name} is missing on the slave"
            continue
        assert _digest(mdir / name) == _digest(sdir / name), f"CommitLog file {name} differs"
        n += 1
    extra = set(os.listdir(sdir)) - set(os.listdir(mdir))
    assert all(_is_zero(sdir / x) for x in extra), f"slave-only CommitLog files {extra}"
    return n


def consume_queue_digests(store: Path) -> dict[str, str]:
    root = Path(store) / "consumequeue"
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = _digest(p)
    return out


# ----------------------------------------------------------------------------- produce
@dataclass
class ProduceLog:
    """What a produce() run was told: ids answered SEND_OK, other statuses, errors."""

    ok: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


async def produce(
    ns_addr: str,
    topic: str,
    *,
    producers: int = 8,
    total: int = 20_000,
    body_size: int = 256,
    stop: asyncio.Event | None = None,
    log: ProduceLog | None = None,
) -> ProduceLog:
    """``producers`` Producer instances (each its own client identity) send ``total``
    messages between them, one at a time each, until done or ``stop`` is set."""
    log = log or ProduceLog()
    per = total // producers
    body = os.urandom(body_size // 2).hex().encode()

    async def one(k: int) -> None:
        async with Producer(f"ha_pg_{k}", ns_addr, instance_name=f"ha-producer-{k}") as p:
            for i in range(per):
                if stop is not None and stop.is_set():
                    return
                try:
                    r = await p.send(Message(topic, body, keys=f"p{k}-{i}"))
                except (MQBrokerError, MQClientError, RemotingError) as e:
                    log.errors.append(f"{type(e).__name__}: {e}")
                    continue
                log.statuses[r.status.name] = log.statuses.get(r.status.name, 0) + 1
                if r.ok:
                    assert r.msg_id is not None
                    log.ok.add(r.msg_id)

    await asyncio.gather(*(one(k) for k in range(producers)))
    return log


async def wait_topic_on(addr: str, topic: str, timeout: float = 15.0) -> None:
    """A slave knows a topic once it copied its master's table (slaveSyncInterval)."""
    async with BrokerApi(addr) as api:

        async def known() -> bool:
            return topic in await api.topics()

        await wait_until(known, timeout, f"{addr} never learned topic {topic}", 0.1)


async def uniq_keys_on(addr: str, topic: str, queues: int, group: str = "CG_HA_CHECK") -> list[str]:
    """UNIQ_KEY of every message a broker serves from its ConsumeQueues (a slave needs
    slaveReadEnable=true, and the topic copied from its master)."""
    await wait_topic_on(addr, topic)
    out: list[str] = []
    async with BrokerApi(addr) as api:
        for q in range(queues):
            data, _ = await api.pull_all(topic, q, group=group)
            out += [m.properties.get("UNIQ_KEY", "") for m in decode_records(data)]
    return out
