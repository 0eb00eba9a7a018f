"""queryMsgById, queryMsgByKey, queryMsgByOffset (mqadmin's message/ commands)."""

from __future__ import annotations

import argparse
import base64
import codecs
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import GROUP, MSG_ID, MSG_KEY, TOPIC, AdminError, Command, Opt, Output, UsageError, register
from rmq.admin.output import Col, Table, human_time
from rmq.client.message import PullStatus
from rmq.common.mixall import MASTER_ID, TOOLS_CONSUMER_GROUP
from rmq.protocol.codes import PullSysFlag
from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import PullMessageRequestHeader
from rmq.protocol.message import MessageExt, decode_message_id, decode_records

QUERY_MAX_NUM = 64  # QueryMsgByKeySubCommand


def _java_map(props: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in props.items()) + "}"


async def print_msg(admin: MQAdmin, msg: MessageExt, charset: str | None) -> tuple[str, dict]:
    """QueryMsgByIdSubCommand.printMsg: the message's fields, then how each group consuming
    its topic stands with it (MessageTrack)."""
    fields = [
        ("OffsetID:", msg.msg_id),
        ("Topic:", msg.topic),
        ("Tags:", f"[{msg.tags}]"),
        ("Keys:", f"[{msg.keys}]"),
        ("Queue ID:", msg.queue_id),
        ("Queue Offset:", msg.queue_offset),
        ("CommitLog Offset:", msg.commit_log_offset),
        ("Reconsume Times:", msg.reconsume_times),
        ("Born Timestamp:", human_time(msg.born_timestamp)),
        ("Store Timestamp:", human_time(msg.store_timestamp)),
        ("Born Host:", msg.born_host_str),
        ("Store Host:", msg.store_host_str),
        ("System Flag:", msg.sys_flag),
        ("Properties:", _java_map(msg.properties)),
    ]
    body_text = msg.body.decode(charset, "replace") if charset else None
    if body_text is not None:
        fields.append(("Message Body:", body_text))
    lines = [f"{k:<20} {v}" for k, v in fields]
    tracks = await admin.message_track_detail(msg)
    if not tracks:
        lines += ["", "", "WARN: No Consumer"]
    else:
        lines += ["", ""] + [
            f"MessageTrack [consumerGroup={t['consumerGroup']}, "
            f"trackType={t['trackType']}, exceptionDesc={t['exceptionDesc'] or 'null'}]"
            for t in tracks
        ]
    doc: dict[str, Any] = {
        "offsetMsgId": msg.msg_id,
        "msgId": msg.uniq_key or msg.msg_id,
        "topic": msg.topic,
        "tags": msg.tags,
        "keys": msg.keys,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset,
        "reconsumeTimes": msg.reconsume_times,
        "bornTimestamp": msg.born_timestamp,
        "storeTimestamp": msg.store_timestamp,
        "bornHost": msg.born_host_str,
        "storeHost": msg.store_host_str,
        "sysFlag": msg.sys_flag,
        "properties": dict(msg.properties),
        "bodyBase64": base64.b64encode(msg.body).decode(),
        "tracks": tracks,
    }
    if body_text is not None:
        doc["body"] = body_text
    return "\n".join(lines), doc


def _charset(args: argparse.Namespace) -> str | None:
    if not args.bodyFormat:
        return None
    try:
        return codecs.lookup(args.bodyFormat.strip()).name
    except LookupError:
        raise UsageError(f"-f: unknown charset {args.bodyFormat!r}") from None


_BODY_FORMAT = Opt(
    "f", "bodyFormat", "print the message body decoded with this charset (e.g. UTF-8)", metavar="CHARSET"
)


