"""wipeWritePerm, addWritePerm (mqadmin's namesrv/ commands).

RocketMQ 4.9.8 semantics: each NameServer of ``-n`` changes the queue data it holds for
every topic of the broker name -- wipe clears PERM_WRITE (producers stop choosing the
broker's queues, consumers keep reading), add sets the perm back to read+write. The
brokers are not told; the change holds until the broker's topic config changes and it
registers new queue data.
"""
from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from rmq.admin.admin import MQAdmin
from rmq.admin.base import AdminError, Command, Opt, Output, describe_error, register

_BROKER_NAME = Opt("b", "brokerName", "broker name", required=True, metavar="NAME")


async def _each_namesrv(admin: MQAdmin, out: Output, broker: str, verb: str,
                        call: Callable[[str, str], Awaitable[int]]) -> None:
    ci = await admin.examine_broker_cluster_info()
    if broker not in ci.broker_addr_table:
        raise AdminError(f"broker {broker} is not registered with NameServer "
                         f"{admin.namesrv_desc} (known: "
                         f"{', '.join(sorted(ci.broker_addr_table)) or 'none'})")
    results = []
    for ns in admin.namesrv_addrs:
        try:
            n = await call(ns, broker)
        except Exception as e:   # the other NameServers are still done; exit status 1
            if not out.json:
                out.emit(text=f"{verb} write perm of broker[{broker}] in name server[{ns}] Failed")
            out.error(f"NameServer {ns}: {describe_error(e)}")
            results.append({"nameServer": ns, "ok": False, "error": describe_error(e)})
            continue
        if not out.json:
            out.emit(text=f"{verb} write perm of broker[{broker}] in name server[{ns}] OK, {n}")
        results.append({"nameServer": ns, "ok": True, "topicCount": n})
    if out.json:
        out.emit(data={"brokerName": broker, "nameServers": results})


@register
class WipeWritePerm(Command):
    name = "wipeWritePerm"
    help = "Wipe write perm of broker in all name server"
    options = (_BROKER_NAME,)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        await _each_namesrv(admin, out, args.brokerName.strip(), "wipe",
                            admin.wipe_write_perm_of_broker)


@register
class AddWritePerm(Command):
    name = "addWritePerm"
    help = "Add write perm of broker in all name server you defined in the -n param"
    options = (_BROKER_NAME,)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        await _each_namesrv(admin, out, args.brokerName.strip(), "add",
                            admin.add_write_perm_of_broker)
