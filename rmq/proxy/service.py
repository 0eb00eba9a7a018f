"""``apache.rocketmq.v2.MessagingService`` over grpc.aio: RocketMQ 5's cluster-mode proxy.

Every unary RPC answers gRPC OK with a v2 ``Status`` in the response (``ResponseBuilder``);
a client's mistake is answered with the code naming the field, a broker's failure code is
mapped (``pop_client.broker_error``), anything unexpected is logged once and answered
INTERNAL_SERVER_ERROR. Served: QueryRoute, Heartbeat, NotifyClientTermination, Telemetry,
SendMessage, EndTransaction, QueryAssignment, ReceiveMessage / AckMessage /
ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue (through the broker's POP codes).
PullMessage, UpdateOffset, GetOffset and QueryOffset answer NOT_IMPLEMENTED; RecallMessage and
SyncLiteSubscription answer UNSUPPORTED.

State is memory only: the Telemetry sessions (settings and the push channel of each client)
and the route cache. Transaction ids and receipt handles describe themselves.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from rmq.client.errors import MQBrokerError, MQClientError
from rmq.client.message import SendStatus
from rmq.common.clock import now_ms
from rmq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from rmq.protocol.message import MessageConst, MessageExt, SysFlag, decode_message_id
from rmq.proxy import pb
from rmq.proxy.auth import PUB, SUB, Authenticator
from rmq.proxy.brokers import BrokerAccess
from rmq.proxy.config import ProxyConfig
from rmq.proxy.convert import (
    ALL_TYPES,
    ProxyError,
    TransactionId,
    accept_types,
    endpoints_of,
    message_group_queue,
    plan_send,
    route_to_queues,
    status,
    to_v2_message,
    validate_group,
    validate_topic,
)
from rmq.proxy.metrics import ProxyMetrics
from rmq.proxy.pop_client import PopClient, ReceiptHandle, broker_error
from rmq.proxy.renew import Renewer
from rmq.remoting.errors import RemotingError, RemotingTimeoutError

__all__ = ["MessagingService", "RequestContext", "Session"]

log = logging.getLogger("rmq.proxy")

CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
SEND_STATUS_CODE = {
    SendStatus.SEND_OK: "OK",
    SendStatus.FLUSH_DISK_TIMEOUT: "MASTER_PERSISTENCE_TIMEOUT",
    SendStatus.FLUSH_SLAVE_TIMEOUT: "SLAVE_PERSISTENCE_TIMEOUT",
    SendStatus.SLAVE_NOT_AVAILABLE: "HA_NOT_AVAILABLE",
}


@dataclass
class RequestContext:
    client_id: str
    peer_host: str
    metadata: dict[str, str]
    account: Any = None
    deadline_s: float | None = None


@dataclass(eq=False)
class Session:
    """One client's Telemetry stream: its last Settings and the channel to push commands."""

    client_id: str
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    settings: Any = None
    #: topics whose transaction checks this client can answer
    topics: set[str] = field(default_factory=set)

    @property
    def client_type(self) -> int:
        return self.settings.client_type if self.settings is not None else pb.ClientType.CLIENT_TYPE_UNSPECIFIED


def _peer_host(peer: str) -> str:
    """grpc peer ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` -> host."""
    _, _, rest = peer.partition(":")
    host = rest.rsplit(":", 1)[0]
    return host.strip("[]")


