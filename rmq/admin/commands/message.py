"""queryMsgById, queryMsgByKey, queryMsgByOffset, queryMsgByUniqueKey, printMsg,
printMsgByQueue, consumeMessage (mqadmin's message/ commands)."""

from __future__ import annotations

import argparse
import base64
import codecs
from typing import Any

from rmq.admin.admin import MQAdmin, select_broker_addr
from rmq.admin.base import (
    GROUP,
    MSG_ID,
    MSG_KEY,
    TOPIC,
    AdminError,
    Command,
    Opt,
    Output,
    UsageError,
    java_bool,
    register,
)
from rmq.admin.commands.offset import parse_reset_timestamp
from rmq.admin.output import Col, Table, human_time
from rmq.client.message import PullResult, PullStatus
from rmq.client.rebalance import mq_to_string
from rmq.client.routes import topic_route_to_subscribe_info
from rmq.common.mixall import TOOLS_CONSUMER_GROUP
from rmq.protocol.bodies import MessageQueue, SubscriptionData
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
        addr = await queue_addr(admin, topic, broker)
        result, msgs = await pull(admin, addr, MessageQueue(topic, broker, args.queueId), args.offset, 1)
        if not msgs:
            raise AdminError(
                f"no message at offset {args.offset} of {topic} queue "
                f"{broker}:{args.queueId} ({result.status.value}; the queue holds "
                f"offsets {result.min_offset} to {result.max_offset - 1})"
            )
        text, doc = await print_msg(admin, msgs[0], args.charset)
        out.emit(text=text, data=doc)


@register
class QueryMsgByUniqueKey(Command):
    name = "queryMsgByUniqueKey"
    help = "Query Message by Unique key"
    description = (
        "Look a message up by its client message id (UNIQ_KEY) in a topic; -a lists every "
        "message stored with that id (a retried send stores it more than once). With -g "
        "and -d: consumed once more, directly, by that online client."
    )
    options = (
        MSG_ID.but(required=True, help="the client message id (UNIQ_KEY)"),
        TOPIC.but(required=True),
        Opt("a", "showAll", "every message with the id (at most 32)", arg=False),
        GROUP.but(help="with -d: the consumer group of the client to consume the message"),
        Opt("d", "clientId", "with -g: the consumer's client id", metavar="CLIENT_ID"),
        _BODY_FORMAT,
    )

    def validate(self, args: argparse.Namespace) -> None:
        args.charset = _charset(args)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic, uniq = args.topic.strip(), args.msgId.strip()
        found = await admin.query_message(topic, uniq, 32, 0, 2**63 - 1, unique_key=True)
        msgs = sorted((m for m in found if m.uniq_key == uniq), key=lambda m: m.store_timestamp)
        if not msgs:
            raise AdminError(f"no message of topic {topic} has the client message id {uniq}")
        if args.consumerGroup and args.clientId:
            result = await admin.consume_message_directly(args.consumerGroup.strip(), args.clientId.strip(), msgs[0])
            out.emit(text=str(result), data={"msgId": uniq, **result.to_obj()})
            return
        texts, docs = [], []
        for m in msgs if args.showAll else msgs[:1]:
            text, doc = await print_msg(admin, m, args.charset)
            texts.append(text)
            docs.append(doc)
        out.emit(text="\n\n".join(texts), data=docs[0] if len(docs) == 1 else docs)


# =========================================================================== reading queues
def parse_time(text: str | None, default: int) -> int:
    """mqadmin's -b / -e: currentTimeMillis or yyyy-MM-dd#HH:mm:ss:SSS."""
    if text is None or not text.strip():
        return default
    return parse_reset_timestamp(text)


async def queue_addr(admin: MQAdmin, topic: str, broker: str) -> str:
    """The master (else a member) of ``broker`` in the topic's route."""
    route = await admin.examine_topic_route_info(topic)
    bd = next((b for b in route.broker_datas if b.broker_name == broker), None)
    addr = select_broker_addr(bd) if bd is not None else None
    if addr is None:
        names = ", ".join(sorted(b.broker_name for b in route.broker_datas)) or "none"
        raise AdminError(f"broker {broker} is not in the route of topic {topic} (its brokers: {names})")
    return addr


async def pull(
    admin: MQAdmin, addr: str, mq: MessageQueue, offset: int, max_nums: int, expr: str = "*"
) -> tuple[PullResult, list[MessageExt]]:
    """One pull as the tools consumer (nothing committed): the result and its messages."""
    header = PullMessageRequestHeader(
        TOOLS_CONSUMER_GROUP,
        mq.topic,
        mq.queue_id,
        offset,
        max_nums,
        PullSysFlag.build(False, False, True),
        0,
        0,
        0,
        expr,
        "TAG",
    )
    result = await admin.api.pull_message(addr, header, admin.timeout_ms)
    return result, decode_records(result.body or b"") if result.status is PullStatus.FOUND else []


