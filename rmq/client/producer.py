"""Producer (Java ``DefaultMQProducer`` + ``DefaultMQProducerImpl``).

    async with Producer("my-group", "127.0.0.1:9876") as p:
        r = await p.send(Message("T", b"hello", tags="a", keys="k1"))

Sends:

* ``send`` — awaited; up to ``1 + retry_times_when_send_failed`` attempts (3) on network
  errors and the retryable codes, each retry on another broker than the last when the
  topic has one; the whole call stays within ``send_msg_timeout``. A message that was
  not stored raises ``MQBrokerError(code, remark)``. A failed attempt also refreshes
  the topic's route from the NameServer (at most every ROUTE_REFRESH_ON_ERROR_MS per
  topic; Java waits for its 30 s poll), so sends follow a failed-over master within
  a retry or two.
* ``send_async`` — returns a Future at once; network failures are retried on another
  broker up to ``retry_times_when_send_async_failed`` times, broker answers are not.
* ``send_oneway`` — one attempt, nothing awaited but the write.
* ``send_batch`` — several messages of one topic in one SEND_BATCH_MESSAGE.
* ``queue=`` sends to a chosen queue, ``selector=``/``arg=`` picks one from the topic's
  queues (ordered sends); both make exactly one attempt, as Java's.

Bodies of ``compress_msg_body_over_howmuch`` (4096) bytes or more are zlib-compressed
(level 5) with the COMPRESSED sys flag. Properties are set as the Java client does:
UNIQ_KEY (the returned ``msg_id``; kept in the message's properties as Java does, so
sending the same Message again is recognisable as a duplicate), WAIT, TAGS, KEYS, DELAY.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from rmq.client._util import CREATE_JUST, RUNNING, SHUTDOWN_ALREADY
from rmq.client.config import ClientConfig
from rmq.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from rmq.client.fault import MQFaultStrategy
from rmq.client.instance import MQClientInstance, get_or_create_instance
from rmq.client.message import Message, SendResult, SendStatus, compress_body, validate_message
from rmq.client.routes import TopicPublishInfo
from rmq.client.selector import MessageQueueSelector
from rmq.common.clock import now_ms
from rmq.common.context import StartedContext
from rmq.common.mixall import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    CLIENT_INNER_PRODUCER_GROUP,
    DEFAULT_PRODUCER_GROUP,
    RETRY_GROUP_TOPIC_PREFIX,
)
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.codes import ResponseCode
from rmq.protocol.headers import SendMessageRequestHeader
from rmq.protocol.message import MessageConst, SysFlag, UniqueIdGenerator, encode_batch, properties_to_string
from rmq.remoting.errors import RemotingError, RemotingTimeoutError

__all__ = ["Producer", "RETRY_RESPONSE_CODES", "DEFAULT_PRODUCER_GROUP", "new_inner_producer"]

log = logging.getLogger("rmq.client.producer")

#: Broker codes a sync send retries on (spec 2.4, DefaultMQProducer.retryResponseCodes:
#: the 4.9.8 set plus SYSTEM_BUSY and GO_AWAY, which 5.x added).
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
        ResponseCode.GO_AWAY,
    }
)

_SYNC, _ASYNC, _ONEWAY = "SYNC", "ASYNC", "ONEWAY"

#: A failed send refreshes its topic's route at most this often, and waits for the
#: NameServer's answer at most ROUTE_REFRESH_WAIT_MS before its next attempt.
ROUTE_REFRESH_ON_ERROR_MS = 500
ROUTE_REFRESH_WAIT_MS = 500


@dataclass(slots=True)
class _Prepared:
    """A message (or batch) ready for the wire: built once, sent by every attempt."""

    topic: str
    body: bytes
    properties: str
    sys_flag: int
    flag: int
    uniq_id: str | None
    batch: bool
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None


class Producer(StartedContext):
    def __init__(
        self,
        group: str = DEFAULT_PRODUCER_GROUP,
        namesrv_addr: str | None = None,
        *,
        config: ClientConfig | None = None,
        send_msg_timeout: int = 3000,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        compress_msg_body_over_howmuch: int = 4096,
        compress_level: int = 5,
        max_message_size: int = 4 * 1024 * 1024,
        default_topic_queue_nums: int = 4,
        create_topic_key: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
        send_latency_fault_enable: bool = False,
        **config_kwargs: Any,
    ) -> None:
        if not group:
            raise MQClientError("producerGroup is blank")
        self.group = group
        self.config = ClientConfig.of_client(config, namesrv_addr, config_kwargs)
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.create_topic_key = create_topic_key
        self.fault_strategy = MQFaultStrategy(send_latency_fault_enable)
        self.topic_publish_info_table: dict[str, TopicPublishInfo] = {}
        self.instance: MQClientInstance | None = None
        self._state = CREATE_JUST
        self._ids: UniqueIdGenerator | None = None
        self._async_tasks: set[asyncio.Future] = set()
        self._route_refreshed: dict[str, float] = {}  # topic -> monotonic time

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._state == RUNNING:
            return
        if self._state != CREATE_JUST:
            raise MQClientError(f"The producer service state not OK, maybe started once, {self._state}")
        self.config.change_instance_name_to_pid()
        self._ids = UniqueIdGenerator(self.config.client_ip_bytes())
        inst = get_or_create_instance(self.config)
        if not inst.register_producer(self.group, self):
            raise MQClientError(
                f"The producer group[{self.group}] has been created before, specify another name please."
            )
        self.instance = inst
        self.topic_publish_info_table[self.create_topic_key] = TopicPublishInfo()
        await inst.start_registered(inst.producer_table, self.group)
        self._state = RUNNING
        await inst.send_heartbeat_to_all_brokers()
        log.info("producer %s started (client %s)", self.group, inst.client_id)

    async def start_inner(self, inst: MQClientInstance) -> None:
        """Start as ``inst``'s own producer (CLIENT_INNER_PRODUCER): registered with the
        instance for routes, never heartbeating or stopping it on its own."""
        if self._state != CREATE_JUST:
            raise MQClientError(f"The producer service state not OK, {self._state}")
        self._ids = UniqueIdGenerator(self.config.client_ip_bytes())
        inst.producer_table[self.group] = self
        self.instance = inst
        self.topic_publish_info_table[self.create_topic_key] = TopicPublishInfo()
        self._state = RUNNING

    def mark_shutdown(self) -> None:
        """The instance that owns this inner producer is going away."""
        self._state = SHUTDOWN_ALREADY

    async def shutdown(self) -> None:
        if self._state != RUNNING:
            return
        self._state = SHUTDOWN_ALREADY
        if self._async_tasks:
            # in-flight async sends finish (each is bounded by its send timeout)
            await asyncio.wait(list(self._async_tasks), timeout=self.send_msg_timeout / 1000 + 1)
        inst = self.instance
        assert inst is not None
        await inst.unregister_producer(self.group)
        await inst.shutdown()
        log.info("producer %s shut down", self.group)

    def _make_sure_state_ok(self) -> MQClientInstance:
        if self._state != RUNNING or self.instance is None:
            raise MQClientError(f"The producer service state not OK, {self._state}")
        return self.instance

    # ------------------------------------------------------------------ ProducerInner
    def publish_topics(self) -> list[str]:
        return list(self.topic_publish_info_table)

    def is_publish_topic_need_update(self, topic: str) -> bool:
        info = self.topic_publish_info_table.get(topic)
        return info is None or not info.ok()

    def update_topic_publish_info(self, topic: str, info: TopicPublishInfo) -> None:
        if topic in self.topic_publish_info_table:
            self.topic_publish_info_table[topic] = info

    # ------------------------------------------------------------------ routes
    async def _try_to_find_topic_publish_info(self, topic: str) -> TopicPublishInfo:
        inst = self._make_sure_state_ok()
        info = self.topic_publish_info_table.get(topic)
        if info is None or not info.ok():
            self.topic_publish_info_table.setdefault(topic, TopicPublishInfo())
            await inst.update_topic_route_info_from_name_server(topic)
            info = self.topic_publish_info_table[topic]
        if info.have_topic_router_info or info.ok():
            return info
        await inst.update_topic_route_info_from_name_server(
            topic, is_default=True, default_topic_queue_nums=self.default_topic_queue_nums
        )
        return self.topic_publish_info_table[topic]

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues, from the NameServer when not known yet."""
        info = await self._try_to_find_topic_publish_info(topic)
        return list(info.message_queue_list)

    def select_one_message_queue(self, info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue:
        return self.fault_strategy.select_one_message_queue(info, last_broker_name)

    # ------------------------------------------------------------------ preparing
    def _prepare(self, msg: Message) -> _Prepared:
        validate_message(msg, self.max_message_size)
        assert self._ids is not None
        props = msg.wire_properties(self._ids.next_id())
        uniq = props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        # MessageClientIDSetter.setUniqID: the id stays with the message
        msg.properties.setdefault(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uniq)
        body = msg.body
        sys_flag = 0
        if len(body) >= self.compress_msg_body_over_howmuch:
            body = compress_body(body, self.compress_level)
            sys_flag |= SysFlag.COMPRESSED
        if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
            sys_flag |= SysFlag.TRANSACTION_PREPARED_TYPE
        reconsume = max_reconsume = None
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            rt = props.pop(MessageConst.RECONSUME_TIME, None)
            if rt is not None:
                reconsume = int(rt)
            mrt = props.pop(MessageConst.MAX_RECONSUME_TIMES, None)
            if mrt is not None:
                max_reconsume = int(mrt)
        return _Prepared(
            msg.topic, body, properties_to_string(props), sys_flag, msg.flag, uniq, False, reconsume, max_reconsume
        )

    def _prepare_batch(self, msgs: Sequence[Message]) -> _Prepared:
        """MessageBatch.generateFromList: one topic, no delay, no retry topic."""
        if not msgs:
            raise MQClientError("the batch is empty", ResponseCode.MESSAGE_ILLEGAL)
        first = msgs[0]
        assert self._ids is not None
        items = []
        ids = []
        for m in msgs:
            if m.delay_time_level > 0:
                raise MQClientError("TimeDelayLevel is not supported for batching", ResponseCode.MESSAGE_ILLEGAL)
            if m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise MQClientError("Retry Group is not supported for batching", ResponseCode.MESSAGE_ILLEGAL)
            if m.topic != first.topic:
                raise MQClientError(
                    "The topic of the messages in one batch should be the same", ResponseCode.MESSAGE_ILLEGAL
                )
            if m.wait_store_msg_ok != first.wait_store_msg_ok:
                raise MQClientError(
                    "The waitStoreMsgOK of the messages in one batch should the same", ResponseCode.MESSAGE_ILLEGAL
                )
            validate_message(m, self.max_message_size)
            props = m.wire_properties(self._ids.next_id())
            ids.append(props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            items.append((m.flag, m.body, properties_to_string(props)))
        body = encode_batch(items)
        if len(body) > self.max_message_size:
            raise MQClientError(
                f"the message body size over max value, MAX: {self.max_message_size}", ResponseCode.MESSAGE_ILLEGAL
            )
        batch_props = {MessageConst.WAIT_STORE_MSG_OK: "true" if first.wait_store_msg_ok else "false"}
        return _Prepared(first.topic, body, properties_to_string(batch_props), 0, 0, ",".join(ids), True)

    # ------------------------------------------------------------------ kernel
    async def _send_kernel(self, p: _Prepared, mq: MessageQueue, mode: str, timeout_ms: int) -> SendResult | None:
        inst = self._make_sure_state_ok()
        addr = inst.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self._try_to_find_topic_publish_info(mq.topic)
            addr = inst.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist", ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        header = SendMessageRequestHeader(
            self.group,
            p.topic,
            self.create_topic_key,
            self.default_topic_queue_nums,
            mq.queue_id,
            p.sys_flag,
            now_ms(),
            p.flag,
            p.properties,
            0 if p.reconsume_times is None else p.reconsume_times,
            False,
            p.batch,
            p.max_reconsume_times,
        )
        if mode == _ONEWAY:
            await inst.api.send_message_oneway(addr, header, p.body, batch=p.batch)
            return None
        return await inst.api.send_message(
            addr, mq.broker_name, header, p.body, uniq_id=p.uniq_id, batch=p.batch, timeout_ms=max(timeout_ms, 1)
        )

    def _send(
        self, p: _Prepared, mq: MessageQueue | None, mode: str, timeout_ms: int
    ) -> Coroutine[Any, Any, SendResult | None]:
        """To ``mq`` when the caller chose one (no retry there), else sendDefaultImpl."""
        return self._send_kernel(p, mq, mode, timeout_ms) if mq is not None else self._send_default(p, mode, timeout_ms)

    async def _send_default(self, p: _Prepared, mode: str, timeout_ms: int) -> SendResult | None:
        """sendDefaultImpl: select a queue, send, retry as the mode allows."""
        begin = time.monotonic()
        info = await self._try_to_find_topic_publish_info(p.topic)
        if not info.ok():
            if not self.instance or not self.instance.api.name_server_address_list:
                raise MQClientError("No name server address, please set it", ClientErrorCode.NO_NAME_SERVER_EXCEPTION)
            raise MQClientError(f"No route info of this topic: {p.topic}", ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION)
        times_total = 1 + self.retry_times_when_send_failed if mode == _SYNC else 1
        last_broker: str | None = None
        last_exc: BaseException | None = None
        result: SendResult | None = None
        brokers_sent: list[str] = []
        call_timeout = False
        for _ in range(times_total):
            mq = self.select_one_message_queue(info, last_broker)
            last_broker = mq.broker_name
            brokers_sent.append(mq.broker_name)
            start = time.monotonic()
            cost_ms = int((start - begin) * 1000)
            if cost_ms >= timeout_ms:
                call_timeout = True
                break
            try:
                result = await self._send_kernel(p, mq, mode, timeout_ms - cost_ms)
            except (RemotingError, MQClientError) as e:
                self._update_fault(mq, start, True)
                log.warning("send to %s failed (%s), resend at once", mq, e)
                last_exc = e
                info = await self._refresh_route_after_error(p.topic, info, begin, timeout_ms)
                continue
            except MQBrokerError as e:
                self._update_fault(mq, start, True)
                last_exc = e
                if e.code in RETRY_RESPONSE_CODES:
                    log.warning("send to %s refused: %s; resend", mq, e)
                    info = await self._refresh_route_after_error(p.topic, info, begin, timeout_ms)
                    continue
                if result is not None:
                    return result
                raise
            self._update_fault(mq, start, False)
            if (
                mode == _SYNC
                and result is not None
                and result.status is not SendStatus.SEND_OK
                and self.retry_another_broker_when_not_store_ok
            ):
                continue
            return result
        if result is not None:
            return result
        if call_timeout and last_exc is None:
            raise RemotingTimeoutError(
                f"send of a {p.topic} message timed out after {timeout_ms}ms (brokers tried: {brokers_sent})"
            )
        assert last_exc is not None
        last_exc.add_note(f"send to topic {p.topic} failed {len(brokers_sent)} time(s); brokers tried: {brokers_sent}")
        raise last_exc

    async def _refresh_route_after_error(
        self, topic: str, info: TopicPublishInfo, begin: float, timeout_ms: int
    ) -> TopicPublishInfo:
        """After a failed attempt: the broker may be gone or no longer the master (a
        failover); fetch the route again, rate-limited per topic, and wait a little
        for it within the send's time budget. Returns the route to use next."""
        inst = self.instance
        now = time.monotonic()
        if (
            not isinstance(inst, MQClientInstance)
            or now - self._route_refreshed.get(topic, 0.0) < ROUTE_REFRESH_ON_ERROR_MS / 1000
        ):
            return info
        self._route_refreshed[topic] = now
        budget = min(ROUTE_REFRESH_WAIT_MS / 1000, timeout_ms / 1000 - (now - begin))
        task = inst.spawn(inst.update_topic_route_info_from_name_server(topic), name=f"route-refresh-{topic}")
        if budget > 0:
            # (the refresh goes on in the background if the NameServer is slow)
            await asyncio.wait({task}, timeout=budget)
        fresh = self.topic_publish_info_table.get(topic)
        return fresh if fresh is not None and fresh.ok() else info

    def _update_fault(self, mq: MessageQueue, start: float, isolation: bool) -> None:
        self.fault_strategy.update_fault_item(mq.broker_name, int((time.monotonic() - start) * 1000), isolation)

    async def _target_queue(
        self, topic: str, queue: MessageQueue | None, selector: MessageQueueSelector | None, arg: Any, msg: Message
    ) -> MessageQueue | None:
        if queue is not None:
            if queue.topic != topic:
                raise MQClientError(f"message's topic not equal mq's topic: {topic} / {queue.topic}")
            return queue
        if selector is not None:
            info = await self._try_to_find_topic_publish_info(topic)
            if not info.ok():
                raise MQClientError(f"No route info for this topic, {topic}", ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION)
            try:
                mq = selector(list(info.message_queue_list), msg, arg)
            except Exception as e:
                raise MQClientError(f"select message queue threw exception: {e}") from e
            if mq is None:
                raise MQClientError("select message queue return null.")
            return mq
        return None

    # ------------------------------------------------------------------ public sends
    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer (see the module docstring for retries)."""
        self._make_sure_state_ok()
        timeout = self.send_msg_timeout if timeout_ms is None else timeout_ms
        p = self._prepare(msg)
        mq = await self._target_queue(msg.topic, queue, selector, arg, msg)
        result = await self._send(p, mq, _SYNC, timeout)
        assert result is not None
        return result

    async def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, timeout_ms: int | None = None
    ) -> SendResult:
        """One SEND_BATCH_MESSAGE; ``msg_id`` / ``offset_msg_id`` are comma-joined lists."""
        self._make_sure_state_ok()
        timeout = self.send_msg_timeout if timeout_ms is None else timeout_ms
        p = self._prepare_batch(msgs)
        if queue is not None and queue.topic != p.topic:
            raise MQClientError(f"message's topic not equal mq's topic: {p.topic} / {queue.topic}")
        result = await self._send(p, queue, _SYNC, timeout)
        assert result is not None
        return result

    async def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        """Write the message and return; no answer, no retry."""
        self._make_sure_state_ok()
        p = self._prepare(msg)
        mq = await self._target_queue(msg.topic, queue, selector, arg, msg)
        await self._send(p, mq, _ONEWAY, self.send_msg_timeout)

    def send_async(
        self,
        msg: Message | Sequence[Message],
        *,
        on_success: Callable[[SendResult], Any] | None = None,
        on_exception: Callable[[BaseException], Any] | None = None,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> asyncio.Future[SendResult]:
        """Start a send and return its Future at once (a list of messages is a batch).

        Network failures are retried on another broker (``retry_times_when_send_async_failed``);
        a broker's refusal is reported as is. ``on_success`` / ``on_exception`` are called
        when it completes, as Java's SendCallback.
        """
        self._make_sure_state_ok()
        timeout = self.send_msg_timeout if timeout_ms is None else timeout_ms
        if isinstance(msg, Message):
            p = self._prepare(msg)
        else:
            p = self._prepare_batch(msg)
        fut = asyncio.ensure_future(self._send_async_impl(p, msg, queue, selector, arg, timeout))
        self._async_tasks.add(fut)

        def done(f: asyncio.Future) -> None:
            self._async_tasks.discard(f)
            if f.cancelled():
                return
            exc = f.exception()
            try:
                if exc is None:
                    if on_success is not None:
                        on_success(f.result())
                elif on_exception is not None:
                    on_exception(exc)
            except Exception:
                log.exception("send callback raised")

        fut.add_done_callback(done)
        return fut

    async def _send_async_impl(
        self,
        p: _Prepared,
        msg: Any,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        timeout_ms: int,
    ) -> SendResult:
        begin = time.monotonic()
        first = msg if isinstance(msg, Message) else msg[0]
        mq = await self._target_queue(p.topic, queue, selector, arg, first)
        info: TopicPublishInfo | None = None
        if mq is None:
            info = await self._try_to_find_topic_publish_info(p.topic)
            if not info.ok():
                raise MQClientError(
                    f"No route info of this topic: {p.topic}", ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION
                )
            mq = self.select_one_message_queue(info, None)
        attempts = 1 + self.retry_times_when_send_async_failed
        for attempt in range(attempts):
            start = time.monotonic()
            left = timeout_ms - int((start - begin) * 1000)
            if left <= 0:
                raise RemotingTimeoutError(f"async send of a {p.topic} message timed out after {timeout_ms}ms")
            try:
                result = await self._send_kernel(p, mq, _ASYNC, left)
                self._update_fault(mq, start, False)
                assert result is not None
                return result
            except MQBrokerError:
                self._update_fault(mq, start, True)
                raise
            except (RemotingError, MQClientError) as e:
                self._update_fault(mq, start, True)
                if attempt + 1 >= attempts:
                    raise
                log.info("async send to %s failed (%s); retry %d", mq, e, attempt + 1)
                if info is not None:
                    mq = self.select_one_message_queue(info, mq.broker_name)
        raise AssertionError("unreachable")


async def new_inner_producer(inst: MQClientInstance) -> Producer:
    """The factory of ``inst``'s own producer (CLIENT_INNER_PRODUCER), which a push
    consumer hands to ``get_or_create_instance``."""
    p = Producer(CLIENT_INNER_PRODUCER_GROUP, config=inst.config)
    await p.start_inner(inst)
    return p
