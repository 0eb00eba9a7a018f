"""clusterList (mqadmin's ClusterListSubCommand)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import Command, Opt, Output, describe_error, register
from rmq.admin.output import Col, Table
from rmq.common.clock import now_ms
from rmq.protocol.bodies import KVTable


def _long(table: dict[str, str], key: str) -> int:
    return int(table[key])


def _delta(table: dict[str, str], what: str, start: str, end: str) -> int:
    """msg<what>Total<end> - msg<what>Total<start> (Put/Get, YesterdayMorning ...)."""
    return _long(table, f"msg{what}Total{end}") - _long(table, f"msg{what}Total{start}")


def _tps_load(tps: float, kv: dict[str, str], pool: str) -> str:
    """clusterList's ``TPS(queue size,head wait ms)`` cell for the send or pull pool."""
    size = kv.get(f"{pool}ThreadPoolQueueSize", "-")
    wait = kv.get(f"{pool}ThreadPoolQueueHeadWaitTimeMills", "-")
    return f"{tps:9.2f}({size},{wait}ms)"


_LOAD_KEYS = (
    "sendThreadPoolQueueSize",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueSize",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "pageCacheLockTimeMills",
)


@register
class ClusterList(Command):
    name = "clusterList"
    help = "List all of clusters"
    options = (
        Opt("m", "moreStats", "Print more stats", arg=False),
        Opt(
            "i", "interval", "specify intervals numbers, it is in seconds (repeat forever)", type=int, metavar="SECONDS"
        ),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        first = True
        while True:
            if not first:
                await asyncio.sleep(args.interval)
            await self._once(admin, args, out, fresh=not first)
            first = False
            if not args.interval:
                return

    async def _once(self, admin: MQAdmin, args: argparse.Namespace, out: Output, fresh: bool) -> None:
        ci = await admin.examine_broker_cluster_info(fresh=fresh)
        members: list[tuple[str, str, int, str]] = []  # cluster, broker, id, addr
        for cluster in sorted(ci.cluster_addr_table):
            for broker in sorted(set(ci.cluster_addr_table[cluster])):
                bd = ci.broker_addr_table.get(broker)
                if bd is None:
                    continue
                for bid in sorted(bd.broker_addrs):
                    members.append((cluster, broker, bid, bd.broker_addrs[bid]))

        async def fetch(addr: str) -> dict[str, str] | BaseException:
            try:
                return await admin.fetch_broker_runtime_stats(addr)
            except Exception as e:  # a broker that does not answer still gets its row
                return e

        stats = await asyncio.gather(*(fetch(m[3]) for m in members))
        for (_, broker, bid, addr), st in zip(members, stats, strict=True):
            if isinstance(st, BaseException):
                out.warn(f"broker {broker} ({bid}, {addr}): {describe_error(st)}")
        if args.moreStats:
            self._more(members, stats, out)
        else:
            self._base(members, stats, out)

    @staticmethod
    def _base(members: list[tuple[str, str, int, str]], stats: list[Any], out: Output) -> None:
        table = Table(
            Col("#Cluster Name", 16),
            Col("#Broker Name", 22),
            Col("#BID", 4),
            Col("#Addr", 22),
            Col("#Version", 16, gap=" "),
            Col("#InTPS(LOAD)", 19, right=True, gap=" "),
            Col("#OutTPS(LOAD)", 19, right=True, gap=" "),
            Col("#PCWait(ms)", 10, right=True, gap=" "),
            Col("#Hour", 5, right=True, gap=" "),
            Col("#SPACE", 6, right=True, gap=" "),
        )
        rows = []
        now = now_ms()
        for (cluster, broker, bid, addr), st in zip(members, stats, strict=True):
            kv: dict[str, str] = st if isinstance(st, dict) else {}
            rates = KVTable(kv)
            tps_in = rates.first_figure("putTps")
            tps_out = rates.first_figure("getTransferedTps")
            hour = 0.0
            try:
                earliest = int(kv.get("earliestMessageTimeStamp", "0"))
                if earliest > 0:
                    hour = (now - earliest) / 1000.0 / 3600.0
            except ValueError:
                pass
            try:
                space = float(kv.get("commitLogDiskRatio") or 0.0)
            except ValueError:
                space = 0.0
            table.add(
                cluster,
                broker,
                bid,
                addr,
                kv.get("brokerVersionDesc", ""),
                _tps_load(tps_in, kv, "send"),
                _tps_load(tps_out, kv, "pull"),
                kv.get("pageCacheLockTimeMills", "-"),
                f"{hour:2.2f}",
                f"{space:.4f}",
            )
            row: dict[str, Any] = {
                "cluster": cluster,
                "brokerName": broker,
                "brokerId": bid,
                "addr": addr,
                "version": kv.get("brokerVersionDesc"),
                "inTps": tps_in,
                "outTps": tps_out,
            }
            row.update((k, kv.get(k)) for k in _LOAD_KEYS)
            row.update(hour=round(hour, 2), space=space)
            if isinstance(st, BaseException):
                row["error"] = describe_error(st)
            rows.append(row)
        out.emit(text=table.render(), data={"brokers": rows})

    @staticmethod
    def _more(members: list[tuple[str, str, int, str]], stats: list[Any], out: Output) -> None:
        table = Table(
            Col("#Cluster Name", 16),
            Col("#Broker Name", 32),
            Col("#InTotalYest", 14, right=True, gap=" "),
            Col("#OutTotalYest", 14, right=True, gap=" "),
            Col("#InTotalToday", 14, right=True, gap=" "),
            Col("#OutTotalToday", 14, right=True, gap=" "),
        )
        rows = []
        for (cluster, broker, bid, addr), st in zip(members, stats, strict=True):
            in_yest = out_yest = in_today = out_today = 0
            if isinstance(st, dict):
                try:  # mqadmin: all four or none
                    in_yest = _delta(st, "Put", "YesterdayMorning", "TodayMorning")
                    out_yest = _delta(st, "Get", "YesterdayMorning", "TodayMorning")
                    in_today = _delta(st, "Put", "TodayMorning", "TodayNow")
                    out_today = _delta(st, "Get", "TodayMorning", "TodayNow")
                except (KeyError, ValueError):
                    in_yest = out_yest = in_today = out_today = 0
            table.add(cluster, broker, in_yest, out_yest, in_today, out_today)
            rows.append(
                {
                    "cluster": cluster,
                    "brokerName": broker,
                    "brokerId": bid,
                    "addr": addr,
                    "inTotalYest": in_yest,
                    "outTotalYest": out_yest,
                    "inTotalToday": in_today,
                    "outTotalToday": out_today,
                }
            )
        out.emit(text=table.render(), data={"brokers": rows})
