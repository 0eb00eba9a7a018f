"""brokerStatus, updateBrokerConfig, getBrokerConfig (mqadmin's broker/ commands)."""

from __future__ import annotations

import argparse

from rmq.admin.admin import MQAdmin
from rmq.admin.base import (
    BROKER_ADDR,
    CLUSTER,
    OnBrokers,
    Opt,
    Output,
    UsageError,
    each_broker,
    emit_properties,
    register,
)
from rmq.admin.commands.not_applicable import DLEDGER_KEYS, DLEDGER_REASON
from rmq.admin.output import property_line


@register
class BrokerStatus(OnBrokers):
    name = "brokerStatus"
    help = "Fetch broker runtime status data"
    with_slaves = True
    options = (BROKER_ADDR.but(help="Broker address"), CLUSTER.but(help="which cluster (every master and slave)"))

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        # several brokers' keys interleave: each line names its broker
        line = property_line(32, ": ", with_addr=not args.brokerAddr)
        titles: dict[str, str | None] = dict.fromkeys(await self.targets(admin, args))
        await emit_properties(out, titles, admin.fetch_broker_runtime_stats, line, alone_raises=bool(args.brokerAddr))


@register
class UpdateBrokerConfig(OnBrokers):
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
        super().validate(args)
        if not args.key.strip():
            raise UsageError("-k/--key must not be empty")
        if args.key.strip() in DLEDGER_KEYS:
            raise UsageError(f"{args.key.strip()}: {DLEDGER_REASON}")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        key, value = args.key.strip(), args.value.strip()
        addrs = await self.targets(admin, args)
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
class GetBrokerConfig(OnBrokers):
    name = "getBrokerConfig"
    help = "Get broker config by cluster or special broker."
    options = (
        BROKER_ADDR.but(help="get which broker"),
        CLUSTER.but(help="get which cluster (masters and their slaves)"),
    )

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
        titles: dict[str, str | None] = {addr: title for title, addr in targets}
        line = property_line(50, "=  ")
        await emit_properties(out, titles, admin.get_broker_config, line, blank_after=True, alone_raises=True)
