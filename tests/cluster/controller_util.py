"""Several controllers on etcd as real processes: an etcd cluster, NameServers with
``enableControllerInNamesrv`` and ``controllerEtcdEndpoints`` on fixed ports (so a
restarted one comes back where the brokers' ``controllerAddr`` says), and one broker
group in controller mode heartbeating them all."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.remoting.errors import RemotingError
from tests.cluster.etcd_util import EtcdCluster
from tests.cluster.failover_util import controller_conf
from tests.cluster.ha_util import GROUP
from tests.harness import BrokerProcess, NameServerProcess, broker_process, namesrv_process
from tests.integration.broker_util import BrokerApi, wait_until

MASTER_TIMEOUT_MS = 3000  # controllerMasterTimeout in these tests (the figure)
PREFIX = "/rmq-test"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def controller_namesrv(
    workdir: Path, name: str, port: int, etcd: EtcdCluster | None, host: str = "127.0.0.1", **extra: object
) -> NameServerProcess:
    """A NameServer running a controller (on etcd unless ``etcd`` is None), started
    as ``rmq namesrv -p PORT -c FILE``."""
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    props: dict[str, object] = {
        "enableControllerInNamesrv": "true",
        "controllerMasterTimeout": MASTER_TIMEOUT_MS,
        "listenPort": port,
        "bindAddress": host,
    }
    if etcd is not None:
        props |= {"controllerEtcdEndpoints": ";".join(etcd.endpoints), "controllerEtcdKeyPrefix": PREFIX}
        if etcd.ca_file is not None:
            props["controllerEtcdCaFile"] = str(etcd.ca_file)
        if etcd.auth is not None:
            props["controllerEtcdUser"], props["controllerEtcdPassword"] = etcd.auth
    props |= extra
    conf = d / "namesrv.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    p = namesrv_process(workdir, "-c", str(conf), name=name)
    # -c's listenPort and bindAddress, with -p as well (both together, as the issue asks)
    p.args = ["namesrv", "-p", str(port), "-c", str(conf), "--kv-path", str(d / "kvConfig.msgpack")]
    return p


@dataclass
class ControllerCluster:
    etcd: EtcdCluster
    namesrvs: list[NameServerProcess]
    brokers: list[BrokerProcess]
    workdir: Path

    @property
    def ns_addrs(self) -> list[str]:
        return [n.addr for n in self.namesrvs]

    def broker(self, addr: str) -> BrokerProcess:
        return next(b for b in self.brokers if b.addr == addr)


@contextlib.contextmanager
def controller_cluster(
    role: str = "SYNC_MASTER",
    *,
    etcd_members: int = 3,
    controllers: int = 2,
    brokers: int = 2,
    namesrv_extra: dict[str, object] | None = None,
    **broker_extra: object,
) -> Iterator[ControllerCluster]:
    """``controllers`` NameServers with controllers on a ``etcd_members`` etcd, and one
    broker group (broker 0 adopted as master, the others slaves) with
    ``controllerAddr`` naming every controller. All stopped and removed however the
    test ends."""
    with tempfile.TemporaryDirectory(prefix="rmq-ctl-", ignore_cleanup_errors=True) as d:
        wd = Path(d)
        etcd = EtcdCluster(wd, etcd_members)
        procs: list[NameServerProcess | BrokerProcess] = []
        try:
            etcd.start_all()
            nss = [
                controller_namesrv(wd, f"ns{i}", free_port(), etcd, **(namesrv_extra or {})) for i in range(controllers)
            ]
            for n in nss:
                procs.append(n)
                n.start()
            addrs = ";".join(n.addr for n in nss)
            bs = []
            for i in range(brokers):
                b = broker_process(
                    wd / f"b{i}", addrs, GROUP, controller_conf(role, i, controllerAddr=addrs, **broker_extra)
                )
                procs.append(b)
                b.start()
                bs.append(b)
            yield ControllerCluster(etcd, nss, bs, wd)
        finally:
            for p in reversed(procs):
                p.stop()
            etcd.close()


async def controller_view(addr: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """A NameServer's own view of the controllers (GET_CONTROLLER_METADATA_INFO)."""
    try:
        async with BrokerApi(addr) as api:
            r = await api.call(RequestCode.CONTROLLER_GET_METADATA_INFO, timeout=timeout)
    except (TimeoutError, RemotingError, OSError):
        return None
    if r.code != ResponseCode.SUCCESS:
        return None
    v = json.loads(r.body or b"{}")
    return v if isinstance(v, dict) else None


async def leading(addrs: list[str]) -> list[str]:
    views = await asyncio.gather(*(controller_view(a) for a in addrs))
    return [a for a, v in zip(addrs, views, strict=True) if v is not None and v.get("isLeader")]


async def wait_one_leader(addrs: list[str], timeout: float = 20.0) -> str:
    found: list[str] = []

    async def one() -> bool:
        nonlocal found
        found = await leading(addrs)
        return len(found) == 1

    await wait_until(one, timeout, f"no single leading controller among {addrs} (leading: {found})", 0.1)
    return found[0]


class Clock:
    """Timings the partition and failover tests print."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.marks: list[tuple[str, float]] = []

    def mark(self, what: str) -> float:
        t = time.monotonic() - self.t0
        self.marks.append((what, t))
        print(f"  t={t:7.3f}s  {what}", flush=True)
        return t
