"""brokerStatus, updateBrokerConfig, getBrokerConfig (mqadmin's broker/ commands)."""

from __future__ import annotations

import argparse

from rmq.admin.admin import MQAdmin
from rmq.admin.base import (
    BROKER_ADDR,
    CLUSTER,
    Command,
    Opt,
    Output,
    UsageError,
    broker_or_cluster,
    each_broker,
    register,
)
from rmq.admin.commands.not_applicable import DLEDGER_KEYS, DLEDGER_REASON


@register
class BrokerStatus(Command):
    name = "brokerStatus"
    help = "Fetch broker runtime status data"
    options = (BROKER_ADDR.but(help="Broker address"), CLUSTER.but(help="which cluster (every master and slave)"))

    def validate(self, args: argparse.Namespace) -> None:
        broker_or_cluster(args)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        if args.brokerAddr:
            addr = args.brokerAddr.strip()
            kv = await admin.fetch_broker_runtime_stats(addr)
            text = "\n".join(f"{k:<32}: {kv[k]}" for k in sorted(kv))
            out.emit(text=text, data={addr: dict(sorted(kv.items()))})
            return
        doc: dict[str, dict[str, str]] = {}
        lines: list[str] = []
        cluster = args.clusterName.strip()
        addrs = await admin.fetch_master_and_slave_addr_by_cluster_name(cluster)
        async for addr, kv in each_broker(out, addrs, admin.fetch_broker_runtime_stats):
            lines += [f"{addr:<24} {k:<32}: {kv[k]}" for k in sorted(kv)]
            doc[addr] = dict(sorted(kv.items()))
        out.emit(text="\n".join(lines), data=doc)


@register
class UpdateBrokerConfig(Command):
    name = "updateBrokerConfig"
    help = "Update broker's config"
    description = (
        "Update a broker config key on one broker or every master of a cluster. "
        "The broker checks the key and value, applies what it can at run time and "
        "writes the change to its config file; other keys take effect at its next "
        "start (the answer says which)."
    )
    options = (
        BROKER_ADDR.but(help="update which broker"),
        CLUSTER.but(help="update which cluster (every master)"),
        Opt("k", "key", "config key", required=True, metavar="KEY"),
        Opt("v", "value", "config value", required=True, metavar="VALUE"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        broker_or_cluster(args)
        if not args.key.strip():
            raise UsageError("-k/--key must not be empty")
        if args.key.strip() in DLEDGER_KEYS:
            raise UsageError(f"{args.key.strip()}: {DLEDGER_REASON}")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        key, value = args.key.strip(), args.value.strip()
        if args.brokerAddr:
            addrs = [args.brokerAddr.strip()]
        else:
            addrs = await admin.fetch_master_addr_by_cluster_name(args.clusterName.strip())
        done = []
        props = {key: value}
        async for addr, remark in each_broker(
            out, addrs, lambda a: admin.update_broker_config(a, props), alone_raises=True
        ):
            if not out.json:
                out.emit(text=f"update broker config success, {addr}" + (f" ({remark})" if remark else ""))
            done.append({"brokerAddr": addr, "remark": remark})
        if out.json:
            out.emit(data={"key": key, "value": value, "brokers": done})


@register
class GetBrokerConfig(Command):
    name = "getBrokerConfig"
    help = "Get broker config by cluster or special broker."
    options = (
        BROKER_ADDR.but(help="get which broker"),
        CLUSTER.but(help="get which cluster (masters and their slaves)"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        broker_or_cluster(args)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        if args.brokerAddr:
            addr = args.brokerAddr.strip()
            targets = [(f"============{addr}============", addr)]
        else:
            targets = []
            for bd in await admin.fetch_cluster_brokers(args.clusterName.strip()):
                master = bd.broker_addrs.get(0)
                if master:
                    targets.append((f"============Master: {master}============", master))
                for bid in sorted(i for i in bd.broker_addrs if i != 0):
                    slave = bd.broker_addrs[bid]
                    targets.append(
                        (f"============My Master: {master or 'NO_MASTER'}=====Slave: {slave}============", slave)
                    )
        doc: dict[str, dict[str, str]] = {}
        lines: list[str] = []
        titles = {addr: title for title, addr in targets}
        async for addr, props in each_broker(out, list(titles), admin.get_broker_config, alone_raises=True):
            lines.append(titles[addr])
            lines += [f"{k:<50}=  {props[k]}" for k in sorted(props)]
            lines.append("")
            doc[addr] = dict(sorted(props.items()))
        out.emit(text="\n".join(lines), data=doc)