@register
class QueryMsgById(Command):
    name = "queryMsgById"
    help = "Query Message by Id"
    description = (
        "Look a message up by its offset message id (broker address + CommitLog "
        "offset, what a send returns as offsetMsgId); with -t also by its client "
        "message id (UNIQ_KEY). Several ids may be given, separated by commas. "
        "With -g and -d: the message is consumed once more, directly, by that online "
        "client's listener (its broker relays it) and the result printed."
    )
    options = (
        MSG_ID.but(required=True, help="message id(s), comma separated"),
        TOPIC.but(help="the topic, to find a client message id (UNIQ_KEY) too"),
        _BODY_FORMAT,
        GROUP.but(help="with -d: the consumer group of the client to consume the message"),
        Opt("d", "clientId", "with -g: the consumer's client id", metavar="CLIENT_ID"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        args.charset = _charset(args)
        args.ids = [i.strip() for i in args.msgId.split(",") if i.strip()]
        if not args.ids:
            raise UsageError("-i/--msgId: no message id given")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        texts, docs = [], []
        direct = args.consumerGroup and args.clientId
        for msg_id in args.ids:
            msg = await self._find(admin, msg_id, args.topic.strip() if args.topic else None)
            if direct:  # mqadmin's pushMsg: ConsumeMessageDirectlyResult.toString
                result = await admin.consume_message_directly(args.consumerGroup.strip(), args.clientId.strip(), msg)
                texts.append(str(result))
                docs.append({"msgId": msg_id, **result.to_obj()})
                continue
            text, doc = await print_msg(admin, msg, args.charset)
            texts.append(text)
            docs.append(doc)
        out.emit(text="\n\n".join(texts), data=docs[0] if len(docs) == 1 else docs)

    @staticmethod
    async def _find(admin: MQAdmin, msg_id: str, topic: str | None) -> MessageExt:
        if topic:
            found = await admin.query_message(topic, msg_id, 1, 0, 2**63 - 1, unique_key=True)
            exact = [m for m in found if m.uniq_key == msg_id]
            if exact:
                return exact[0]
        try:
            _, port, _ = decode_message_id(msg_id)
        except ProtocolError as e:
            raise AdminError(f"{msg_id} is not an offset message id: {e}") from None
        if not 0 < port < 65536:
            hint = (
                f"no message of topic {topic} has it as client message id either"
                if topic
                else "for a client message id (UNIQ_KEY) give its topic with -t"
            )
            raise AdminError(f"{msg_id} is not an offset message id (it would name port {port}); " + hint)
        return await admin.view_message(msg_id)


@register
class QueryMsgByKey(Command):
    name = "queryMsgByKey"
    help = "Query Message by Key"
    options = (TOPIC.but(required=True), MSG_KEY.but(required=True, help="Message Key"))

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic, key = args.topic.strip(), args.msgKey.strip()
        msgs = await admin.query_message(topic, key, QUERY_MAX_NUM, 0, 2**63 - 1)
        if not msgs:
            raise AdminError(f"no message with key {key} in topic {topic}")
        msgs.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
        table = Table(
            Col("#Message ID", 50), Col("#QID", 4, right=True, gap=" "), Col("#Offset", 40, right=True, gap=" ")
        )
        rows = []
        for m in msgs:
            mid = m.uniq_key or m.msg_id
            table.add(mid, m.queue_id, m.queue_offset)
            rows.append(
                {
                    "msgId": mid,
                    "offsetMsgId": m.msg_id,
                    "queueId": m.queue_id,
                    "queueOffset": m.queue_offset,
                    "storeHost": m.store_host_str,
                }
            )
        out.emit(text=table.render(), data={"topic": topic, "key": key, "messages": rows})


@register
class QueryMsgByOffset(Command):
    name = "queryMsgByOffset"
    help = "Query Message by offset"
    options = (
        TOPIC.but(required=True),
        Opt("b", "brokerName", "Broker Name", required=True, metavar="NAME"),
        Opt("i", "queueId", "Queue Id", required=True, type=int, metavar="ID"),
        Opt("o", "offset", "Queue Offset", required=True, type=int, metavar="OFFSET"),
        _BODY_FORMAT,
    )

    def validate(self, args: argparse.Namespace) -> None:
        args.charset = _charset(args)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic, broker = args.topic.strip(), args.brokerName.strip()
        route = await admin.examine_topic_route_info(topic)
        bd = next((b for b in route.broker_datas if b.broker_name == broker), None)
        if bd is None or not bd.broker_addrs:
            names = ", ".join(sorted(b.broker_name for b in route.broker_datas)) or "none"
            raise AdminError(f"broker {broker} is not in the route of topic {topic} (its brokers: {names})")
        addr = bd.broker_addrs.get(MASTER_ID) or bd.broker_addrs[min(bd.broker_addrs)]
        header = PullMessageRequestHeader(
            TOOLS_CONSUMER_GROUP,
            topic,
            args.queueId,
            args.offset,
            1,
            PullSysFlag.build(False, False, True),
            0,
            0,
            0,
            "*",
            "TAG",
        )
        result = await admin.api.pull_message(addr, header, admin.timeout_ms)
        msgs = decode_records(result.body or b"") if result.status is PullStatus.FOUND else []
        if not msgs:
            raise AdminError(
                f"no message at offset {args.offset} of {topic} queue "
                f"{broker}:{args.queueId} ({result.status.value}; the queue holds "
                f"offsets {result.min_offset} to {result.max_offset - 1})"
            )
        text, doc = await print_msg(admin, msgs[0], args.charset)
        out.emit(text=text, data=doc)
