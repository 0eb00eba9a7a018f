"""consumerConnection, producerConnection (mqadmin's connection/ commands)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import GROUP, TOPIC, Command, Output, register
from rmq.admin.output import mq_version_desc
from rmq.protocol.bodies import Connection


def _rows(conns: Sequence[Connection], num_width: int) -> tuple[list[str], list[dict[str, Any]]]:
    """mqadmin's ``%03d  %-32s %-22s %-8s %s`` lines (``%04d`` for producers), sorted by
    client id; a longer client id widens its column for every line."""
    conns = sorted(conns, key=lambda c: (c.client_id, c.client_addr))
    w_id = max([32] + [len(c.client_id) for c in conns])
    w_addr = max([22] + [len(c.client_addr) for c in conns])
    lines, docs = [], []
    for i, c in enumerate(conns, 1):
        version = mq_version_desc(c.version)
        lines.append(f"{i:0{num_width}d}  {c.client_id:<{w_id}} {c.client_addr:<{w_addr}} {c.language:<8} {version}")
        docs.append(
            {
                "clientId": c.client_id,
                "clientAddr": c.client_addr,
                "language": c.language,
                "version": c.version,
                "versionDesc": version,
            }
        )
    return lines, docs


@register
class ConsumerConnection(Command):
    name = "consumerConnection"
    help = "Query consumer's socket connection, client version and subscription"
    options = (GROUP.but(required=True),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        group = args.consumerGroup.strip()
        cc = await admin.examine_consumer_connection_info(group)
        lines, conns = _rows(cc.connections, 3)
        lines += ["", "Below is subscription:"]
        subs = []
        for i, topic in enumerate(sorted(cc.subscriptions), 1):
            sd = cc.subscriptions[topic]
            lines.append(f"{i:03d}  Topic: {sd.topic:<40} SubExpression: {sd.sub_string}")
            subs.append({"topic": sd.topic, "subExpression": sd.sub_string, "expressionType": sd.expression_type})
        lines += [
            "",
            f"ConsumeType: {cc.consume_type}",
            f"MessageModel: {cc.message_model}",
            f"ConsumeFromWhere: {cc.consume_from_where}",
        ]
        out.emit(
            text="\n".join(lines),
            data={
                "consumerGroup": group,
                "connections": conns,
                "subscriptions": subs,
                "consumeType": cc.consume_type,
                "messageModel": cc.message_model,
                "consumeFromWhere": cc.consume_from_where,
            },
        )


@register
class ProducerConnection(Command):
    name = "producerConnection"
    help = "Query producer's socket connection and client version"
    options = (
        GROUP.but(long="producerGroup", required=True, help="producer group name", metavar="GROUP"),
        TOPIC.but(required=True),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        group = args.producerGroup.strip()
        topic = args.topic.strip()
        pc = await admin.examine_producer_connection_info(group, topic)
        lines, conns = _rows(pc.connections, 4)
        out.emit(text="\n".join(lines), data={"producerGroup": group, "topic": topic, "connections": conns})
