"""The failover controller's commands: electMaster and controllerStatus.

Controllers run in NameServers (``enableControllerInNamesrv=true``; several with etcd,
one leading). These commands ask each NameServer of ``-n`` in turn and use the first
that has a controller (others answer REQUEST_CODE_NOT_SUPPORTED; a standby forwards
to the leader, or answers CONTROLLER_NOT_LEADER while none leads).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import AdminError, Command, Opt, Output, register
from rmq.admin.output import Col, Table, human_time
from rmq.client.errors import MQBrokerError
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.controller import (
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetSyncStateDataRequestHeader,
    GroupStatus,
    decode_group_statuses,
)
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.errors import RemotingError

BROKER_NAME = Opt("b", "brokerName", "broker group name", metavar="NAME")


async def call_controller(admin: MQAdmin, code: int, ext_fields: dict[str, str]) -> tuple[str, RemotingCommand]:
    """(NameServer, answer) from the first NameServer that runs the controller."""
    unreachable: list[str] = []
    for addr in admin.namesrv_addrs:
        try:
            resp = await admin.api.raw(addr, code, dict(ext_fields), None, admin.timeout_ms)
        except RemotingError as e:
            unreachable.append(f"{addr} ({e})")
            continue
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            continue
        if resp.code == ResponseCode.CONTROLLER_NOT_LEADER:
            unreachable.append(f"{addr} ({resp.remark})")
            continue
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, None)
        return addr, resp
    why = f"; unreachable: {', '.join(unreachable)}" if unreachable else ""
    raise AdminError(
        f"no NameServer of {admin.namesrv_desc} answers as the leading controller "
        f"(start one with rmq namesrv --controller){why}"
    )


async def controller_views(admin: MQAdmin) -> list[dict[str, Any]]:
    """Every NameServer's own view of the controllers (GET_CONTROLLER_METADATA_INFO)."""

    async def one(addr: str) -> dict[str, Any]:
        try:
            resp = await admin.api.raw(addr, RequestCode.CONTROLLER_GET_METADATA_INFO, {}, None, admin.timeout_ms)
        except RemotingError as e:
            return {"nameserver": addr, "error": f"unreachable: {e}"}
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return {"nameserver": addr, "error": "runs no controller"}
        if resp.code != ResponseCode.SUCCESS:
            return {"nameserver": addr, "error": f"code {resp.code}: {resp.remark}"}
        try:
            view = json.loads(resp.body or b"{}")
        except ValueError as e:
            return {"nameserver": addr, "error": f"bad answer: {e}"}
        return {"nameserver": addr, **view} if isinstance(view, dict) else {"nameserver": addr, "error": "bad answer"}

    return list(await asyncio.gather(*(one(a) for a in admin.namesrv_addrs)))


def render_views(views: list[dict[str, Any]]) -> str:
    table = Table(
        Col("#NameServer", 22), Col("#Controller", 22), Col("#Role", 8), Col("#Leader", 22), Col("#State", 40)
    )
    etcd: list[dict[str, Any]] = []
    for v in views:
        if "error" in v:
            table.add(v["nameserver"], "-", "-", "-", v["error"])
            continue
        lead = v.get("leadership") or {}
        etcd = etcd or list(lead.get("endpoints") or [])
        table.add(
            v["nameserver"],
            v.get("controller", "-"),
            "LEADER" if v.get("isLeader") else "STANDBY",
            v.get("leader") or "none",
            v.get("store", "-"),
        )
    out = [table.render()]
    if etcd:
        et = Table(Col("#Etcd", 28), Col("#Healthy", 8), Col("#Leader", 7), Col("#Version", 8), Col("#Error", 30))
        for e in etcd:
            et.add(
                e.get("endpoint", "-"),
                "true" if e.get("reachable") else "false",
                "true" if e.get("isLeader") else "false",
                e.get("version") or "-",
                e.get("error") or "",
            )
        out.append(et.render())
    return "\n".join(out)