def _millis(d: Any) -> int:
    return int(d.seconds * 1000 + d.nanos // 1_000_000)


class MessagingService:
    def __init__(
        self,
        cfg: ProxyConfig,
        brokers: BrokerAccess,
        auth: Authenticator,
        metrics: ProxyMetrics,
        advertise: tuple[str, int],
        *,
        peer_resolver: Callable[[str], str | None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.brokers = brokers
        self.pop = PopClient(brokers.api)
        self.renewer = Renewer(self.pop, self._broker_addr, cfg.sendMessageTimeoutMillis)
        self.auth = auth
        self.metrics = metrics
        self.limits = cfg.send_limits()
        self.advertise = advertise
        self.sessions: dict[str, set[Session]] = {}
        #: the client's address behind a gRPC peer (the TLS front's pipe), None: the peer itself
        self.peer_resolver = peer_resolver
        brokers.on_check = self._on_check_transaction_state

    # ================================================================== plumbing
    def _context(self, context: grpc.aio.ServicerContext) -> RequestContext:
        md = {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        client_id = md.get("x-mq-client-id", "")
        if not client_id.strip():
            raise ProxyError(pb.Code.CLIENT_ID_REQUIRED, "x-mq-client-id header is required")
        grpc_peer = context.peer() or ""
        peer = (self.peer_resolver(grpc_peer) if self.peer_resolver is not None else None) or _peer_host(grpc_peer)
        try:
            account = self.auth.authenticate(md, peer)
        except ProxyError as e:
            log.info("client %s from %s refused: %s", client_id, peer, e.message)
            raise
        remaining = context.time_remaining()
        return RequestContext(client_id, peer, md, account, remaining)

    @staticmethod
    def _error_of(e: BaseException, rpc: str) -> ProxyError:
        if isinstance(e, ProxyError):
            return e
        if isinstance(e, MQBrokerError):
            return broker_error(e)
        if isinstance(e, RemotingTimeoutError):
            return ProxyError(pb.Code.PROXY_TIMEOUT, f"broker did not answer in time: {e}")
        if isinstance(e, RemotingError | MQClientError | OSError):
            log.warning("%s: broker or NameServer unreachable: %s", rpc, e)
            return ProxyError(pb.Code.INTERNAL_SERVER_ERROR, f"broker or NameServer unreachable: {e}")
        log.error("%s failed", rpc, exc_info=e)
        return ProxyError(pb.Code.INTERNAL_SERVER_ERROR, f"internal error: {type(e).__name__}")

    def _unary(
        self, rpc: str, fn: Callable[[Any, RequestContext], Awaitable[Any]], resp_name: str
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
        Resp = pb.msg(resp_name)

        async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start = time.perf_counter()
            try:
                resp = await fn(request, self._context(context))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                err = self._error_of(e, rpc)
                resp = Resp()
                resp.status.CopyFrom(status(err.code, err.message))
            code = resp.status.code
            self.metrics.observe(rpc, pb.Code.name(code), (time.perf_counter() - start) * 1000)
            return resp

        return handler

    def _server_stream(
        self, rpc: str, fn: Callable[[Any, RequestContext], AsyncIterator[Any]], resp_name: str
    ) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
        Resp = pb.msg(resp_name)

        async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            start = time.perf_counter()
            code = pb.Code.OK
            self.metrics.stream_opened(rpc)
            try:
                try:
                    async for frame in fn(request, self._context(context)):
                        if frame.WhichOneof("content") == "status":
                            code = frame.status.code
                        yield frame
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    err = self._error_of(e, rpc)
                    code = err.code
                    yield Resp(status=status(err.code, err.message))
            finally:
                self.metrics.stream_closed(rpc)
                self.metrics.observe(rpc, pb.Code.name(code), (time.perf_counter() - start) * 1000)

        return handler

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(name: str, fn: Callable[[Any, RequestContext], Awaitable[Any]]) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(name, fn, f"{name}Response"),
                request_deserializer=pb.msg(f"{name}Request").FromString,
                response_serializer=pb.msg(f"{name}Response").SerializeToString,
            )

        def server_stream(name: str, fn: Callable[[Any, RequestContext], AsyncIterator[Any]]) -> grpc.RpcMethodHandler:
            return grpc.unary_stream_rpc_method_handler(
                self._server_stream(name, fn, f"{name}Response"),
                request_deserializer=pb.msg(f"{name}Request").FromString,
                response_serializer=pb.msg(f"{name}Response").SerializeToString,
            )

        telemetry_cls = pb.msg("TelemetryCommand")
        methods = {
            "QueryRoute": unary("QueryRoute", self.query_route),
            "Heartbeat": unary("Heartbeat", self.heartbeat),
            "SendMessage": unary("SendMessage", self.send_message),
            "QueryAssignment": unary("QueryAssignment", self.query_assignment),
            "ReceiveMessage": server_stream("ReceiveMessage", self.receive_message),
            "AckMessage": unary("AckMessage", self.ack_message),
            "ForwardMessageToDeadLetterQueue": unary(
                "ForwardMessageToDeadLetterQueue", self.forward_message_to_dead_letter_queue
            ),
            "PullMessage": server_stream("PullMessage", self.pull_message),
            "UpdateOffset": unary("UpdateOffset", self._not_implemented("UpdateOffset")),
            "GetOffset": unary("GetOffset", self._not_implemented("GetOffset")),
            "QueryOffset": unary("QueryOffset", self._not_implemented("QueryOffset")),
            "EndTransaction": unary("EndTransaction", self.end_transaction),
            "Telemetry": grpc.stream_stream_rpc_method_handler(
                self.telemetry,
                request_deserializer=telemetry_cls.FromString,
                response_serializer=telemetry_cls.SerializeToString,
            ),
            "NotifyClientTermination": unary("NotifyClientTermination", self.notify_client_termination),
            "ChangeInvisibleDuration": unary("ChangeInvisibleDuration", self.change_invisible_duration),
            "RecallMessage": unary("RecallMessage", self._unsupported("RecallMessage needs timer messages")),
            "SyncLiteSubscription": unary("SyncLiteSubscription", self._unsupported("lite topics are not supported")),
        }
        return grpc.method_handlers_generic_handler(pb.SERVICE, methods)

    @staticmethod
    def _not_implemented(rpc: str) -> Callable[[Any, RequestContext], Awaitable[Any]]:
        async def fn(request: Any, ctx: RequestContext) -> Any:
            raise ProxyError(pb.Code.NOT_IMPLEMENTED, f"{rpc} is not served by rmq proxy")

        return fn

    @staticmethod
    def _unsupported(why: str) -> Callable[[Any, RequestContext], Awaitable[Any]]:
        async def fn(request: Any, ctx: RequestContext) -> Any:
            raise ProxyError(pb.Code.UNSUPPORTED, why)

        return fn

    @staticmethod
    def _ok(resp_name: str, **fields: Any) -> Any:
        resp = pb.msg(resp_name)(**fields)
        resp.status.CopyFrom(status(pb.Code.OK))
        return resp

    def _endpoints(self, requested: Any | None) -> Any:
        if requested is not None and len(requested.addresses) > 0:
            return requested
        return endpoints_of(*self.advertise)

    async def _route(self, topic: str) -> Any:
        route = await self.brokers.route(topic)
        if route is None:
            raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"topic {topic} not found (and no broker allows auto-creation)")
        return route

    async def _broker_addr(self, topic: str, broker_name: str) -> str:
        route = await self._route(topic)
        addr = route.master_addr(broker_name)
        if addr is None:
            route = await self.brokers.route(topic, refresh=True)
            addr = route.master_addr(broker_name) if route is not None else None
        if addr is None:
            raise ProxyError(pb.Code.NOT_FOUND, f"broker {broker_name} has no master serving topic {topic}")
        return addr

    # ================================================================== route
    async def query_route(self, req: Any, ctx: RequestContext) -> Any:
        topic = req.topic.name
        validate_topic(topic, field="topic.name")
        route = await self._route(topic)
        types = accept_types(await self.brokers.topic_message_type(route)) if route.exists else ALL_TYPES
        endpoints = self._endpoints(req.endpoints if req.HasField("endpoints") else None)
        return self._ok("QueryRouteResponse", message_queues=route_to_queues(req.topic, route.data, endpoints, types))

    async def query_assignment(self, req: Any, ctx: RequestContext) -> Any:
        topic, group = req.topic.name, req.group.name
        validate_topic(topic, field="topic.name")
        validate_group(group, field="group.name")
        self.auth.authorize(ctx.account, topic, SUB)
        route = await self._route(topic)
        endpoints = self._endpoints(req.endpoints if req.HasField("endpoints") else None)
        assignments = []
        seen: set[str] = set()
        for mq in route_to_queues(req.topic, route.data, endpoints):
            if mq.broker.name in seen or mq.permission not in (pb.Permission.READ, pb.Permission.READ_WRITE):
                continue
            seen.add(mq.broker.name)
            mq.id = -1  # POP over every queue of that broker
            mq.permission = pb.Permission.READ_WRITE
            a = pb.msg("Assignment")()
            a.message_queue.CopyFrom(mq)
            assignments.append(a)
        if not assignments:
            raise ProxyError(pb.Code.FORBIDDEN, f"topic {topic} has no readable queue")
        return self._ok("QueryAssignmentResponse", assignments=assignments)

    # ================================================================== clients
    async def heartbeat(self, req: Any, ctx: RequestContext) -> Any:
        for s in self.sessions.get(ctx.client_id, ()):
            if s.topics:
                await self.brokers.register_producer_groups(sorted(s.topics))
        return self._ok("HeartbeatResponse")

    async def notify_client_termination(self, req: Any, ctx: RequestContext) -> Any:
        log.info("client %s terminated (group %s)", ctx.client_id, req.group.name if req.HasField("group") else "-")
        for s in self.sessions.pop(ctx.client_id, set()):
            s.outbox.put_nowait(None)
        await self.renewer.release_client(ctx.client_id)
        return self._ok("NotifyClientTerminationResponse")

    def _settings_reply(self, s: Any, group_cfg: dict[str, object] | None = None) -> Any:
        out = pb.msg("Settings")()
        out.CopyFrom(s)
        kind = s.WhichOneof("pub_sub")
        if kind == "publishing":
            out.backoff_policy.Clear()
            bp = out.backoff_policy
            bp.max_attempts = self.cfg.grpcClientProducerMaxAttempts
            eb = bp.exponential_backoff
            eb.initial.FromMilliseconds(self.cfg.grpcClientProducerBackoffInitialMillis)
            eb.max.FromMilliseconds(self.cfg.grpcClientProducerBackoffMaxMillis)
            eb.multiplier = float(self.cfg.grpcClientProducerBackoffMultiplier)
            out.publishing.max_body_size = self.cfg.maxMessageSize
            out.publishing.validate_message_type = True
        elif kind == "subscription":
            sub = out.subscription
            if sub.HasField("group"):
                validate_group(sub.group.name, field="settings.subscription.group.name")
            gc = group_cfg or {}
            # the group's consumeMessageOrderly (rmq admin updateSubGroup -o true) and retryMaxTimes + 1
            sub.fifo = gc.get("consumeMessageOrderly") in (True, "true")
            sub.receive_batch_size = 32
            sub.long_polling_timeout.FromMilliseconds(self.cfg.grpcClientConsumerMaxLongPollingTimeoutMillis)
            out.backoff_policy.Clear()
            bp = out.backoff_policy
            retry_max = gc.get("retryMaxTimes")
            bp.max_attempts = (
                int(retry_max) + 1 if isinstance(retry_max, int | str) and str(retry_max).isdigit()
                else self.cfg.consumerMaxAttempts
            )  # fmt: skip
            for secs in CONSUMER_BACKOFF_S:
                bp.customized_backoff.next.add().FromSeconds(secs)
        else:
            raise ProxyError(pb.Code.BAD_REQUEST, "settings.pub_sub is unset (neither publishing nor subscription)")
        out.metric.Clear()
        out.metric.on = False
        return out

    async def _group_config_of(self, settings: Any) -> dict[str, object] | None:
        if settings.WhichOneof("pub_sub") != "subscription" or not settings.subscription.group.name:
            return None
        sub = settings.subscription
        topic = next((e.topic.name for e in sub.subscriptions if e.topic.name), None)
        try:
            return await self.brokers.group_config(sub.group.name, topic)
        except (MQClientError, MQBrokerError, RemotingError, OSError) as e:
            log.debug("group %s: config lookup failed: %s", sub.group.name, e)
            return None

    async def _read_telemetry(self, requests: AsyncIterator[Any], session: Session, ctx: RequestContext) -> None:
        Cmd = pb.msg("TelemetryCommand")
        try:
            async for cmd in requests:
                which = cmd.WhichOneof("command")
                if which == "settings":
                    try:
                        reply = self._settings_reply(cmd.settings, await self._group_config_of(cmd.settings))
                        topics = {t.name for t in reply.publishing.topics if t.name}
                        for t in topics:
                            self.auth.authorize(ctx.account, t, PUB)
                    except ProxyError as e:
                        session.outbox.put_nowait(Cmd(status=status(e.code, e.message)))
                        continue
                    session.settings = reply
                    session.outbox.put_nowait(Cmd(status=status(pb.Code.OK), settings=reply))
                    if topics:
                        session.topics |= topics
                        await self.brokers.register_producer_groups(sorted(topics))
                    log.info(
                        "client %s settings: %s %s",
                        ctx.client_id,
                        pb.ClientType.name(reply.client_type),
                        ",".join(sorted(session.topics))
                        or (reply.subscription.group.name if reply.HasField("subscription") else ""),
                    )
                else:
                    log.debug("client %s telemetry %s ignored", ctx.client_id, which)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as e:
            log.debug("client %s telemetry read ended: %s", ctx.client_id, e.code())
        except Exception as e:
            log.warning("client %s telemetry stream failed: %r", ctx.client_id, e)
        finally:
            session.outbox.put_nowait(None)

    async def telemetry(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            ctx = self._context(context)
        except ProxyError as e:
            grpc_code = (
                grpc.StatusCode.UNAUTHENTICATED if e.code == pb.Code.UNAUTHORIZED else grpc.StatusCode.INVALID_ARGUMENT
            )
            self.metrics.observe("Telemetry", pb.Code.name(e.code), 0.0)
            await context.abort(grpc_code, e.message)
            return
        session = Session(ctx.client_id)
        self.sessions.setdefault(ctx.client_id, set()).add(session)
        self.metrics.stream_opened("Telemetry")
        reader = asyncio.get_running_loop().create_task(
            self._read_telemetry(requests, session, ctx), name=f"telemetry-read {ctx.client_id}"
        )
        try:
            while True:
                item = await session.outbox.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            group = self.sessions.get(ctx.client_id)
            if group is not None:
                group.discard(session)
                if not group:
                    del self.sessions[ctx.client_id]
            if ctx.client_id not in self.sessions:  # the client's last stream: it is gone
                await self.renewer.release_client(ctx.client_id)
            self.metrics.stream_closed("Telemetry")

    # ================================================================== produce
    async def send_message(self, req: Any, ctx: RequestContext) -> Any:
        if not req.messages:
            raise ProxyError(pb.Code.BAD_REQUEST, "messages is empty")
        topic = req.messages[0].topic.name
        now = now_ms()
        plans = [plan_send(m, now_ms=now, limits=self.limits, topic=topic) for m in req.messages]
        self.auth.authorize(ctx.account, topic, PUB)
        if any(p.message_type == pb.MessageType.TRANSACTION for p in plans):
            for s in self.sessions.get(ctx.client_id, ()):
                s.topics.add(topic)
            await self.brokers.register_producer_groups([topic])
        route = await self._route(topic)
        if route.exists:
            types = accept_types(await self.brokers.topic_message_type(route))
            for plan in plans:
                mtype = plan.message_type or pb.MessageType.NORMAL
                if mtype not in types:
                    raise ProxyError(
                        pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                        f"topic {topic} accepts {'/'.join(pb.MessageType.name(t) for t in types)} messages, "
                        f"not {pb.MessageType.name(mtype)}",
                    )
        queues = route.writable_queues()
        if not queues:
            raise ProxyError(pb.Code.FORBIDDEN, f"topic {topic} has no writable queue")
        entries = []
        for plan in plans:
            if plan.message_group is not None:
                bname, qid = queues[message_group_queue(plan.message_group, len(queues))]
            else:
                bname, qid = queues[route.rr.get_and_increment() % len(queues)]
            entry = pb.msg("SendResultEntry")()
            entry.message_id = plan.message_id
            try:
                addr = route.master_addr(bname) or await self._broker_addr(topic, bname)
                result = await self.brokers.send(plan, bname, qid, addr)
            except Exception as e:
                err = self._error_of(e, "SendMessage")
                if isinstance(e, MQBrokerError | RemotingError):
                    await self.brokers.route(topic, refresh=True)
                entry.status.CopyFrom(status(err.code, err.message))
                entries.append(entry)
                continue
            entry.status.CopyFrom(status(getattr(pb.Code, SEND_STATUS_CODE[result.status])))
            entry.offset = result.queue_offset
            if plan.sys_flag & SysFlag.TRANSACTION_PREPARED_TYPE:
                offset_msg_id = result.offset_msg_id or ""
                _, _, clo = decode_message_id(offset_msg_id)
                entry.transaction_id = TransactionId(bname, clo, result.queue_offset, offset_msg_id).encode()
            log.debug("client %s sent %s to %s/%s/%d", ctx.client_id, plan.message_id, topic, bname, qid)
            entries.append(entry)
        codes = {e.status.code for e in entries}
        resp = pb.msg("SendMessageResponse")(entries=entries)
        if len(codes) == 1:
            resp.status.CopyFrom(entries[0].status)
        else:
            resp.status.CopyFrom(status(pb.Code.MULTIPLE_RESULTS))
        return resp

    async def end_transaction(self, req: Any, ctx: RequestContext) -> Any:
        topic = req.topic.name
        validate_topic(topic, field="topic.name")
        if not req.transaction_id.strip():
            raise ProxyError(pb.Code.INVALID_TRANSACTION_ID, "transaction_id is blank")
        tid = TransactionId.decode(req.transaction_id)
        if req.resolution == pb.TransactionResolution.COMMIT:
            commit_or_rollback = SysFlag.TRANSACTION_COMMIT_TYPE
        elif req.resolution == pb.TransactionResolution.ROLLBACK:
            commit_or_rollback = SysFlag.TRANSACTION_ROLLBACK_TYPE
        else:
            raise ProxyError(pb.Code.BAD_REQUEST, "resolution is neither COMMIT nor ROLLBACK")
        self.auth.authorize(ctx.account, topic, PUB)
        addr = await self._broker_addr(topic, tid.broker_name)
        header = EndTransactionRequestHeader(
            topic,
            tid.tran_state_table_offset,
            tid.commit_log_offset,
            commit_or_rollback,
            req.message_id,
            topic,
            req.source == pb.TransactionSource.SOURCE_SERVER_CHECK,
            req.message_id,
        )
        await self.brokers.end_transaction(addr, header)
        log.info(
            "client %s ended transaction %s of %s: %s",
            ctx.client_id,
            req.message_id,
            topic,
            pb.TransactionResolution.name(req.resolution),
        )
        return self._ok("EndTransactionResponse")

    def _on_check_transaction_state(
        self, addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        """A broker's CHECK_TRANSACTION_STATE -> recover_orphaned_transaction_command on the
        Telemetry stream of a producer of that topic (the producer group is the topic)."""
        topic = msg.topic
        group = msg.properties.get(MessageConst.PRODUCER_GROUP, topic)
        candidates = [s for ss in self.sessions.values() for s in ss if group in s.topics]
        uniq = msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or header.msg_id or msg.msg_id
        if not candidates:
            log.info(
                "transaction check of %s (topic %s) from %s: no producer of the topic connected", uniq, topic, addr
            )
            return
        broker_name = self.brokers.broker_name_of(addr)
        if broker_name is None:
            log.warning("transaction check of %s from %s: broker name unknown, dropped", uniq, addr)
            return
        session = random.choice(candidates)
        offset_msg_id = header.offset_msg_id or msg.msg_id
        tid = TransactionId(broker_name, header.commit_log_offset, header.tran_state_table_offset, offset_msg_id)
        cmd = pb.msg("TelemetryCommand")()
        cmd.recover_orphaned_transaction_command.message.CopyFrom(to_v2_message(msg, now_ms=now_ms()))
        cmd.recover_orphaned_transaction_command.transaction_id = tid.encode()
        session.outbox.put_nowait(cmd)
        log.info("transaction check of %s (topic %s) from %s sent to client %s", uniq, topic, addr, session.client_id)

    # ================================================================== consume (POP)
    def _consumer_settings(self, client_id: str) -> tuple[bool, int]:
        for s in self.sessions.get(client_id, ()):
            if s.settings is not None and s.settings.HasField("subscription"):
                sub = s.settings.subscription
                return sub.fifo, s.settings.backoff_policy.max_attempts or self.cfg.consumerMaxAttempts
        return False, self.cfg.consumerMaxAttempts

    async def receive_message(self, req: Any, ctx: RequestContext) -> AsyncIterator[Any]:
        group, topic = req.group.name, req.message_queue.topic.name
        validate_group(group, field="group.name")
        validate_topic(topic, field="message_queue.topic.name")
        self.auth.authorize(ctx.account, topic, SUB)
        self.auth.authorize(ctx.account, group, SUB, group=True)
        route = await self._route(topic)
        bname = req.message_queue.broker.name
        if not bname:
            readable = [n for n, _ in route.writable_queues()]
            if not readable:
                raise ProxyError(pb.Code.FORBIDDEN, f"topic {topic} has no readable queue")
            bname = readable[0]
        addr = await self._broker_addr(topic, bname)
        cfg = self.cfg
        poll = (
            _millis(req.long_polling_timeout)
            if req.HasField("long_polling_timeout")
            else cfg.grpcClientConsumerMaxLongPollingTimeoutMillis
        )
        poll = min(
            max(poll, cfg.grpcClientConsumerMinLongPollingTimeoutMillis),
            cfg.grpcClientConsumerMaxLongPollingTimeoutMillis,
        )
        if ctx.deadline_s is not None:
            left = int(ctx.deadline_s * 1000) - 1000  # leave time for the answer to travel
            if left < cfg.grpcClientConsumerMinLongPollingTimeoutMillis:
                raise ProxyError(pb.Code.ILLEGAL_POLLING_TIME, f"the call's deadline leaves {left} ms to poll")
            poll = min(poll, left)
        fifo, max_attempts = self._consumer_settings(ctx.client_id)
        async for frame in self.pop.receive(
            addr,
            bname,
            req,
            group=group,
            topic=topic,
            fifo=fifo,
            max_attempts=max_attempts,
            poll_ms=poll,
            now_ms=now_ms(),
            timeout_ms=poll + cfg.sendMessageTimeoutMillis,
        ):
            if req.auto_renew and frame.WhichOneof("content") == "message":
                self.renewer.track(ctx.client_id, group, topic, frame.message.system_properties.receipt_handle)
            yield frame

    async def pull_message(self, req: Any, ctx: RequestContext) -> AsyncIterator[Any]:
        raise ProxyError(pb.Code.NOT_IMPLEMENTED, "PullMessage is not served by rmq proxy")
        yield  # pragma: no cover - makes this an async generator

    def _consumer_names(self, req: Any, ctx: RequestContext) -> tuple[str, str]:
        """(group, topic) of an Ack / ChangeInvisibleDuration / ForwardToDLQ request, checked."""
        group, topic = req.group.name, req.topic.name
        validate_group(group, field="group.name")
        validate_topic(topic, field="topic.name")
        self.auth.authorize(ctx.account, group, SUB, group=True)
        return group, topic

    def _current_handle(self, ctx: RequestContext, group: str, text: str) -> ReceiptHandle:
        """The handle the client holds, or the renewed one this proxy has for it (auto_renew)."""
        return self.renewer.take(ctx.client_id, group, text) or ReceiptHandle.decode(text)

    async def ack_message(self, req: Any, ctx: RequestContext) -> Any:
        group, topic = self._consumer_names(req, ctx)
        entries = []
        now = now_ms()
        for e in req.entries:
            out = pb.msg("AckMessageResultEntry")(message_id=e.message_id, receipt_handle=e.receipt_handle)
            try:
                handle = self._current_handle(ctx, group, e.receipt_handle)
                if handle.is_expired(now):
                    raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
                addr = await self._broker_addr(topic, handle.broker_name)
                await self.pop.ack_handle(group, topic, handle, addr, self.cfg.sendMessageTimeoutMillis)
                out.status.CopyFrom(status(pb.Code.OK))
            except Exception as exc:
                err = self._error_of(exc, "AckMessage")
                out.status.CopyFrom(status(err.code, err.message))
            entries.append(out)
        resp = pb.msg("AckMessageResponse")(entries=entries)
        codes = {e.status.code for e in entries}
        resp.status.CopyFrom(
            entries[0].status if len(codes) == 1 else status(pb.Code.MULTIPLE_RESULTS if codes else pb.Code.OK)
        )
        return resp

    async def change_invisible_duration(self, req: Any, ctx: RequestContext) -> Any:
        group, topic = self._consumer_names(req, ctx)
        handle = self._current_handle(ctx, group, req.receipt_handle)
        if handle.is_expired(now_ms()):
            raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
        addr = await self._broker_addr(topic, handle.broker_name)
        new = await self.pop.change_invisible(
            group, topic, handle, _millis(req.invisible_duration), addr, self.cfg.sendMessageTimeoutMillis
        )
        return self._ok("ChangeInvisibleDurationResponse", receipt_handle=new.encode())

    async def forward_message_to_dead_letter_queue(self, req: Any, ctx: RequestContext) -> Any:
        group, topic = self._consumer_names(req, ctx)
        handle = self._current_handle(ctx, group, req.receipt_handle)
        addr = await self._broker_addr(topic, handle.broker_name)
        await self.pop.forward_to_dlq(addr, None, handle, group, topic, self.cfg.sendMessageTimeoutMillis)
        return self._ok("ForwardMessageToDeadLetterQueueResponse")
