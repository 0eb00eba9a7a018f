"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) — spec 2.4."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rmq.broker.config import BrokerConfig
from rmq.broker.master_lease import UNFENCED, WriteFence
from rmq.broker.reput import answer_put, reput_message
from rmq.broker.seams import MessageStoreView, PutStats, SubscriptionGroups, TopicConfigs
from rmq.broker.timer import TimerIllegal
from rmq.common.mixall import (
    DLQ_NUMS_PER_GROUP,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_MAX_LENGTH,
    VALID_NAME,
    VALID_PATTERN_STR,
    dlq_topic,
    retry_topic,
)
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.codes import MQVersion, RemotingFlag, RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader, SendMessageResponseHeader
from rmq.protocol.message import (
    MessageConst,
    MessageExtBatch,
    MessageExtBrokerInner,
    decode_batch,
    pack_host,
    properties_to_string,
    string_to_properties,
)
from rmq.remoting.dispatch import ANSWER_LATER, AnswerLater
from rmq.store.commit_round import CommitRound
from rmq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger("rmq.broker.send")
# Rewrites a TRAN_MSG send into its half message (None: such sends are refused).
TransactionalPrepare = Callable[[MessageExtBrokerInner], MessageExtBrokerInner]

_STATUS_TO_CODE = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 128k, msg properties length limit 32k.",
    ),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg properties length limit 32k.",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: "
        "the broker's disk is full, messages are put to the slave, message store has been "
        "shut down, etc.",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_BUSY,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}


