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
from typing import ClassVar

from rmq.admin.admin import MQAdmin
from rmq.admin.base import AdminError, Command, Opt, Output, describe_error, register

_BROKER_NAME = Opt("b", "brokerName", "broker name", required=True, metavar="NAME")


async def _each_namesrv(
    admin: MQAdmin, out: Output, broker: str, verb: str, call: Callable[[str, str], Awaitable[int]]
) -> None:
    ci = await admin.examine_broker_cluster_info()
    if broker not in ci.broker_addr_table:
        raise AdminError(
            f"broker {broker} is not registered with NameServer "
            f"{admin.namesrv_desc} (known: "
            f"{', '.join(sorted(ci.broker_addr_table)) or 'none'})"
        )
    results = []
    for ns in admin.namesrv_addrs:
        try:
            n = await call(ns, broker)
        except Exception as e:  # the other NameServers are still done; exit status 1
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


class _WritePerm(Command):
    """The two commands differ only in what each NameServer is asked to do."""

    options = (_BROKER_NAME,)
    verb: ClassVar[str]  # "wipe" | "add", as mqadmin's output says it

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        call = admin.wipe_write_perm_of_broker if self.verb == "wipe" else admin.add_write_perm_of_broker
        await _each_namesrv(admin, out, args.brokerName.strip(), self.verb, call)


@register
class WipeWritePerm(_WritePerm):
    name = "wipeWritePerm"
    help = "Wipe write perm of broker in all name server"
    verb = "wipe"


@register
class AddWritePerm(_WritePerm):
    name = "addWritePerm"
    help = "Add write perm of broker in all name server you defined in the -n param"
    verb = "add"
