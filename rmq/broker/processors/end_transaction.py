"""END_TRANSACTION (37): commit or roll back a half message (spec 2.12, 7.3)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rmq.broker.master_lease import UNFENCED, WriteFence
from rmq.broker.processors.decode import with_header
from rmq.broker.reput import answer_put, stored_properties_string
from rmq.broker.seams import HalfMessages, StoreWriter
from rmq.broker.timer import TimerIllegal
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import EndTransactionRequestHeader
from rmq.protocol.message import MessageExtBrokerInner, SysFlag
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.results import PutMessageStatus

log = logging.getLogger("rmq.broker.transaction")


@dataclass(eq=False)
class EndTransactionProcessor:
    store_config: MessageStoreConfig
    store: StoreWriter
    transactions: HalfMessages
    fence: WriteFence = UNFENCED  # commit and rollback both store (the message, the op)
    # A committed message with a delivery time is a timer message (RocketMQ 5's put hook
    # sees the commit, not the half message).
    timer_hook: Callable[[MessageExtBrokerInner], None] | None = None

    @with_header(EndTransactionRequestHeader)
    def process(
        self, conn: Any, request: RemotingCommand, h: EndTransactionRequestHeader
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        if self.store_config.brokerRole == BrokerRole.SLAVE:
            log.warning("END_TRANSACTION from %s refused: this broker is a slave", conn.remote_address)
            return request.create_response(
                ResponseCode.SLAVE_NOT_AVAILABLE, "Can't commit or rollback message on slave"
            )
        kind = h.commit_or_rollback
        origin = "check" if h.from_transaction_check else "producer"
        if kind == SysFlag.TRANSACTION_NOT_TYPE:
            log.info(
                "transaction %s of group %s still unknown (%s); waiting for a check",
                h.transaction_id or h.msg_id,
                h.producer_group,
                origin,
            )
            return None
        if kind not in (SysFlag.TRANSACTION_COMMIT_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE):
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"bad commitOrRollback value {kind}")
        fenced = self.fence.refusal()
        if fenced is not None:
            log.info("END_TRANSACTION for %s refused: %s", h.msg_id, fenced)
            return request.create_response(ResponseCode.SERVICE_NOT_AVAILABLE, fenced)
        tx = self.transactions
        half = tx.look_half(h.commit_log_offset)
        if half is None:
            return request.create_response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        bad = tx.check_prepare(half, h.producer_group, h.tran_state_table_offset, h.commit_log_offset)
        if bad is not None:
            log.warning("END_TRANSACTION for %s refused: %s", h.msg_id, bad)
            return request.create_response(ResponseCode.SYSTEM_ERROR, bad)
        if kind == SysFlag.TRANSACTION_ROLLBACK_TYPE:
            tx.put_op(half)
            log.info(
                "transaction %s of group %s rolled back (%s)", h.transaction_id or h.msg_id, h.producer_group, origin
            )
            return request.create_response(ResponseCode.SUCCESS)
        final = tx.end_message_transaction(half, h.commit_log_offset)
        if self.timer_hook is not None:
            try:
                self.timer_hook(final)
            except TimerIllegal as e:
                # as RocketMQ 5: the commit's put is refused; the half message stays for a check
                log.warning("END_TRANSACTION for %s refused: %s", h.msg_id, e)
                return request.create_response(e.response_code, str(e))
            if final.properties_string is None:
                final.properties_string = stored_properties_string(final.properties)
        result, waiter = self.store.put_nowait(final)

        def answer(status: PutMessageStatus) -> RemotingCommand:
            if status.stored:
                tx.put_op(half)
                log.info(
                    "transaction %s of group %s committed to %s (%s)",
                    h.transaction_id or h.msg_id,
                    h.producer_group,
                    final.topic,
                    origin,
                )
                return request.create_response(ResponseCode.SUCCESS)
            return request.create_response(
                ResponseCode.SYSTEM_ERROR, f"committing the transaction failed: {status.value}"
            )

        return answer_put(result, waiter, answer)
