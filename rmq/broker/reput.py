"""A stored message put again: delayed delivery and a transaction's commit (to its real
topic), a half message's check (back to the half queue or to the check-max topic), a
consumer's send-back (to the retry or dead-letter topic).

RocketMQ rebuilds a MessageExtBrokerInner field by field in each of those places; here
``reput_message`` is that one copy, ``real_destination`` reads REAL_TOPIC / REAL_QID, and
``answer_put`` answers a request when such a put is stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import MessageConst, MessageExt, MessageExtBrokerInner, properties_to_string
from rmq.store.results import PutMessageResult, PutMessageStatus


def real_destination(props: dict[str, str], topic: str) -> tuple[str, int]:
    """REAL_TOPIC (else ``topic``) and REAL_QID (else 0) of a delayed or half message."""
    real_topic = props.get(MessageConst.REAL_TOPIC, topic)
    try:
        real_qid = int(props.get(MessageConst.REAL_QUEUE_ID, "0"))
    except ValueError:
        real_qid = 0
    return real_topic, real_qid


def stored_properties_string(props: dict[str, str]) -> str:
    """The properties as stored: WAIT_STORE_MSG_OK stays in the dict (the store reads it
    there) and out of the CommitLog."""
    return properties_to_string({k: v for k, v in props.items() if k != MessageConst.WAIT_STORE_MSG_OK})


def reput_message(
    msg: MessageExt,
    topic: str,
    queue_id: int,
    props: dict[str, str],
    *,
    sys_flag: int | None = None,
    store_host: bytes | None = None,
    reconsume_times: int | None = None,
    prepared_transaction_offset: int = 0,
) -> MessageExtBrokerInner:
    """``msg`` (body, flag, born time and host kept) as a new put to ``topic`` / ``queue_id``
    with ``props``, which gets WAIT_STORE_MSG_OK=false: a reput never waits for the flush.
    sys_flag, store_host and reconsume_times are msg's unless given."""
    props[MessageConst.WAIT_STORE_MSG_OK] = "false"
    return MessageExtBrokerInner(
        topic=topic,
        body=msg.body,
        queue_id=queue_id,
        flag=msg.flag,
        properties=props,
        properties_string=stored_properties_string(props),
        sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=msg.store_host if store_host is None else store_host,
        reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )


def answer_put(
    result: PutMessageResult,
    waiter: Awaitable[PutMessageStatus] | None,
    answer: Callable[[PutMessageStatus], RemotingCommand],
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """``answer(status)`` now, or once ``waiter`` (flush / replication) completes."""
    if waiter is None:
        return answer(result.status)

    async def later() -> RemotingCommand:
        st = await waiter
        return answer(result.status if st is PutMessageStatus.PUT_OK else st)

    return later()
