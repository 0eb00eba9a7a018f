"""haStatus (RocketMQ 5.x mqadmin's HAStatusSubCommand): replication state of brokers.

The data is GET_BROKER_HA_STATUS (907), RocketMQ 5.x's HARuntimeInfo body, to which
rmq brokers add brokerRole, brokerName, brokerId, epoch and epochStartOffset.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import BROKER_ADDR, CLUSTER, OnBrokers, Opt, Output, each_broker, register
from rmq.admin.output import Col, Table, human_time
from rmq.protocol.bodies import loads_fastjson
from rmq.protocol.codes import RequestCode
from rmq.protocol.errors import ProtocolError


async def fetch_ha_status(admin: MQAdmin, addr: str) -> dict[str, Any]:
    resp = await admin.call(addr, RequestCode.GET_BROKER_HA_STATUS)
    info = loads_fastjson(resp.body or b"{}")
    if not isinstance(info, dict):
        raise ProtocolError("GET_BROKER_HA_STATUS: the body is not a JSON object")
    return info


def _int(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def render(addr: str, info: dict[str, Any]) -> str:
    epoch = _int(info.get("epoch"))
    head = [
        ("#Broker", f"{info.get('brokerName', '?')} (id {info.get('brokerId', '?')}) {addr}"),
        ("#Role", info.get("brokerRole") or ("MASTER" if info.get("master") else "SLAVE")),
        ("#Epoch", f"{epoch} (starts at offset {_int(info.get('epochStartOffset'))})" if epoch else "-"),
    ]
    if info.get("master"):
        top = _int(info.get("masterCommitLogMaxOffset"))
        conns = info.get("haConnectionInfo") or []
        head += [
            ("#CommitLogMaxOffset", str(top)),
            ("#SlaveNum", str(len(conns))),
            ("#InSyncSlaveNum", str(_int(info.get("inSyncSlaveNums")))),
        ]
        table = Table(
            Col("#SlaveAddr", 24),
            Col("#BrokerId", 9, right=True),
            Col("#SlaveAckOffset", 16, right=True),
            Col("#Lag(bytes)", 14, right=True),
            Col("#TransferSpeed(KB/s)", 20, right=True),
            Col("#Status", 11),
            Col("#TransferFromWhere", 18, right=True),
        )
        for c in conns:
            table.add(
                c.get("addr", "?"),
                _int(c.get("brokerId")),
                _int(c.get("slaveAckOffset")),
                _int(c.get("diff")),
                "%.2f" % (_int(c.get("transferredByteInSecond")) / 1024),
                "OK" if c.get("inSync") else "Fall Behind",
                _int(c.get("transferFromWhere")),
            )
        body = table.render()
    else:
        cl = info.get("haClientRuntimeInfo") or {}
        head += [
            ("#MasterAddr", cl.get("masterAddr") or "-"),
            ("#Connected", "true" if cl.get("isActivated") else "false"),
            ("#CommitLogMaxOffset", str(_int(cl.get("maxOffset")))),
            ("#DispatchBehindBytes", str(_int(info.get("dispatchBehindBytes")))),
            ("#TransferSpeed(KB/s)", "%.2f" % (_int(cl.get("transferredByteInSecond")) / 1024)),
            ("#LastReadTime", human_time(_int(cl.get("lastReadTimestamp"))) if cl.get("lastReadTimestamp") else "-"),
            ("#LastWriteTime", human_time(_int(cl.get("lastWriteTimestamp"))) if cl.get("lastWriteTimestamp") else "-"),
        ]
        if cl.get("lastReject"):
            head.append(("#LastReject", str(cl["lastReject"])))
        body = ""
    width = max(len(k) for k, _ in head)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in head)
    return text + ("\n" + body if body else "")


@register
class HAStatus(OnBrokers):
    name = "haStatus"
    help = "Fetch ha runtime status data"
    with_slaves = True
    description = (
        "Replication state of a broker: role, epoch, CommitLog end, and per slave "
        "(on a master) its acked offset and lag in bytes."
    )
    options = (
        BROKER_ADDR.but(help="which broker to fetch"),
        CLUSTER.but(help="which cluster (every master and slave)"),
        Opt("i", "interval", "repeat every SECONDS (until interrupted)", type=int, metavar="SECONDS"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        while True:
            await self._once(admin, args, out)
            if not args.interval:
                return
            await asyncio.sleep(args.interval)

    async def _once(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        if args.brokerAddr:
            addr = args.brokerAddr.strip()
            info = await fetch_ha_status(admin, addr)
            out.emit(text=render(addr, info), data={addr: info})
            return
        addrs = await self.targets(admin, args)
        doc: dict[str, Any] = {}
        texts = []
        async for addr, info in each_broker(out, addrs, lambda addr: fetch_ha_status(admin, addr)):
            doc[addr] = info
            texts.append(render(addr, info))
        out.emit(text="\n\n".join(texts), data=doc)
