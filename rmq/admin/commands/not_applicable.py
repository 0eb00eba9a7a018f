"""mqadmin 4.9.8 subcommands (and DLedger config keys) rmq does not apply: each answers
with the reason on one line and exit status 1, never a traceback. The README's admin
section lists them."""

from __future__ import annotations

import argparse
from typing import ClassVar

from rmq.admin.admin import MQAdmin
from rmq.admin.base import MSG_ID, AdminError, Command, Opt, Output, register

#: DLedger's broker config keys (BrokerConfig / MessageStoreConfig of 4.9.8): rmq's broker
#: groups replicate master to slave (or a controller elects the master), never by DLedger
DLEDGER_KEYS = frozenset(
    {
        "enableDLegerCommitLog",
        "dLegerGroup",
        "dLegerPeers",
        "dLegerSelfId",
        "preferredLeaderId",
        "enableBatchPush",
        "storePathDLedgerCommitLog",
    }
)
DLEDGER_REASON = (
    "DLedger is not applicable to rmq: a broker group replicates master to slave "
    "(brokerRole, or a controller electing the master), there is no DLedger commit log"
)


class _NotApplicable(Command):
    reason: ClassVar[str]

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        raise AdminError(f"not applicable to rmq: {self.reason}")


@register
class QueryMsgTraceById(_NotApplicable):
    name = "queryMsgTraceById"
    help = "query a message trace (not applicable: rmq clients send no traces)"
    options = (
        MSG_ID.but(required=True, help="Message Id"),
        Opt("t", "traceTopic", "The name value of message trace topic", metavar="TOPIC"),
    )
    reason = (
        "rmq.client sends no message traces and rmq admin does not decode RMQ_SYS_TRACE_TOPIC; "
        "traces written by Java clients are read with mqadmin queryMsgTraceById"
    )


@register
class StartMonitoring(_NotApplicable):
    name = "startMonitoring"
    help = "Start Monitoring (not applicable: use the broker's metrics endpoint)"
    reason = (
        "mqadmin's MonitorService (a consumer polling every group forever) is not provided; "
        "rmq brokers export their figures as Prometheus metrics, and consumerProgress / "
        "brokerConsumeStats show the backlog"
    )