async def read_queue(
    admin: MQAdmin, addr: str, mq: MessageQueue, begin: int, end: int, expr: str, limit: int | None = None
) -> list[MessageExt]:
    """The messages of one queue from offset ``begin`` up to ``end`` (exclusive) whose tag
    ``expr`` selects (the tools consumer pulls them; nothing is committed)."""
    sub = SubscriptionData.build(mq.topic, expr)
    msgs: list[MessageExt] = []
    offset = begin
    while offset < end and (limit is None or len(msgs) < limit):
        result, found = await pull(admin, addr, mq, offset, 32, expr)
        msgs += (m for m in found if m.queue_offset < end and (not sub.tags_set or m.tags in sub.tags_set))
        if result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    return msgs[:limit] if limit is not None else msgs


async def offset_range(admin: MQAdmin, addr: str, mq: MessageQueue, begin_ms: int, end_ms: int) -> tuple[int, int]:
    """The queue's offsets stored between the two times (its whole range for 0 .. max)."""
    lo = await admin.api.get_min_offset(addr, mq.topic, mq.queue_id, admin.timeout_ms)
    hi = await admin.api.get_max_offset(addr, mq.topic, mq.queue_id, admin.timeout_ms)
    if begin_ms > 0:
        lo = max(lo, await admin.api.search_offset(addr, mq.topic, mq.queue_id, begin_ms, admin.timeout_ms))
    if end_ms < 2**63 - 1:
        hi = min(hi, await admin.api.search_offset(addr, mq.topic, mq.queue_id, end_ms, admin.timeout_ms))
    return lo, hi


def message_line(m: MessageExt, broker: str, charset: str | None) -> tuple[str, dict[str, Any]]:
    """printMsg's ``MSGID: <id> <message> BODY: <body>`` line, and its document."""
    body = m.body.decode(charset, "replace") if charset else None
    desc = (
        f"MessageExt [brokerName={broker}, queueId={m.queue_id}, storeSize={m.store_size}, queueOffset={m.queue_offset}, "
        f"sysFlag={m.sys_flag}, bornTimestamp={m.born_timestamp}, bornHost={m.born_host_str}, "
        f"storeTimestamp={m.store_timestamp}, storeHost={m.store_host_str}, msgId={m.msg_id}, "
        f"commitLogOffset={m.commit_log_offset}, reconsumeTimes={m.reconsume_times}, "
        f"Message=[topic={m.topic}, flag={m.flag}, properties={_java_map(m.properties)}, TAGS={m.tags}, KEYS={m.keys}]]"
    )
    doc = {
        "msgId": m.uniq_key or m.msg_id,
        "offsetMsgId": m.msg_id,
        "brokerName": broker,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "tags": m.tags,
        "keys": m.keys,
        "storeTimestamp": m.store_timestamp,
        "bodyBase64": base64.b64encode(m.body).decode(),
    }
    if body is not None:
        doc["body"] = body
    return f"MSGID: {m.uniq_key or m.msg_id} {desc} BODY: {body if body is not None else 'NOT PRINT BODY'}", doc


_SUB_EXPRESSION = Opt("s", "subExpression", "Subscribe Expression (eg: TagA || TagB; default *)", default="*")
_BEGIN = Opt("b", "beginTimestamp", "Begin timestamp [currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]", metavar="TIME")
_END = Opt("e", "endTimestamp", "End timestamp [currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]", metavar="TIME")
_CHARSET = Opt("c", "charsetName", "CharsetName (eg: UTF-8, GBK; default UTF-8)", default="UTF-8", metavar="CHARSET")


def _print_body_charset(args: argparse.Namespace) -> str | None:
    try:
        return codecs.lookup(args.charsetName.strip()).name if args.printBody else None
    except LookupError:
        raise UsageError(f"-c: unknown charset {args.charsetName!r}") from None


