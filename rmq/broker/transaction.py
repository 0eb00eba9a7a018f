"""Transactional messages (spec 7.3): half and op topics, END_TRANSACTION, the check service.

A half message is stored in RMQ_SYS_TRANS_HALF_TOPIC (queue 0, REAL_TOPIC/REAL_QID
kept, transaction bits reset) so consumers of the real topic cannot see it. Commit
stores the final message and writes an op message (tag `d`, body = the half message's
queue offset) to RMQ_SYS_TRANS_OP_HALF_TOPIC; rollback writes only the op message.

The check service walks the half queue from its saved offset: resolved halves are
passed, halves older than transactionTimeOut (or CHECK_IMMUNITY_TIME_IN_SECONDS) are
put back at the end with TRANSACTION_CHECK_TIMES + 1 and a CHECK_TRANSACTION_STATE is
sent to a live producer of the group; after transactionCheckMax checks the half goes
to TRANS_CHECK_MAX_TIME_TOPIC. Offsets of both queues are kept as consumer offsets of
the system group CID_RMQ_SYS_TRANS, as RocketMQ does, so progress survives restarts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rmq.broker.config import BrokerConfig
from rmq.broker.reput import real_destination, reput_message, stored_properties_string
from rmq.broker.seams import ConsumerOffsets, ProducerRegistry, ServiceStore, TopicConfigs
from rmq.common.clock import now_ms
from rmq.common.mixall import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_SYS_GROUP
from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import CheckTransactionStateRequestHeader
from rmq.protocol.message import (
    MessageConst,
    MessageExt,
    MessageExtBrokerInner,
    SysFlag,
    decode_records,
    encode_record,
    properties_to_string,
)
from rmq.runtime.service import ServiceLoop
from rmq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger("rmq.broker.transaction")

HALF_TOPIC = TRANS_HALF_TOPIC
OP_TOPIC = TRANS_OP_HALF_TOPIC
CHECK_MAX_TIME_TOPIC = TRANS_CHECK_MAX_TIME_TOPIC
SYS_GROUP = TRANS_SYS_GROUP
REMOVE_TAG = "d"
PULL_BATCH = 32


@dataclass(eq=False)
class TransactionalMessageService:
    """Half messages and their check. ``check_service`` is the master-only loop
    (rmq/broker/roles.py turns it on and off)."""

    broker_config: BrokerConfig
    store: ServiceStore
    topics: TopicConfigs
    offsets: ConsumerOffsets
    producers: ProducerRegistry

    def __post_init__(self) -> None:
        self.checks_sent = 0
        self.discarded = 0
        self.check_service = TransactionalMessageCheckService(self)

    # --- send path ---
    def prepare(self, msg: MessageExtBrokerInner) -> MessageExtBrokerInner:
        """Rewrite a TRAN_MSG send into a half message (TransactionalMessageBridge.parseHalfMessageInner)."""
        msg.put_property(MessageConst.REAL_TOPIC, msg.topic)
        msg.put_property(MessageConst.REAL_QUEUE_ID, str(msg.queue_id))
        msg.sys_flag = SysFlag.reset_transaction_value(msg.sys_flag, SysFlag.TRANSACTION_NOT_TYPE)
        msg.topic = HALF_TOPIC
        msg.queue_id = 0
        msg.properties_string = stored_properties_string(msg.properties)
        self.topics.create_topic_in_send_message_back_method(HALF_TOPIC, 1, 6, 0)
        return msg

    # --- END_TRANSACTION ---
    def look_half(self, commit_log_offset: int) -> MessageExt | None:
        return self.store.look_message_by_offset(commit_log_offset)

    @staticmethod
    def check_prepare(
        msg: MessageExt, producer_group: str, tran_state_table_offset: int, commit_log_offset: int
    ) -> str | None:
        """The remark of a mismatch between the half message and the request, or None."""
        if msg.properties.get(MessageConst.PRODUCER_GROUP) != producer_group:
            return "The producer group wrong"
        if msg.queue_offset != tran_state_table_offset:
            return "The transaction state table offset wrong"
        if msg.commit_log_offset != commit_log_offset:
            return "The commit log offset wrong"
        return None

    def end_message_transaction(self, half: MessageExt, commit_log_offset: int) -> MessageExtBrokerInner:
        """The final (COMMIT) message for its real topic and queue."""
        props = dict(half.properties)
        real_topic, real_qid = real_destination(props, half.topic)
        for key in (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.TRANSACTION_PREPARED):
            props.pop(key, None)
        return reput_message(
            half,
            real_topic,
            real_qid,
            props,
            sys_flag=SysFlag.reset_transaction_value(half.sys_flag, SysFlag.TRANSACTION_COMMIT_TYPE),
            store_host=self.store.store_host,
            prepared_transaction_offset=commit_log_offset,
        )

    def put_op(self, half: MessageExt) -> PutMessageResult:
        """Mark a half message resolved: op message, tag `d`, body = its queue offset."""
        self.topics.create_topic_in_send_message_back_method(OP_TOPIC, 1, 6, 0)
        host = self.store.store_host
        props = {MessageConst.TAGS: REMOVE_TAG, MessageConst.WAIT_STORE_MSG_OK: "false"}
        op = MessageExtBrokerInner(
            topic=OP_TOPIC,
            body=str(half.queue_offset).encode(),
            queue_id=half.queue_id,
            properties=props,
            properties_string=stored_properties_string(props),
            born_timestamp=now_ms(),
            born_host=host,
            store_host=host,
        )
        result, _ = self.store.put_nowait(op)
        if result.status is not PutMessageStatus.PUT_OK:
            log.error("writing the op message for half offset %d failed: %s", half.queue_offset, result.status.value)
        return result

    # --- check service ---
    def _offset(self, topic: str) -> int:
        off = self.offsets.query_offset(SYS_GROUP, topic, 0)
        if off < 0:
            off = max(self.store.get_min_offset_in_queue(topic, 0), 0)
        return off

    def _commit(self, topic: str, offset: int) -> None:
        self.offsets.commit_offset("broker", SYS_GROUP, topic, 0, offset)

    def _read(self, topic: str, offset: int, n: int) -> list[MessageExt]:
        res = self.store.get_messages(SYS_GROUP, topic, 0, offset, n)
        return decode_records(res.body(), decompress=False) if res.buffers else []

    def check(self) -> None:
        """One pass of the check (TransactionalMessageServiceImpl.check)."""
        store = self.store
        if store.get_consume_queue(HALF_TOPIC, 0) is None:
            return
        timeout = self.broker_config.transactionTimeOut
        check_max = self.broker_config.transactionCheckMax
        start = now_ms()
        half_offset = self._offset(HALF_TOPIC)
        op_offset = self._offset(OP_TOPIC)
        # Which halves at or above half_offset are resolved, from the op queue.
        resolved: set[int] = set()
        op_max = store.get_max_offset_in_queue(OP_TOPIC, 0)
        op_done_prefix = op_offset
        o = op_offset
        while o < op_max:
            ops = self._read(OP_TOPIC, o, PULL_BATCH)
            if not ops:
                break
            for op in ops:
                try:
                    q = int(op.body.decode())
                except ValueError:
                    q = -1
                if q >= half_offset:
                    resolved.add(q)
                elif op.queue_offset == op_done_prefix:
                    op_done_prefix += 1
            o = ops[-1].queue_offset + 1
        half_max = store.get_max_offset_in_queue(HALF_TOPIC, 0)
        new_offset = half_offset
        i = half_offset
        while i < half_max:
            if i in resolved:
                i += 1
                new_offset = i
                continue
            msgs = self._read(HALF_TOPIC, i, 1)
            if not msgs:
                break
            msg = msgs[0]
            if msg.queue_offset != i:  # the unit is gone (files cleaned): move on
                i = msg.queue_offset
                new_offset = i
                continue
            times = int(msg.properties.get(MessageConst.TRANSACTION_CHECK_TIMES, "0") or 0)
            if times >= check_max:
                self._discard(msg)
                i += 1
                new_offset = i
                continue
            if msg.store_timestamp >= start:
                break
            age = start - msg.born_timestamp
            immunity = timeout
            imm = msg.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
            if imm:
                try:
                    immunity = int(imm) * 1000
                except ValueError:
                    pass
            if 0 <= age < immunity:
                break  # younger ones follow
            put_back = self._put_back(msg, times + 1)
            if put_back is not None:
                self._send_check(put_back)
            i += 1
            new_offset = i
        if new_offset != half_offset:
            self._commit(HALF_TOPIC, new_offset)
        if op_done_prefix != op_offset:
            self._commit(OP_TOPIC, op_done_prefix)

    def _put_back(self, msg: MessageExt, times: int) -> MessageExt | None:
        """Append the half again with its check count raised; the new copy is checked."""
        props = dict(msg.properties)
        props[MessageConst.TRANSACTION_CHECK_TIMES] = str(times)
        inner = reput_message(msg, HALF_TOPIC, 0, props)
        result, _ = self.store.put_nowait(inner)
        if result.status is not PutMessageStatus.PUT_OK:
            log.error("putting back half message %s failed: %s", msg.msg_id, result.status.value)
            return None
        msg.properties = props
        msg.queue_offset = result.queue_offset
        msg.commit_log_offset = result.wrote_offset
        msg.store_host = result.store_host or msg.store_host
        return msg

    def _discard(self, msg: MessageExt) -> None:
        """Checked transactionCheckMax times without an answer: park it for operators."""
        self.topics.create_topic_in_send_message_back_method(CHECK_MAX_TIME_TOPIC, 1, 6, 0)
        inner = reput_message(msg, CHECK_MAX_TIME_TOPIC, 0, dict(msg.properties))
        result, _ = self.store.put_nowait(inner)
        self.discarded += 1
        log.warning(
            "half message %s (transaction %s) reached transactionCheckMax; moved to %s (%s)",
            msg.msg_id,
            msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            CHECK_MAX_TIME_TOPIC,
            result.status.value,
        )

    def _send_check(self, msg: MessageExt) -> None:
        group = msg.properties.get(MessageConst.PRODUCER_GROUP, "")
        ch = self.producers.any_channel(group)
        if ch is None:
            log.warning("transaction check for %s skipped: no live producer of group %s", msg.msg_id, group)
            return
        uniq = msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        header = CheckTransactionStateRequestHeader(
            msg.queue_offset, msg.commit_log_offset, None, uniq, uniq, msg.msg_id
        )
        real_topic, real_qid = real_destination(msg.properties, msg.topic)
        body = encode_record(
            topic=real_topic.encode(),
            body=msg.body,
            properties=properties_to_string(msg.properties).encode(),
            queue_id=real_qid,
            flag=msg.flag,
            queue_offset=msg.queue_offset,
            physical_offset=msg.commit_log_offset,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            store_timestamp=msg.store_timestamp,
            store_host=msg.store_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        )
        cmd = RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header.to_ext_fields(), body=body)
        try:
            ch.conn.send_oneway(cmd)
            self.checks_sent += 1
            log.info(
                "transaction check sent for %s (transaction %s) to %s of group %s",
                msg.msg_id,
                uniq,
                ch.client_id,
                group,
            )
        except Exception as e:
            log.warning("transaction check to %s failed: %s", ch.conn.remote_address, e)


class TransactionalMessageCheckService(ServiceLoop):
    """Every transactionCheckInterval: one pass of the check (masters only)."""

    def __init__(self, service: TransactionalMessageService) -> None:
        super().__init__("transaction-check", log)
        self.service = service

    def interval(self) -> float:
        return self.service.broker_config.transactionCheckInterval / 1000

    async def run_once(self) -> None:
        self.service.check()
