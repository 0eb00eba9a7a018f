"""Quick tools: ``rmq produce`` and ``rmq consume``.

    rmq produce -t TopicTest -n 10 --body "hello" [--tags a --keys k] [-s 4096] [--batch 16]
    rmq consume -t TopicTest -g my-group [--expression "a || b"] [--from first] [-c 10]
                [--orderly] [--broadcast [--offset-dir DIR]]

The NameServer comes from ``-a/--namesrv``, else ``NAMESRV_ADDR``, else 127.0.0.1:9876.
``produce`` prints one line per send result and exits 0 when every message was stored;
``consume`` prints one line per message and exits after ``--count`` messages, after
``--idle`` seconds without one, or on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import string
import sys
import time
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any

from rmq.client.acl import add_credential_options, credentials
from rmq.client.config import ClientConfig
from rmq.client.consume_concurrently import ConsumeResult
from rmq.client.consume_orderly import ConsumeOrderlyResult
from rmq.client.consumer_base import ConsumeFromWhere, MessageModel
from rmq.client.errors import MQBrokerError, MQClientError, RemotingError
from rmq.client.message import Message, SendResult
from rmq.client.producer import Producer
from rmq.client.push_consumer import PushConsumer
from rmq.client.tls import add_tls_options, tls_options
from rmq.common.properties import KeyValueError, key_value_words
from rmq.protocol.codes import SerializeType
from rmq.protocol.message import MessageExt

__all__ = ["produce_main", "consume_main"]

DEFAULT_NAMESRV = "127.0.0.1:9876"
ASYNC_SEND_WINDOW = 1024  # rmq produce --mode async: sends in flight at most


def _run(coro) -> int:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)


def _start_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.WARNING), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _run_tool(what: str, coro: Coroutine[Any, Any, int]) -> int:
    """Run a tool; a client, broker or network failure is one line on stderr and status 1."""
    try:
        return _run(coro)
    except (MQClientError, MQBrokerError, RemotingError) as e:
        print(f"{what} failed: {e}", file=sys.stderr)
        return 1


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-a",
        "--namesrv",
        default=None,
        help=f"NameServer address(es) a:p;b:p (default $NAMESRV_ADDR or {DEFAULT_NAMESRV})",
    )
    p.add_argument("-t", "--topic", required=True)
    p.add_argument(
        "--serialize", choices=("JSON", "ROCKETMQ"), default="JSON", help="request header encoding (default JSON)"
    )
    p.add_argument("--log-level", default="WARNING")
    add_credential_options(p)
    add_tls_options(p)


def _config(args: argparse.Namespace) -> ClientConfig:
    addr = args.namesrv or os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV
    access_key, secret_key = credentials(args)
    use_tls, tls = tls_options(args)
    return ClientConfig(
        namesrv_addr=addr,
        serialize_type=getattr(SerializeType, args.serialize),
        access_key=access_key,
        secret_key=secret_key,
        use_tls=use_tls,
        tls=tls,
    )


def _format_result(i: int, r: SendResult) -> str:
    mq = r.message_queue
    return (
        f"#{i} SendResult [sendStatus={r.status.value}, msgId={r.msg_id}, "
        f"offsetMsgId={r.offset_msg_id}, messageQueue=[topic={mq.topic}, "
        f"brokerName={mq.broker_name}, queueId={mq.queue_id}], queueOffset={r.queue_offset}]"
    )


# --------------------------------------------------------------------------- produce
async def _sent(i: int, send: Awaitable[SendResult], quiet: bool) -> bool:
    """Await one send and print its result (or its failure); True when it was stored."""
    try:
        r = await send
    except (MQBrokerError, MQClientError, RemotingError) as e:
        print(f"#{i} send failed: {e}", file=sys.stderr, flush=True)
        return False
    if not quiet:
        print(_format_result(i, r), flush=True)
    return True


def _produce_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq produce", description="send messages to a topic")
    _common(p)
    p.add_argument("-n", "--count", type=int, default=1, help="messages to send (default 1)")
    p.add_argument("-g", "--group", default="rmq_produce_tool", help="producer group")
    p.add_argument(
        "--body",
        default=None,
        help="message body ({i} is replaced by the message number); default 'Hello RocketMQ {i}'",
    )
    p.add_argument(
        "-s", "--size", type=int, default=None, help="random alphanumeric body of this many bytes (instead of --body)"
    )
    p.add_argument("--tags", default=None)
    p.add_argument("--keys", default=None, help="message keys, space-separated")
    p.add_argument("-p", "--property", action="append", default=[], metavar="K=V", help="user property (repeatable)")
    p.add_argument("--delay-level", type=int, default=0)
    p.add_argument("--mode", choices=("sync", "async", "oneway"), default="sync")
    p.add_argument("--batch", type=int, default=0, help="send in batches of this size")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    return p


def _body(args: argparse.Namespace, i: int) -> bytes:
    if args.size is not None:
        return "".join(random.choices(string.ascii_letters + string.digits, k=args.size)).encode()
    text = args.body if args.body is not None else "Hello RocketMQ {i}"
    return text.replace("{i}", str(i)).encode("utf-8")


async def _produce(args: argparse.Namespace) -> int:
    try:
        props = key_value_words(args.property)
    except KeyValueError as e:
        print(f"bad property {e.word!r}, expected K=V", file=sys.stderr)
        return 2
    msgs = [
        Message(
            args.topic,
            _body(args, i),
            tags=args.tags,
            keys=args.keys,
            properties=dict(props),
            delay_time_level=args.delay_level,
        )
        for i in range(args.count)
    ]
    failed = 0
    sent = 0
    start = time.monotonic()
    async with Producer(args.group, config=_config(args)) as producer:
        if args.batch > 0:
            for j in range(0, len(msgs), args.batch):
                chunk = msgs[j : j + args.batch]
                try:
                    r = await producer.send_batch(chunk)
                    sent += len(chunk)
                    if not args.quiet:
                        print(_format_result(j, r), flush=True)
                except (MQBrokerError, MQClientError, RemotingError) as e:
                    failed += len(chunk)
                    print(f"#{j} batch send failed: {e}", file=sys.stderr, flush=True)
        elif args.mode == "oneway":
            for i, m in enumerate(msgs):
                try:
                    await producer.send_oneway(m)
                    sent += 1
                except (MQBrokerError, MQClientError, RemotingError) as e:
                    failed += 1
                    print(f"#{i} send failed: {e}", file=sys.stderr, flush=True)
        elif args.mode == "async":
            # A bounded window of sends in flight (RocketMQ 5's backPressureForAsyncSendNum
            # idea): 20 000 at once would queue behind each other past sendMsgTimeout.
            window = ASYNC_SEND_WINDOW
            for base in range(0, len(msgs), window):
                futs = [producer.send_async(m) for m in msgs[base : base + window]]
                for i, f in enumerate(futs, base):
                    if await _sent(i, f, args.quiet):
                        sent += 1
                    else:
                        failed += 1
        else:
            for i, m in enumerate(msgs):
                if await _sent(i, producer.send(m), args.quiet):
                    sent += 1
                else:
                    failed += 1
    elapsed = time.monotonic() - start
    print(f"sent {sent} message(s) to {args.topic}, {failed} failed, in {elapsed:.2f}s", flush=True)
    return 0 if failed == 0 else 1


def produce_main(argv: Sequence[str] | None = None) -> int:
    args = _produce_parser().parse_args(argv)
    _start_logging(args.log_level)
    if args.count < 0:
        print("--count must be >= 0", file=sys.stderr)
        return 2
    return _run_tool("produce", _produce(args))


# --------------------------------------------------------------------------- consume
def _consume_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rmq consume", description="consume a topic (push consumer)")
    _common(p)
    p.add_argument("-g", "--group", required=True, help="consumer group")
    p.add_argument("-e", "--expression", default="*", help="TAG expression (default *)")
    p.add_argument(
        "--from",
        dest="from_where",
        choices=("last", "first", "timestamp"),
        default="last",
        help="where a group without offsets starts (default last)",
    )
    p.add_argument("--timestamp", default=None, help="yyyyMMddHHmmss for --from timestamp")
    p.add_argument("-c", "--count", type=int, default=0, help="exit after this many messages")
    p.add_argument("--idle", type=float, default=0, help="exit after this many seconds without a message (0 = never)")
    p.add_argument("--no-body", action="store_true", help="do not print bodies")
    p.add_argument(
        "--orderly", action="store_true", help="orderly listener: each queue in order, under its broker lock"
    )
    p.add_argument(
        "--broadcast",
        action="store_true",
        help="BROADCASTING: every consumer of the group gets every message; offsets in a local file",
    )
    p.add_argument(
        "--offset-dir", default=None, help="root of the local offset files of --broadcast (default ~/.rocketmq_offsets)"
    )
    return p


_FROM = {
    "last": ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    "first": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    "timestamp": ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
}


def _format_message(m: MessageExt, with_body: bool) -> str:
    line = (
        f"topic={m.topic} queueId={m.queue_id} queueOffset={m.queue_offset} "
        f"msgId={m.uniq_key or m.msg_id} tags={m.tags} keys={m.keys} "
        f"reconsumeTimes={m.reconsume_times} bornHost={m.born_host_str}"
    )
    if with_body:
        line += f" body={m.body.decode('utf-8', 'replace')!r}"
    return line


async def _consume(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover
            pass
    count = 0
    last = time.monotonic()

    def on_message(msgs: list[MessageExt], ctx) -> ConsumeResult:
        nonlocal count, last
        if args.count and count >= args.count:
            # Past --count: leave it unconsumed (not committed) for the next consumer.
            return ConsumeResult.RECONSUME_LATER
        for m in msgs:
            print(_format_message(m, not args.no_body), flush=True)
        last = time.monotonic()
        count += len(msgs)
        if args.count and count >= args.count:
            loop.call_soon_threadsafe(stop.set)
        return ConsumeResult.SUCCESS

    def on_message_orderly(msgs: list[MessageExt], ctx) -> ConsumeOrderlyResult:
        if on_message(msgs, ctx) is ConsumeResult.SUCCESS:
            return ConsumeOrderlyResult.SUCCESS
        ctx.suspend_current_queue_time_millis = 30000
        return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT

    config = _config(args)
    config.local_offset_store_dir = args.offset_dir
    consumer = PushConsumer(
        args.group,
        config=config,
        listener=on_message,
        consume_from_where=_FROM[args.from_where],
        consume_timestamp=args.timestamp,
        consume_thread_max=1,
        send_back_to_broker=False,
        local_retry_delay_ms=60000,
        await_termination_ms=1000,
        message_model=(MessageModel.BROADCASTING if args.broadcast else MessageModel.CLUSTERING),
    )
    if args.orderly:
        consumer.register_message_listener_orderly(on_message_orderly)
    consumer.subscribe(args.topic, args.expression)
    await consumer.start()
    try:
        while not stop.is_set():
            try:
                async with asyncio.timeout(0.2):
                    await stop.wait()
            except TimeoutError:
                pass
            if args.idle and time.monotonic() - last > args.idle:
                break
    finally:
        await consumer.shutdown()
    print(f"consumed {count} message(s) from {args.topic}", file=sys.stderr, flush=True)
    return 0


def consume_main(argv: Sequence[str] | None = None) -> int:
    args = _consume_parser().parse_args(argv)
    _start_logging(args.log_level)
    return _run_tool("consume", _consume(args))
