"""TransactionProducer (Java ``TransactionMQProducer`` + the transactional half of
``DefaultMQProducerImpl``).

    class Orders(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            db.insert(arg)                         # the local transaction
            return LocalTransactionState.COMMIT_MESSAGE
        def check_local_transaction(self, msg):
            return (LocalTransactionState.COMMIT_MESSAGE if db.has(msg.transaction_id)
                    else LocalTransactionState.ROLLBACK_MESSAGE)

    p = TransactionProducer("tx-group", "127.0.0.1:9876", transaction_listener=Orders())
    await p.start()
    r = await p.send_message_in_transaction(Message("T", b"..."), arg=order)

How it works, as RocketMQ does it (spec 2.12, 7.3):

1. The message is sent as a half message (properties ``TRAN_MSG=true`` and
   ``PGROUP=<group>``, sysflag TRANSACTION_PREPARED): stored, invisible to consumers.
2. If it was stored (SEND_OK) the listener's ``execute_local_transaction(msg, arg)``
   runs; an exception or None counts as UNKNOW. Any other send status means
   ROLLBACK_MESSAGE without running it; a send that raised raises.
3. END_TRANSACTION goes oneway to the broker that holds the half message:
   commit (8), rollback (12) or unknown (0), with ``tranStateTableOffset`` = the send's
   queue offset and ``commitLogOffset`` from its offset msgId.
4. A half message still unresolved after the broker's ``transactionTimeOut`` is
   checked: the broker sends CHECK_TRANSACTION_STATE to a live producer of the group
   (this one, or another process of the same group if this one died); the client
   instance hands it here, ``check_local_transaction(msg_ext)`` answers, and the answer
   goes back as END_TRANSACTION with ``fromTransactionCheck=true`` and the check's
   offsets. After ``transactionCheckMax`` unanswered checks the broker gives up.

Listener methods may be plain functions (run in a thread: ``execute`` in the default
executor, checks in a pool of ``check_thread_pool_nums`` threads, 1 as Java) or
coroutines (awaited on the loop). At most ``check_request_hold_max`` checks wait;
more are dropped (the broker asks again).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rmq.client._util import BoundedTaskSet, is_async_callable
from rmq.client.errors import MQClientError
from rmq.client.message import Message, SendResult, SendStatus, validate_message
from rmq.client.producer import Producer
from rmq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from rmq.protocol.message import MessageConst, MessageExt, SysFlag, decode_message_id

__all__ = [
    "LocalTransactionState",
    "TransactionListener",
    "TransactionSendResult",
    "TransactionProducer",
    "TransactionMessageExt",
]

log = logging.getLogger("rmq.client.transaction")


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # Java's spelling
    UNKNOWN = "UNKNOW"  # alias


#: END_TRANSACTION ``commitOrRollback`` per state (MessageSysFlag values).
COMMIT_OR_ROLLBACK = {
    LocalTransactionState.COMMIT_MESSAGE: SysFlag.TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: SysFlag.TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: SysFlag.TRANSACTION_NOT_TYPE,
}

StateResult = LocalTransactionState | None | Awaitable[LocalTransactionState | None]


class TransactionListener:
    """Override both methods (sync or ``async def``)."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> StateResult:
        raise NotImplementedError

    def check_local_transaction(self, msg: TransactionMessageExt) -> StateResult:
        raise NotImplementedError


@dataclass(slots=True, eq=False)
class TransactionMessageExt(MessageExt):
    """The half message a check is about, with its ``transaction_id`` (its UNIQ_KEY)."""

    transaction_id: str | None = None

    @classmethod
    def of(cls, msg: MessageExt) -> TransactionMessageExt:
        values = {f.name: getattr(msg, f.name) for f in dataclasses.fields(MessageExt)}
        return cls(**values, transaction_id=msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX))


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    """A SendResult plus what the local transaction said."""

    local_transaction_state: LocalTransactionState | None = None


