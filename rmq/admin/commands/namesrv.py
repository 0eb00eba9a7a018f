"""wipeWritePerm, addWritePerm, getNamesrvConfig, updateNamesrvConfig, updateKvConfig,
deleteKvConfig (mqadmin's namesrv/ commands).

getNamesrvConfig / updateNamesrvConfig ask each NameServer of ``-n`` (GET_NAMESRV_CONFIG
319, UPDATE_NAMESRV_CONFIG 318, as mqadmin). A NameServer refuses keys of its black list
(``configBlackList``, ``configStorePath``, ``kvConfigPath``, ``rocketmqHome``, ...),
secrets and unknown keys, naming the key; a key it reads only at start is written to its
``-c`` file and waits for a restart (the answer says so).

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
from rmq.admin.base import AdminError, Command, Opt, Output, UsageError, describe_error, emit_properties, register
from rmq.admin.output import property_line

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


@register
class GetNamesrvConfig(Command):
    name = "getNamesrvConfig"
    help = "Get configs of name server."
    options = ()

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        titles: dict[str, str | None] = {ns: f"============{ns}============" for ns in admin.namesrv_addrs}
        line = property_line(50, "=  ")
        await emit_properties(out, titles, admin.get_namesrv_config, line, alone_raises=True, what="NameServer")


@register
class UpdateNamesrvConfig(Command):
    name = "updateNamesrvConfig"
    help = "Update configs of name server."
    description = (
        "Update a config key on every NameServer of -n. Live keys (orderMessageEnable, "
        "scanNotActiveBrokerInterval, brokerExpiredTimeMillis, acceptStandardJsonOnly, logLevel, "
        "productEnvName) take effect at once; others are written to the NameServer's -c file "
        "and take effect at its next start. Black-listed, secret and unknown keys are refused."
    )
    options = (
        Opt("k", "key", "config key", required=True, metavar="KEY"),
        Opt("v", "value", "config value", required=True, metavar="VALUE"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        if not args.key.strip():
            raise UsageError("-k/--key must not be empty")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        key, value = args.key.strip(), args.value.strip()
        done: list[dict[str, object]] = []
        for ns in admin.namesrv_addrs:
            try:
                remark = await admin.update_namesrv_config(ns, {key: value})
            except Exception as e:  # the other NameServers are still asked; exit status 1
                if len(admin.namesrv_addrs) == 1:
                    raise
                out.error(f"NameServer {ns}: {describe_error(e)}")
                done.append({"nameServer": ns, "ok": False, "error": describe_error(e)})
                continue
            done.append({"nameServer": ns, "ok": True, "remark": remark})
            if not out.json:
                out.emit(text=f"update name server config success! {ns}" + (f" ({remark})" if remark else ""))
        if out.json:
            out.emit(data={"key": key, "value": value, "nameServers": done})
        elif any(d["ok"] for d in done):
            out.emit(text=f"{key} : {value}")


_NAMESPACE = Opt("s", "namespace", "set the namespace", required=True, metavar="NAMESPACE")
_KEY = Opt("k", "key", "set the key name", required=True, metavar="KEY")


@register
class UpdateKvConfig(Command):
    name = "updateKvConfig"
    help = "Create or update KV config."
    description = "Put a key of a namespace into the KV config of every NameServer of -n."
    options = (_NAMESPACE, _KEY, Opt("v", "value", "set the key value", required=True, metavar="VALUE"))

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        ns, key, value = args.namespace.strip(), args.key.strip(), args.value.strip()
        await admin.put_kv_config(ns, key, value)
        out.emit(
            text="create or update kv config to namespace success.",
            data={"namespace": ns, "key": key, "value": value, "nameServers": admin.namesrv_addrs},
        )


@register
class DeleteKvConfig(Command):
    name = "deleteKvConfig"
    help = "Delete KV config."
    description = "Delete a key of a namespace from the KV config of every NameServer of -n."
    options = (_NAMESPACE, _KEY)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        ns, key = args.namespace.strip(), args.key.strip()
        await admin.delete_kv_config(ns, key)
        out.emit(
            text="delete kv config from namespace success.",
            data={"namespace": ns, "key": key, "nameServers": admin.namesrv_addrs},
        )
