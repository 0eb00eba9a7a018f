"""sendMessage, sendMsgStatus, checkMsgSendRT, clusterRT (mqadmin's message/ and broker/
commands that send): each starts a producer of its own (rmq.client) with the admin's
NameServers and credentials, sends, and reports what the brokers answered and how long
each send took."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import CLUSTER, TOPIC, AdminError, Command, Opt, Output, UsageError, describe_error, register
from rmq.admin.output import Col, Table
from rmq.client import Message, Producer
from rmq.client.message import SendResult
from rmq.client.routes import topic_route_to_publish_info
from rmq.protocol.bodies import MessageQueue

_PROBE_GROUP = "PID_RMQ_ADMIN_PROBE"  # one group per command run would grow the broker's tables


@asynccontextmanager
async def _producer(admin: MQAdmin, group: str) -> AsyncIterator[Producer]:
    p = Producer(group, config=admin.client_config, send_msg_timeout=admin.timeout_ms)
    await p.start()
    try:
        yield p
    finally:
        await p.shutdown()


def send_result_text(r: SendResult) -> str:
    """SendResult.toString."""
    mq = r.message_queue
    return (
        f"SendResult [sendStatus={r.status.value}, msgId={r.msg_id}, offsetMsgId={r.offset_msg_id}, "
        f"messageQueue=MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}], "
        f"queueOffset={r.queue_offset}]"
    )


def _result_doc(r: SendResult, rt_ms: float | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "sendStatus": r.status.value,
        "msgId": r.msg_id,
        "offsetMsgId": r.offset_msg_id,
        "brokerName": r.message_queue.broker_name,
        "queueId": r.message_queue.queue_id,
        "queueOffset": r.queue_offset,
    }
    if rt_ms is not None:
        doc["rtMs"] = round(rt_ms, 3)
    return doc


async def _timed_send(p: Producer, msg: Message, mq: MessageQueue | None = None) -> tuple[SendResult, float]:
    start = time.perf_counter()
    r = await p.send(msg, queue=mq)
    return r, (time.perf_counter() - start) * 1000


def _positive(args: argparse.Namespace, *names: str) -> None:
    for n in names:
        if getattr(args, n) <= 0:
            raise UsageError(f"--{n} must be positive")


@register
class SendMessage(Command):
    name = "sendMessage"
    help = "Send a message"
    options = (
        TOPIC.but(required=True),
        Opt("p", "body", "UTF-8 string format of the message body", required=True),
        Opt("k", "key", "Message keys", metavar="KEYS"),
        Opt("c", "tags", "Message tags", metavar="TAGS"),
        Opt("b", "broker", "Send message to target broker (with -i)", metavar="NAME"),
        Opt("i", "qid", "Send message to target queue (with -b)", type=int, metavar="ID"),
        Opt("m", "msgTraceEnable", "ignored: rmq admin sends no trace", metavar="BOOL"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        if (args.broker is None) != (args.qid is None):
            raise UsageError("-b/--broker and -i/--qid go together")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        msg = Message(topic, args.body.encode("utf-8"), tags=args.tags, keys=args.key)
        mq = MessageQueue(topic, args.broker.strip(), args.qid) if args.broker else None
        async with _producer(admin, _PROBE_GROUP) as p:
            r = await p.send(msg, queue=mq)
        table = Table(Col("#Broker Name", 32), Col("#QID", 4), Col("#Send Result", 16), Col("#MsgId"))
        table.add(r.message_queue.broker_name, r.message_queue.queue_id, r.status.value, r.msg_id)
        out.emit(text=table.render(), data={"topic": topic, **_result_doc(r)})


@register
class SendMsgStatus(Command):
    name = "sendMsgStatus"
    help = "send msg to broker."
    description = "Send messages to the broker's own topic (named after it) and print each answer and its time."
    options = (
        Opt("b", "brokerName", "Broker Name", required=True, metavar="NAME"),
        Opt("s", "messageSize", "Message Size, Default: 128", type=int, default=128, metavar="BYTES"),
        Opt("c", "count", "send message count, Default: 50", type=int, default=50, metavar="N"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        _positive(args, "messageSize", "count")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        broker = args.brokerName.strip()
        lines, docs = [], []
        async with _producer(admin, _PROBE_GROUP) as p:
            for _ in range(args.count):
                r, rt = await _timed_send(p, Message(broker, b"x" * args.messageSize))
                lines.append(f"rt={round(rt)}ms, SendResult={send_result_text(r)}")
                docs.append(_result_doc(r, rt))
        out.emit(text="\n".join(lines), data={"brokerName": broker, "sends": docs})


@register
class CheckMsgSendRT(Command):
    name = "checkMsgSendRT"
    help = "check message send response time"
    description = "Send messages to each queue of the topic in turn; each send's result and time, and the average."
    options = (
        TOPIC.but(required=True),
        Opt("a", "amount", "message amount | default 100", type=int, default=100, metavar="N"),
        Opt("s", "size", "message size | default 128 Byte", type=int, default=128, metavar="BYTES"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        _positive(args, "amount", "size")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        route = await admin.examine_topic_route_info(topic)
        mqs = topic_route_to_publish_info(topic, route).message_queue_list
        if not mqs:
            raise AdminError(f"topic {topic} has no writable queue")
        table = Table(Col("#Broker Name", 32), Col("#QID", 4), Col("#Send Result", 16), Col("#RT"))
        docs, total = [], 0.0
        async with _producer(admin, _PROBE_GROUP) as p:
            for i in range(args.amount):
                mq = mqs[i % len(mqs)]
                try:
                    r, rt = await _timed_send(p, Message(topic, b"x" * args.size), mq)
                    ok = r.ok
                except Exception as e:
                    out.warn(f"send to {mq.broker_name}:{mq.queue_id}: {describe_error(e)}")
                    ok, rt = False, 0.0
                total += rt
                table.add(mq.broker_name, mq.queue_id, str(ok).lower(), f"{rt:.0f}")
                docs.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, "ok": ok, "rtMs": round(rt, 3)})
        avg = total / args.amount
        out.emit(
            text=f"{table.render()}\nAvg RT: {avg:.2f}", data={"topic": topic, "sends": docs, "avgRtMs": round(avg, 3)}
        )


@register
class ClusterRT(Command):
    name = "clusterRT"
    help = "List All clusters Message Send RT"
    description = (
        "Send messages to each master's own topic and print, per cluster and broker, the "
        "average send time and how many sends succeeded and failed. One round, or one "
        "every -i seconds for -r rounds (mqadmin: forever)."
    )
    options = (
        Opt("a", "amount", "message amount per broker | default 100", type=int, default=100, metavar="N"),
        Opt("s", "size", "message size | default 128 Byte", type=int, default=128, metavar="BYTES"),
        CLUSTER.but(help="cluster name | default every cluster"),
        Opt("i", "interval", "seconds between rounds | default 10", type=int, default=10, metavar="S"),
        Opt("r", "rounds", "how many rounds | default 1", type=int, default=1, metavar="N"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        _positive(args, "amount", "size", "interval", "rounds")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        ci = await admin.examine_broker_cluster_info()
        clusters = [args.clusterName.strip()] if args.clusterName else sorted(ci.cluster_addr_table)
        async with _producer(admin, _PROBE_GROUP) as p:
            for n in range(args.rounds):
                if n:
                    await asyncio.sleep(args.interval)
                table = Table(
                    Col("#Cluster Name", 24),
                    Col("#Broker Name", 32),
                    Col("#RT", 12),
                    Col("#successCount", 14),
                    Col("#failCount"),
                )
                rows = []
                for cluster in clusters:
                    for name in await admin.fetch_broker_name_by_cluster_name(cluster):
                        ok = failed = 0
                        total = 0.0
                        for _ in range(args.amount):
                            try:
                                r, rt = await _timed_send(p, Message(name, b"x" * args.size))
                            except Exception:
                                failed += 1
                                continue
                            if r.ok:
                                ok += 1
                                total += rt
                            else:
                                failed += 1
                        avg = total / ok if ok else 0.0
                        table.add(cluster, name, f"{avg:.2f}", ok, failed)
                        rows.append(
                            {
                                "cluster": cluster,
                                "brokerName": name,
                                "rtMs": round(avg, 3),
                                "successCount": ok,
                                "failCount": failed,
                            }
                        )
                out.emit(text=table.render(), data={"brokers": rows})