def validate_topic(topic: str) -> str | None:
    """TopicValidator.validateTopic: the remark when topic is not acceptable."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not VALID_NAME.match(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only {VALID_PATTERN_STR}"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}."
    return None


@dataclass(eq=False)
class SendMessageProcessor:
    broker_config: BrokerConfig
    store: MessageStoreView
    topics: TopicConfigs
    subscriptions: SubscriptionGroups
    stats: PutStats
    transactional_prepare: TransactionalPrepare | None
    # controller mode: the master lease (rmq/broker/master_lease.py); nothing is stored
    # while it refuses
    fence: WriteFence = UNFENCED
    # RocketMQ 5 timer messages (rmq/broker/timer.py): rewrites a send with TIMER_* keys,
    # raises TimerIllegal to refuse it; None: TIMER_* keys are stored as they are
    timer_hook: Callable[[MessageExtBrokerInner], None] | None = None

    def __post_init__(self) -> None:
        self._rand = random.Random()
        self._born_hosts: dict[str, bytes] = {}
        # names that passed validate_topic and are not in NOT_ALLOWED_SEND_TOPICS
        self._sendable_topics: set[str] = set()

    # --- helpers ---
    def _born_host(self, conn) -> bytes:
        addr = conn.remote_address
        h = self._born_hosts.get(addr)
        if h is None:
            ip, _, port = addr.rpartition(":")
            try:
                h = pack_host(ip.strip("[]"), int(port))
            except (ProtocolError, ValueError):
                h = pack_host("127.0.0.1", 0)
            if len(self._born_hosts) > 65536:
                self._born_hosts.clear()
            self._born_hosts[addr] = h
        return h

    def _error(self, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return request.create_response(code, remark)

    def _refused(self, request: RemotingCommand, code: int, remark: str) -> tuple[None, int, RemotingCommand]:
        return None, -1, request.create_response(code, remark)

    def _msg_check(
        self, request: RemotingCommand, header: SendMessageRequestHeader, conn: Any
    ) -> tuple[TopicConfig | None, int, RemotingCommand | None]:
        """AbstractSendMessageProcessor.msgCheck: (topic config, queue id to write, error
        response). A negative queue id in the header picks a writable queue at random."""
        bc = self.broker_config
        topics = self.topics
        topic = header.topic
        if not (bc.brokerPermission & 2) and topics.is_order_topic(topic):
            return self._refused(
                request, ResponseCode.NO_PERMISSION, f"the broker[{bc.brokerIP1}] sending message is forbidden"
            )
        if topic not in self._sendable_topics:  # (checked once per topic name)
            bad = validate_topic(topic)
            if bad is not None:
                return self._refused(request, ResponseCode.SYSTEM_ERROR, bad)
            if topic in NOT_ALLOWED_SEND_TOPICS:
                return self._refused(
                    request, ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
                )
            if len(self._sendable_topics) >= 65536:
                self._sendable_topics.clear()
            self._sendable_topics.add(topic)
        tc = topics.select(topic)
        if tc is None:
            tc = topics.create_topic_in_send_message_method(
                topic, header.default_topic, conn.remote_address, header.default_topic_queue_nums, 0
            )
            if tc is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = topics.create_topic_in_send_message_back_method(topic, 1, 6, 0)
            if tc is None:
                return self._refused(
                    request,
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please! "
                    "See http://rocketmq.apache.org/docs/faq/ for further details.",
                )
        qid = header.queue_id
        valid = max(tc.write_queue_nums, tc.read_queue_nums)
        if qid >= valid:
            return self._refused(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{qid}] is illegal, {tc!r} Producer: {conn.remote_address}",
            )
        if qid < 0:
            qid = self._rand.randrange(tc.write_queue_nums)
        return tc, qid, None

    def _handle_retry_and_dlq(
        self, request: RemotingCommand, header: SendMessageRequestHeader, msg: MessageExtBrokerInner
    ) -> RemotingCommand | None:
        topic = header.topic
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        sub = self.subscriptions.find(group)
        if sub is None:
            return self._error(
                request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        max_times = sub.retryMaxTimes
        if request.version >= MQVersion.V3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        reconsume = header.reconsume_times or 0
        if reconsume >= max_times:
            dlq = dlq_topic(group)
            tc = self.topics.create_topic_in_send_message_back_method(dlq, DLQ_NUMS_PER_GROUP, 6, 0)
            if tc is None:
                return self._error(request, ResponseCode.SYSTEM_ERROR, f"topic[{dlq}] not exist")
            msg.topic = dlq
            msg.queue_id = self._rand.randrange(DLQ_NUMS_PER_GROUP)
            log.info("message for %s reached %d reconsumes; sent to %s", topic, reconsume, dlq)
        return None

    def _response(
        self, request: RemotingCommand, result: PutMessageResult, uniq_key: str | None, queue_id: int, topic: str = ""
    ) -> RemotingCommand:
        code, remark = _STATUS_TO_CODE.get(result.status, (ResponseCode.SYSTEM_ERROR, result.status.value))
        if result.status.stored:
            resp = request.create_response(code, remark)
            resp.ext_fields = SendMessageResponseHeader(
                result.msg_id, queue_id, result.queue_offset, uniq_key
            ).to_ext_fields()
        else:
            resp = request.create_response(code, result.remark and f"{remark} ({result.remark})" or remark)
        ext = resp.ext_fields if resp.ext_fields is not None else {}
        bc = self.broker_config
        ext["MSG_REGION"] = bc.regionId
        ext["TRACE_ON"] = "true" if bc.traceOn else "false"
        resp.ext_fields = ext
        self.stats.on_put(result, request, topic)
        return resp

    # --- entry point ---
    def process(
        self, conn, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand] | AnswerLater | None:
        fenced = self.fence.refusal()
        if fenced is not None:
            return request.create_response(ResponseCode.SERVICE_NOT_AVAILABLE, fenced)
        try:
            if request.code == RequestCode.SEND_MESSAGE:
                header = SendMessageRequestHeader.from_ext_fields(request.ext_fields)
            else:
                header = SendMessageRequestHeader.from_v2_ext_fields(request.ext_fields)
        except ProtocolError as e:
            return self._error(request, ResponseCode.SYSTEM_ERROR, str(e))
        if request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch:
            return self._send_batch(conn, request, header)
        return self._send_one(conn, request, header)

    def _send_one(
        self, conn, request: RemotingCommand, header: SendMessageRequestHeader
    ) -> RemotingCommand | Awaitable[RemotingCommand] | AnswerLater | None:
        tc, qid, err = self._msg_check(request, header, conn)
        if err is not None:
            return err
        assert tc is not None
        bc = self.broker_config
        store = self.store
        props_str = header.properties or ""
        props = string_to_properties(props_str)
        msg = MessageExtBrokerInner(
            topic=header.topic,
            body=request.body or b"",
            queue_id=qid,
            flag=header.flag,
            properties=props,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=self._born_host(conn),
            store_host=store.store_host,
            reconsume_times=header.reconsume_times or 0,
        )
        err = self._handle_retry_and_dlq(request, header, msg)
        if err is not None:
            return err
        if tc.topic_filter_type == "MULTI_TAG":
            msg.sys_flag |= 0x2
        # As 4.9.x: CLUSTER is added and WAIT is not stored (it stays in the dict,
        # where the store reads it); the properties string is written once here.
        props[MessageConst.CLUSTER] = bc.brokerClusterName
        if "TIMER_" in props_str and self.timer_hook is not None:
            try:
                self.timer_hook(msg)
            except TimerIllegal as e:
                return self._error(request, e.response_code, str(e))
        wait = props.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        msg.properties_string = properties_to_string(props)
        if wait is not None:
            props[MessageConst.WAIT_STORE_MSG_OK] = wait
        if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
            if bc.rejectTransactionMessage:
                return self._error(
                    request,
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{bc.brokerIP1}] sending transaction message is forbidden",
                )
            tx = self.transactional_prepare
            if tx is None:
                return self._error(
                    request, ResponseCode.NO_PERMISSION, "transactional messages are not supported by this broker yet"
                )
            msg = tx(msg)
        uniq = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        result, waiter = store.put_nowait(msg)
        if waiter is None:
            return self._response(request, result, uniq, msg.queue_id, msg.topic)
        return self._answer_later(conn, request, result, waiter, uniq, msg.queue_id, msg.topic)

    def _answer_later(
        self,
        conn,
        request: RemotingCommand,
        result: PutMessageResult,
        waiter: Awaitable[PutMessageStatus],
        uniq: str | None,
        qid: int,
        topic: str = "",
    ) -> Awaitable[RemotingCommand] | AnswerLater:
        """Answer when the put's waiter completes (flush / replication).

        A waiter that is a commit round or a Future (a group-commit or group-transfer
        round, shared by the puts of a loop iteration) gets a done-callback that sends
        the response: no task per message. Anything else is awaited in a task."""
        if type(waiter) is not CommitRound and not asyncio.isfuture(waiter):
            return self._await_put(request, result, waiter, uniq, qid, topic)

        def done(f: asyncio.Future[PutMessageStatus] | CommitRound) -> None:
            if f.cancelled():
                resp = request.create_response(ResponseCode.SYSTEM_ERROR, "request processing was cancelled")
            else:
                status = f.result()
                if status is not PutMessageStatus.PUT_OK:
                    result.status = status
                resp = self._response(request, result, uniq, qid, topic)
            if not request.flag & RemotingFlag.ONEWAY:  # (a oneway one is finished already)
                conn.send_response(resp)

        waiter.add_done_callback(done)
        if type(waiter) is CommitRound:
            waiter.after_callbacks(conn, conn.flush)
        return ANSWER_LATER

    async def _await_put(self, request, result, waiter, uniq, qid, topic: str = "") -> RemotingCommand:
        status = await waiter
        if status is not PutMessageStatus.PUT_OK:
            result.status = status
        return self._response(request, result, uniq, qid, topic)

    # --- CONSUMER_SEND_MSG_BACK (36): retry and dead letter (spec 7.2) ---
    def consumer_send_msg_back(self, conn, request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        fenced = self.fence.refusal()
        if fenced is not None:
            return request.create_response(ResponseCode.SERVICE_NOT_AVAILABLE, fenced)
        bc = self.broker_config
        store = self.store
        try:
            h = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        except ProtocolError as e:
            return self._error(request, ResponseCode.SYSTEM_ERROR, str(e))
        sub = self.subscriptions.find(h.group)
        if sub is None:
            return self._error(
                request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {h.group}"
            )
        if not (bc.brokerPermission & 2):
            return self._error(
                request, ResponseCode.NO_PERMISSION, f"the broker[{bc.brokerIP1}] sending message is forbidden"
            )
        if sub.retryQueueNums <= 0:
            return request.create_response(ResponseCode.SUCCESS)
        topic = retry_topic(h.group)
        qid = self._rand.randrange(sub.retryQueueNums)
        tc = self.topics.create_topic_in_send_message_back_method(topic, sub.retryQueueNums, 6, 0)
        if not (tc.perm & 2):
            return self._error(request, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        msg = store.look_message_by_offset(h.offset)
        if msg is None:
            return self._error(request, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        props = dict(msg.properties)
        props.setdefault(MessageConst.RETRY_TOPIC, msg.topic)
        max_times = sub.retryMaxTimes
        if request.version >= MQVersion.V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        delay = h.delay_level
        if msg.reconsume_times >= max_times or delay < 0:
            topic = dlq_topic(h.group)
            qid = self._rand.randrange(DLQ_NUMS_PER_GROUP)
            self.topics.create_topic_in_send_message_back_method(topic, DLQ_NUMS_PER_GROUP, 6, 0)
            props.pop(MessageConst.DELAY_TIME_LEVEL, None)
            log.info(
                "message %s of group %s reconsumed %d times; to %s", msg.msg_id, h.group, msg.reconsume_times, topic
            )
        else:
            if delay == 0:
                delay = 3 + msg.reconsume_times
            props[MessageConst.DELAY_TIME_LEVEL] = str(delay)
        # the first id is kept across retries
        if not props.get(MessageConst.ORIGIN_MESSAGE_ID):
            props[MessageConst.ORIGIN_MESSAGE_ID] = msg.msg_id
        inner = reput_message(
            msg, topic, qid, props, store_host=store.store_host, reconsume_times=msg.reconsume_times + 1
        )
        result, waiter = store.put_nowait(inner)

        stats, back_topic = self.stats, props[MessageConst.RETRY_TOPIC]

        def answer(status: PutMessageStatus) -> RemotingCommand:
            if status.stored:
                stats.on_send_back(h.group, back_topic)
                return request.create_response(ResponseCode.SUCCESS)
            return self._error(request, ResponseCode.SYSTEM_ERROR, status.value)

        return answer_put(result, waiter, answer)

    def _send_batch(
        self, conn, request: RemotingCommand, header: SendMessageRequestHeader
    ) -> RemotingCommand | Awaitable[RemotingCommand] | AnswerLater | None:
        _, qid, err = self._msg_check(request, header, conn)
        if err is not None:
            return err
        store = self.store
        if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self._error(
                request,
                ResponseCode.MESSAGE_ILLEGAL,
                f"Retry Group topic is not allowed to send batch message: {header.topic}",
            )
        try:
            items = decode_batch(request.body or b"")
        except ProtocolError as e:
            return self._error(request, ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}")
        props = string_to_properties(header.properties or "")
        props[MessageConst.CLUSTER] = self.broker_config.brokerClusterName
        batch = MessageExtBatch(
            topic=header.topic,
            items=items,
            queue_id=qid,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=self._born_host(conn),
            store_host=store.store_host,
            properties=props,
        )
        wait = props.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        result, waiter = store.put_batch_nowait(batch)
        if wait == "false" and waiter is not None:
            waiter = store.commit_waiter(result)  # not the flush: the write, still
        if waiter is None:
            return self._response(request, result, None, qid, header.topic)
        return self._answer_later(conn, request, result, waiter, None, qid, header.topic)
