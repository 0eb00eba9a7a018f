"""updateAclConfig, deleteAclConfig, clusterAclConfigVersion, updateGlobalWhiteAddr
(mqadmin's acl/ commands; broker codes 50-53, spec 2.9).

``-c`` reaches every broker of the cluster, slaves included: mqadmin 4.9.8 does that for
the writes, and the ACL files of a slave are its own, so a slave left out keeps the old
accounts and refuses clients after a failover (RocketMQ #1966). ``clusterAclConfigVersion
-c`` lists the slaves too (mqadmin: masters only), so a slave that drifted shows.

The account being written is ``-a`` / ``-s``; the credentials that sign the request are
the common ``--access-key`` / ``--secret-key`` (an admin account of the broker). Nothing
printed contains a secret (mqadmin printed the object it sent).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import BROKER_ADDR, CLUSTER, AdminError, OnBrokers, Opt, Output, each_broker, java_bool, register
from rmq.admin.output import Col, Table
from rmq.auth.acl_update import (
    DELETE_ACL_CONFIG_FAILED,
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
    AccountDelete,
    AccountUpdate,
    AclVersionInfo,
    GlobalWhiteUpdate,
)
from rmq.client.errors import MQBrokerError
from rmq.protocol.codes import RequestCode

# rmq.protocol.codes.ResponseCode knows 209-211 by their 5.x (POP) names; these are 4.9.8's.
_FAILED_NAMES = {
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED: "UPDATE_AND_CREATE_ACL_CONFIG_FAILED",
    DELETE_ACL_CONFIG_FAILED: "DELETE_ACL_CONFIG_FAILED",
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED: "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED",
}

_WHERE = (BROKER_ADDR.but(help="update which broker"), CLUSTER.but(help="update which cluster (masters and slaves)"))


async def _call(admin: MQAdmin, addr: str, code: int, ext: dict[str, str]) -> dict[str, str]:
    try:
        resp = await admin.call(addr, code, ext)
    except MQBrokerError as e:
        name = _FAILED_NAMES.get(e.code)
        if name is None:
            raise
        raise AdminError(f"broker {addr} answered {name} ({e.code}): {e.remark}") from None
    return resp.ext_fields or {}


async def _write_each(
    admin: MQAdmin, addrs: list[str], out: Output, code: int, ext: dict[str, str], done: str
) -> list[str]:
    """The request on each target broker; ``done`` (with the address) printed per success."""
    written = []
    async for addr, _ in each_broker(out, addrs, lambda a: _call(admin, a, code, ext), alone_raises=True):
        if not out.json:
            out.emit(text=done % addr)
        written.append(addr)
    return written


def _perm_list(text: str | None) -> tuple[str, ...] | None:
    """``-t`` / ``-g``: comma-separated ``res=PERM`` items; an empty value clears the list."""
    if text is None:
        return None
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _opt_strip(text: str | None) -> str | None:
    return None if text is None else text.strip()


@register
class UpdateAclConfig(OnBrokers):
    with_slaves = True
    name = "updateAclConfig"
    help = "Update acl config yaml file in broker"
    description = (
        "Create an account or update one on a broker, or on every broker of a cluster "
        "(slaves too). Fields not given keep their values on an existing account (-m "
        "too: unlike mqadmin, leaving it out does not demote an admin)."
    )
    options = (
        *_WHERE,
        Opt("a", "accessKey", "set accessKey in acl config file", required=True, metavar="AK"),
        Opt("s", "secretKey", "set secretKey in acl config file", required=True, metavar="SK"),
        Opt("w", "whiteRemoteAddress", "set white ip Address for account in acl config file", metavar="ADDR"),
        Opt("i", "defaultTopicPerm", "set default topicPerm in acl config file", metavar="PERM"),
        Opt("u", "defaultGroupPerm", "set default GroupPerm in acl config file", metavar="PERM"),
        Opt("t", "topicPerms", "set topicPerms list,eg: topicA=DENY,topicD=SUB", metavar="LIST"),
        Opt("g", "groupPerms", "set groupPerms list,eg: groupD=DENY,groupD=SUB", metavar="LIST"),
        Opt("m", "admin", "set admin flag in acl config file (true/false)", type=java_bool, metavar="BOOL"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        update = AccountUpdate(
            args.accessKey.strip(),
            args.secretKey.strip(),
            _opt_strip(args.whiteRemoteAddress),
            args.admin,
            _opt_strip(args.defaultTopicPerm),
            _opt_strip(args.defaultGroupPerm),
            _perm_list(args.topicPerms),
            _perm_list(args.groupPerms),
        )
        done = "create or update plain access config to %s success."
        brokers = await _write_each(
            admin,
            await self.targets(admin, args),
            out,
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
            update.to_ext_fields(),
            done,
        )
        if out.json:
            out.emit(data={"accessKey": update.access_key, "brokers": brokers})


@register
class DeleteAclConfig(OnBrokers):
    with_slaves = True
    name = "deleteAclConfig"
    help = "Delete Acl Config Account in broker"
    options = (
        BROKER_ADDR.but(help="delete acl config account from which broker"),
        CLUSTER.but(help="delete acl config account from which cluster (masters and slaves)"),
        Opt(
            "a", "accessKey", "set accessKey in acl config file for deleting which account", required=True, metavar="AK"
        ),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        delete = AccountDelete(args.accessKey.strip())
        done = "delete plain access config account from %s success."
        brokers = await _write_each(
            admin, await self.targets(admin, args), out, RequestCode.DELETE_ACL_CONFIG, delete.to_ext_fields(), done
        )
        if out.json:
            out.emit(data={"accessKey": delete.access_key, "brokers": brokers})
        elif brokers:
            out.emit(text=f"account's accesskey is:{delete.access_key}")


@register
class UpdateGlobalWhiteAddr(OnBrokers):
    with_slaves = True
    name = "updateGlobalWhiteAddr"
    help = "Update global white address for acl Config File in broker"
    description = (
        "Replace globalWhiteRemoteAddresses in one ACL file of a broker, or of every broker "
        "of a cluster (slaves too). Without -p the broker's default file "
        "(<rocketmqHome>/conf/plain_acl.yml); with -p, that file or a .yml / .yaml file "
        "under <rocketmqHome>/conf/acl/. An empty -g clears the list."
    )
    options = (
        BROKER_ADDR.but(help="update global white address to which broker"),
        CLUSTER.but(help="update global white address to which cluster (masters and slaves)"),
        Opt(
            "g",
            "globalWhiteRemoteAddresses",
            "set globalWhiteRemoteAddress list,eg: 10.10.103.*,192.168.0.*",
            required=True,
            metavar="LIST",
        ),
        Opt(
            "p",
            "aclFileFullPath",
            "update global white address of specified acl file,eg: /xxx/plain_test.yml",
            metavar="PATH",
        ),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        # mqadmin leaves aclFileFullPath out without -p, which 4.9.8 (and rmq) refuse as a
        # missing header field; empty selects the default file.
        update = GlobalWhiteUpdate(args.globalWhiteRemoteAddresses.strip(), (args.aclFileFullPath or "").strip())
        done = "update global white remote addresses to %s success."
        code = RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG
        brokers = await _write_each(admin, await self.targets(admin, args), out, code, update.to_ext_fields(), done)
        if out.json:
            out.emit(
                data={
                    "globalWhiteRemoteAddresses": list(update.addresses),
                    "aclFileFullPath": update.acl_file_full_path,
                    "brokers": brokers,
                }
            )


@register
class ClusterAclConfigVersion(OnBrokers):
    with_slaves = True
    name = "clusterAclConfigVersion"
    help = "List all of acl config version information in cluster"
    options = (
        BROKER_ADDR.but(help="query acl config version for which broker"),
        CLUSTER.but(help="query acl config version for specified cluster (masters and slaves)"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        # mqadmin: %-16s  %-22s  %-22s  %-20s  %-22s  %-22s
        table = Table(
            Col("#Cluster Name", 16),
            Col("#Broker Name", 22),
            Col("#Broker Addr", 22),
            Col("#AclFilePath", 20),
            Col("#AclConfigVersionNum", 22),
            Col("#AclLastUpdateTime", 22),
        )
        doc: dict[str, Any] = {}

        async def fetch(addr: str) -> AclVersionInfo:
            return AclVersionInfo.from_ext_fields(await _call(admin, addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}))

        async for addr, info in each_broker(out, await self.targets(admin, args), fetch, alone_raises=True):
            for path, v in sorted(info.all_versions.items()):
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.timestamp // 1000))
                table.add(info.cluster_name, info.broker_name, info.broker_addr, path, v.counter, stamp)
            doc[addr] = info.to_obj()
        scope = "broker" if args.brokerAddr else "cluster"
        out.emit(text=f"{table.render()}\nget {scope}'s plain access config version success.", data=doc)