@register
class ElectMaster(Command):
    name = "electMaster"
    help = "Re-elect the master of a broker group (controller mode)"
    description = (
        "Without --brokerAddr the controller picks the most caught-up in-sync slave, "
        "and only when the master is gone. With it, that live in-sync slave becomes "
        "master even over a live one, which steps down on its next heartbeat."
    )
    options = (
        BROKER_NAME.but(required=True),
        Opt("", "brokerAddr", "the slave to promote (ip:port)", metavar="ADDR"),
        Opt("c", "clusterName", "cluster name (informative)", metavar="CLUSTER"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        req = ElectMasterRequestHeader(
            args.brokerName.strip(), args.clusterName, broker_addr=(args.brokerAddr or "").strip() or None
        )
        ns, resp = await call_controller(admin, RequestCode.CONTROLLER_ELECT_MASTER, req.to_ext_fields())
        h = ElectMasterResponseHeader.from_ext_fields(resp.ext_fields)
        data = {
            "brokerName": req.broker_name,
            "masterAddress": h.master_address,
            "masterBrokerId": h.master_broker_id,
            "masterEpoch": h.master_epoch,
            "epochStartOffset": h.epoch_start_offset,
            "controller": ns,
        }
        text = (
            f"elect master of {req.broker_name} success: master {h.master_address} "
            f"(brokerId {h.master_broker_id}), epoch {h.master_epoch} from offset "
            f"{h.epoch_start_offset}"
        )
        out.emit(text=text, data=data)


def render_groups(groups: list[GroupStatus]) -> str:
    table = Table(
        Col("#BrokerName", 16),
        Col("#BrokerAddr", 22),
        Col("#BrokerId", 9, right=True),
        Col("#Role", 12),
        Col("#Epoch", 6, right=True),
        Col("#MaxOffset", 14, right=True),
        Col("#AckOffset", 14, right=True),
        Col("#InSync", 7),
        Col("#Alive", 6),
        Col("#LastHeartbeat(ms)", 18, right=True),
    )
    heads = []
    for g in groups:
        last = g.history[-1] if g.history else None
        heads.append(
            f"#Group {g.broker_name} (cluster {g.cluster}): epoch {g.epoch} from offset "
            f"{g.epoch_start_offset}, master {g.master_addr or '-'} "
            f"({'alive' if g.master_alive else 'NOT ALIVE'})"
            + (f"; last decision {human_time(last.time_ms)}: {last.reason}" if last else "")
        )
        for m in g.members:
            role = m.role + ("*" if m.addr == g.master_addr else "")
            table.add(
                g.broker_name,
                m.addr,
                m.broker_id,
                role,
                m.epoch,
                m.max_offset,
                "-" if m.ack_offset is None else m.ack_offset,
                "true" if m.in_sync else "false",
                "true" if m.alive else "false",
                m.last_heartbeat_ago_ms,
            )
    return "\n".join(heads + [table.render()])


@register
class ControllerStatus(Command):
    name = "controllerStatus"
    help = "Show the controllers (which leads, etcd's health) and the broker groups: master, epoch, in-sync set"
    description = (
        "First every NameServer's controller: whether it leads, whom it sees "
        "leading, where its state lives, and etcd's endpoints as the controllers "
        "see them. Then per group: the master (* in the Role column), epoch and its "
        "start offset, and per broker its last heartbeat, max offset, the "
        "offset the master last reported it acked, and whether it is in the "
        "recorded in-sync set. BrokerId is the id the controller assigns."
    )
    options = (BROKER_NAME.but(help="only this broker group"),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        name = (args.brokerName or "").strip() or None
        views = await controller_views(admin)
        try:
            ns, resp = await call_controller(
                admin, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, GetSyncStateDataRequestHeader(name).to_ext_fields()
            )
        except AdminError as e:
            if all("error" in v for v in views):
                raise
            # no controller leads now: what each one sees is the answer
            out.emit(text=f"{render_views(views)}\n{e}", data={"controllers": views, "groups": [], "error": str(e)})
            return
        groups = decode_group_statuses(resp.body)
        if name is not None and not groups:
            raise AdminError(f"the controller at {ns} knows no broker group {name}")
        doc = {"controller": ns, "controllers": views, "groups": [_group_doc(g) for g in groups]}
        text = render_groups(groups) if groups else "no broker group has sent a heartbeat"
        out.emit(text=f"{render_views(views)}\n{text}", data=doc)


def _group_doc(g: GroupStatus) -> dict:
    return {
        "clusterName": g.cluster,
        "brokerName": g.broker_name,
        "epoch": g.epoch,
        "epochStartOffset": g.epoch_start_offset,
        "masterAddr": g.master_addr,
        "masterAlive": g.master_alive,
        "members": [
            {
                "brokerAddr": m.addr,
                "brokerId": m.broker_id,
                "role": m.role,
                "epoch": m.epoch,
                "maxOffset": m.max_offset,
                "ackOffset": m.ack_offset,
                "inSync": m.in_sync,
                "alive": m.alive,
                "lastHeartbeatAgoMs": m.last_heartbeat_ago_ms,
            }
            for m in g.members
        ],
        "history": [
            {
                "epoch": h.epoch,
                "startOffset": h.start_offset,
                "masterAddr": h.master_addr,
                "reason": h.reason,
                "timeMs": h.time_ms,
            }
            for h in g.history
        ],
    }
