"""brokerStatus (mqadmin's BrokerStatusSubCommand)."""
from __future__ import annotations

import argparse

from rmq.admin.admin import MQAdmin
from rmq.admin.base import (BROKER_ADDR, CLUSTER, Command, Output, UsageError, describe_error,
                            register)


@register
class BrokerStatus(Command):
    name = "brokerStatus"
    help = "Fetch broker runtime status data"
    options = (BROKER_ADDR.but(help="Broker address"),
               CLUSTER.but(help="which cluster (every master and slave)"))

    def validate(self, args: argparse.Namespace) -> None:
        if bool(args.brokerAddr) == bool(args.clusterName):
            raise UsageError("exactly one of -b/--brokerAddr or -c/--clusterName is required")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        if args.brokerAddr:
            addr = args.brokerAddr.strip()
            kv = await admin.fetch_broker_runtime_stats(addr)
            text = "\n".join("%-32s: %s" % (k, kv[k]) for k in sorted(kv))
            out.emit(text=text, data={addr: dict(sorted(kv.items()))})
            return
        doc: dict[str, dict[str, str]] = {}
        lines: list[str] = []
        cluster = args.clusterName.strip()
        for addr in await admin.fetch_master_and_slave_addr_by_cluster_name(cluster):
            try:
                kv = await admin.fetch_broker_runtime_stats(addr)
            except Exception as e:   # the other brokers are still reported; exit status 1
                out.error(f"broker {addr}: {describe_error(e)}")
                continue
            lines += ["%-24s %-32s: %s" % (addr, k, kv[k]) for k in sorted(kv)]
            doc[addr] = dict(sorted(kv.items()))
        out.emit(text="\n".join(lines), data=doc)