@register
class PrintMsg(Command):
    name = "printMsg"
    help = "Print Message Detail"
    description = "Every message of a topic (each queue of its route), optionally by tag and store time."
    options = (
        TOPIC.but(required=True),
        _CHARSET,
        _SUB_EXPRESSION,
        _BEGIN,
        _END,
        Opt("d", "printBody", "print body (true|false, default false)", type=java_bool, default=False, metavar="BOOL"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        charset = _print_body_charset(args)
        route = await admin.examine_topic_route_info(topic)
        begin, end = parse_time(args.beginTimestamp, 0), parse_time(args.endTimestamp, 2**63 - 1)
        lines, docs = [], []
        for mq in sorted(topic_route_to_subscribe_info(topic, route)):
            addr = await queue_addr(admin, topic, mq.broker_name)
            lo, hi = await offset_range(admin, addr, mq, begin, end)
            lines.append(f"minOffset={lo}, maxOffset={hi}, {mq_to_string(mq)}")
            for m in await read_queue(admin, addr, mq, lo, hi, args.subExpression.strip()):
                text, doc = message_line(m, mq.broker_name, charset)
                lines.append(text)
                docs.append(doc)
        out.emit(text="\n".join(lines), data={"topic": topic, "messages": docs})


@register
class PrintMsgByQueue(Command):
    name = "printMsgByQueue"
    help = "Print Message Detail"
    description = "The messages of one queue; -f counts them by tag."
    options = (
        TOPIC.but(required=True),
        Opt("a", "brokerName", "broker name", required=True, metavar="NAME"),
        Opt("i", "queueId", "queue id", required=True, type=int, metavar="ID"),
        _CHARSET,
        _SUB_EXPRESSION,
        _BEGIN,
        _END,
        Opt("p", "print", "print msg (true|false, default false)", type=java_bool, default=False, metavar="BOOL"),
        Opt("d", "printBody", "print body (true|false, default false)", type=java_bool, default=False, metavar="BOOL"),
        Opt(
            "f", "calculate", "count by tag (true|false, default false)", type=java_bool, default=False, metavar="BOOL"
        ),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic, broker = args.topic.strip(), args.brokerName.strip()
        charset = _print_body_charset(args)
        mq = MessageQueue(topic, broker, args.queueId)
        addr = await queue_addr(admin, topic, broker)
        begin, end = parse_time(args.beginTimestamp, 0), parse_time(args.endTimestamp, 2**63 - 1)
        lo, hi = await offset_range(admin, addr, mq, begin, end)
        msgs = await read_queue(admin, addr, mq, lo, hi, args.subExpression.strip())
        lines, docs = [], []
        for m in msgs:
            text, doc = message_line(m, broker, charset)
            docs.append(doc)
            if args.print:
                lines.append(text)
        tags: dict[str, int] = {}
        for m in msgs:
            tags[m.tags or ""] = tags.get(m.tags or "", 0) + 1
        if args.calculate:
            table = Table(Col("#Tag", 30), Col("#Count"))
            for tag, n in sorted(tags.items(), key=lambda t: (-t[1], t[0])):
                table.add(tag, n)
            lines.append(table.render())
        lines.append(f"minOffset={lo}, maxOffset={hi}, messages={len(msgs)}, {mq_to_string(mq)}")
        out.emit(
            text="\n".join(lines),
            data={
                "topic": topic,
                "brokerName": broker,
                "queueId": args.queueId,
                "minOffset": lo,
                "maxOffset": hi,
                "tags": tags,
                "messages": docs,
            },
        )


@register
class ConsumeMessage(Command):
    name = "consumeMessage"
    help = "Consume message"
    description = (
        "Read messages of a topic, of one queue from -o, or by store time, and print them "
        "(the tools consumer reads them; -g's offsets are not changed)."
    )
    options = (
        TOPIC.but(required=True),
        Opt("b", "brokerName", "broker name (with -i)", metavar="NAME"),
        Opt("i", "queueId", "queue id (with -b)", type=int, metavar="ID"),
        Opt("o", "offset", "queue offset (with -b and -i)", type=int, metavar="OFFSET"),
        GROUP.but(help="consumer group name (printed only)"),
        Opt("s", "beginTimestamp", "Begin timestamp [currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]", metavar="TIME"),
        _END,
        Opt("c", "MessageNumber", "how many messages at most (default 128)", type=int, default=128, metavar="N"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        if (args.queueId is not None or args.offset is not None) and not args.brokerName:
            raise UsageError("-i/-o need -b/--brokerName")
        if args.MessageNumber <= 0:
            raise UsageError("-c must be positive")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        route = await admin.examine_topic_route_info(topic)
        mqs = sorted(topic_route_to_subscribe_info(topic, route))
        if args.brokerName:
            mqs = [mq for mq in mqs if mq.broker_name == args.brokerName.strip()]
            if args.queueId is not None:
                mqs = [mq for mq in mqs if mq.queue_id == args.queueId]
        if not mqs:
            raise AdminError(f"no such queue of topic {topic}")
        begin, end = parse_time(args.beginTimestamp, 0), parse_time(args.endTimestamp, 2**63 - 1)
        left = args.MessageNumber
        lines, docs = [], []
        for mq in mqs:
            if left <= 0:
                break
            addr = await queue_addr(admin, topic, mq.broker_name)
            lo, hi = await offset_range(admin, addr, mq, begin, end)
            if args.offset is not None:
                lo = max(lo, args.offset)
            for m in await read_queue(admin, addr, mq, lo, hi, "*", left):
                text, doc = message_line(m, mq.broker_name, "utf-8")
                lines.append(text)
                docs.append(doc)
                left -= 1
        lines.append("Consume ok")
        out.emit(text="\n".join(lines), data={"topic": topic, "messages": docs})