class TransactionProducer(Producer):
    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        transaction_listener: TransactionListener | None = None,
        check_thread_pool_nums: int = 1,
        check_request_hold_max: int = 2000,
        **kwargs: Any,
    ) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.transaction_listener = transaction_listener
        self.check_thread_pool_nums = max(1, check_thread_pool_nums)
        self.check_request_hold_max = check_request_hold_max
        self._check_executor: ThreadPoolExecutor | None = None
        self._check_sem: asyncio.Semaphore | None = None
        self._check_tasks = BoundedTaskSet(log)
        #: END_TRANSACTION answers sent for broker checks (for tests and monitoring).
        self.checks_answered = 0

    async def start(self) -> None:
        self._check_executor = ThreadPoolExecutor(
            self.check_thread_pool_nums, thread_name_prefix=f"tx-check-{self.group}"
        )
        self._check_sem = asyncio.Semaphore(self.check_thread_pool_nums)
        try:
            await super().start()
        except BaseException:
            self._check_executor.shutdown(wait=False)
            raise

    async def shutdown(self) -> None:
        tasks = list(self._check_tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=5)
            for t in tasks:
                t.cancel()
        await super().shutdown()
        if self._check_executor is not None:
            self._check_executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ send
    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        listener = self.transaction_listener
        if listener is None:
            raise MQClientError("TransactionListener is null")
        self._make_sure_state_ok()
        if msg.delay_time_level:
            msg.delay_time_level = 0  # delayed transactional messages are not supported
        msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        validate_message(msg, self.max_message_size)
        msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PRODUCER_GROUP] = self.group
        try:
            result = await self.send(msg)
        except Exception as e:
            raise MQClientError(f"send message Exception: {e}") from e
        state = LocalTransactionState.UNKNOW
        local_exc: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            msg.transaction_id = result.msg_id
            try:
                got = await self._call(listener.execute_local_transaction, msg, arg)
                if got is None:
                    log.info("executeLocalTransactionBranch return null, %s", result.msg_id)
                elif not isinstance(got, LocalTransactionState):
                    log.warning("executeLocalTransaction returned %r, treated as UNKNOW", got)
                else:
                    state = got
                if state is not LocalTransactionState.COMMIT_MESSAGE:
                    log.info("executeLocalTransactionBranch return %s, msgId %s", state.value, result.msg_id)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("executeLocalTransactionBranch exception, msgId %s: %r", result.msg_id, e)
                local_exc = e
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        try:
            await self.end_transaction(msg, result, state, local_exc)
        except Exception as e:
            log.warning("local transaction execute %s, but end broker transaction failed: %s", state.value, e)
        return TransactionSendResult(
            result.status,
            result.msg_id,
            result.offset_msg_id,
            result.message_queue,
            result.queue_offset,
            msg.transaction_id,
            result.region_id,
            result.trace_on,
            state,
        )

    async def end_transaction(
        self, msg: Message, result: SendResult, state: LocalTransactionState, local_exc: BaseException | None = None
    ) -> None:
        """END_TRANSACTION (oneway) for a half message this producer sent."""
        inst = self._make_sure_state_ok()
        _, _, commit_log_offset = decode_message_id(result.offset_msg_id or result.msg_id or "")
        addr = inst.find_broker_address_in_publish(result.message_queue.broker_name)
        if addr is None:
            raise MQClientError(f"The broker[{result.message_queue.broker_name}] not exist")
        header = EndTransactionRequestHeader(
            self.group,
            result.queue_offset,
            commit_log_offset,
            COMMIT_OR_ROLLBACK[state],
            result.msg_id or "",
            None,
            False,
            result.transaction_id or msg.transaction_id,
        )
        remark = f"executeLocalTransactionBranch exception: {local_exc!r}" if local_exc is not None else None
        await inst.api.end_transaction_oneway(addr, header, remark)

    # ------------------------------------------------------------------ broker checks
    def check_transaction_state(
        self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        """CHECK_TRANSACTION_STATE from ``broker_addr`` (called by the client instance)."""
        if self.instance is None or self._check_sem is None:
            return
        if len(self._check_tasks) >= self.check_request_hold_max:
            log.warning(
                "too many transaction checks waiting (%d); dropped the check of %s",
                len(self._check_tasks),
                header.msg_id,
            )
            return
        self._check_tasks.spawn(self._check_logged(broker_addr, msg, header), f"tx-check {header.msg_id}")

    async def _check_logged(
        self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        try:
            await self._check(broker_addr, msg, header)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("checkTransactionState of %s from %s failed", header.msg_id, broker_addr)

    async def _check(self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader) -> None:
        msg = TransactionMessageExt.of(msg)
        uniq = msg.transaction_id
        state = LocalTransactionState.UNKNOW
        exc: BaseException | None = None
        listener = self.transaction_listener
        assert self._check_sem is not None
        async with self._check_sem:
            if listener is None:
                log.warning("CheckTransactionState, pick transactionListener by group[%s] failed", self.group)
            else:
                try:
                    got = await self._call(listener.check_local_transaction, msg, executor=self._check_executor)
                    if isinstance(got, LocalTransactionState):
                        state = got
                    elif got is not None:
                        log.warning("checkLocalTransaction returned %r, treated as UNKNOW", got)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.error("Broker call checkTransactionState, but checkLocalTransactionState exception: %r", e)
                    exc = e
        inst = self.instance
        if inst is None or self._state_name() != "RUNNING":
            return
        end = EndTransactionRequestHeader(
            self.group,
            header.tran_state_table_offset,
            header.commit_log_offset,
            COMMIT_OR_ROLLBACK[state],
            uniq or msg.msg_id,
            None,
            True,
            header.transaction_id,
        )
        remark = f"checkLocalTransactionState Exception: {exc!r}" if exc is not None else None
        try:
            await inst.api.end_transaction_oneway(broker_addr, end, remark)
            self.checks_answered += 1
            log.info("answered the transaction check of %s: %s", uniq, state.value)
        except Exception as e:
            log.error("endTransactionOneway of %s to %s failed: %s", uniq, broker_addr, e)

    def _state_name(self) -> str:
        return self._state

    @staticmethod
    async def _call(fn: Callable[..., Any], *args: Any, executor: ThreadPoolExecutor | None = None) -> Any:
        if is_async_callable(fn):
            return await fn(*args)
        result = await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
        if inspect.isawaitable(result):
            result = await result
        return result
