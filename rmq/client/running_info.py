"""How an rmq.client consumer describes itself and consumes one message directly, for the
broker's GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309), as Java's
consumers do (the requests are read and answered in ``rmq.client.consumer_calls``).

307 (``mqadmin consumerStatus``, ``consumerProgress``'s client column): a
``ConsumerRunningInfo`` with the consumer's configuration under the Java field names and
the ``PROP_*`` keys, its subscriptions, and for a push consumer the queues it holds with
their committed offset and cached messages (``ProcessQueue.fillProcessQueueInfo``) and a
status per subscribed topic (the instance's ConsumerStatsManager). A lite pull consumer reports no queues, as Java's.

309 (``mqadmin queryMsgById -g G -d CLIENT``): the stored message is handed to the push
consumer's listener once, outside the pull flow (no offset, no retry), and the listener's
answer reported as a ``CMResult`` (ConsumeMessage{Concurrently,Orderly}Service.
consumeMessageDirectly).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rmq.client.consume_concurrently import ConsumeConcurrentlyContext, ConsumeResult
from rmq.client.consume_orderly import ConsumeMessageOrderlyService, ConsumeOrderlyContext, ConsumeOrderlyResult
from rmq.client.consume_service import ConsumeServiceBase
from rmq.client.offset_store import ReadOffsetType
from rmq.client.process_queue import ProcessQueue
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.message import MessageExt
from rmq.protocol.running_info import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_THREADPOOL_CORE_SIZE,
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ConsumeStatus,
    ProcessQueueInfo,
)
from rmq.remoting.dispatch import exception_text

__all__ = ["consumer_running_info", "consume_message_directly", "fill_process_queue_info"]

log = logging.getLogger("rmq.client.consumer")


def _java_text(v: object) -> str:
    """``String.valueOf`` of a config value (Properties holds text)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(getattr(v, "value", v))  # an enum by its Java name


# Java field name -> (attribute of the rmq consumer, unit divisor). The declared fields of
# DefaultMQPushConsumer / DefaultLitePullConsumer that rmq's consumers have; an attribute a
# consumer lacks is left out, as Java leaves out a null field.
_CONFIG_PROPERTIES: tuple[tuple[str, str, int], ...] = (
    ("consumerGroup", "group", 1),
    ("messageModel", "message_model", 1),
    ("consumeFromWhere", "consume_from_where", 1),
    ("consumeTimestamp", "consume_timestamp", 1),
    ("consumeThreadMin", "consume_thread_max", 1),  # one pool size: rmq has no separate minimum
    ("consumeThreadMax", "consume_thread_max", 1),
    ("consumeConcurrentlyMaxSpan", "consume_concurrently_max_span", 1),
    ("pullThresholdForQueue", "pull_threshold_for_queue", 1),
    ("pullThresholdSizeForQueue", "pull_threshold_size_for_queue", 1),
    ("pullThresholdForAll", "pull_threshold_for_all", 1),
    ("pullThresholdForTopic", "pull_threshold_for_topic", 1),
    ("pullThresholdSizeForTopic", "pull_threshold_size_for_topic", 1),
    ("pullInterval", "pull_interval", 1),
    ("consumeMessageBatchMaxSize", "consume_message_batch_max_size", 1),
    ("pullBatchSize", "pull_batch_size", 1),
    ("postSubscriptionWhenPull", "post_subscription_when_pull", 1),
    ("maxReconsumeTimes", "max_reconsume_times", 1),
    ("suspendCurrentQueueTimeMillis", "suspend_current_queue_time_millis", 1),
    ("consumeTimeout", "consume_timeout_ms", 60_000),  # Java: minutes
    ("awaitTerminationMillisWhenShutdown", "await_termination_ms", 1),
    ("autoCommit", "auto_commit", 1),
    ("autoCommitIntervalMillis", "auto_commit_interval_ms", 1),
    ("consumeMaxSpan", "consume_max_span", 1),
    ("pollTimeoutMillis", "poll_timeout_ms", 1),
)


def _properties(consumer: Any) -> dict[str, str]:
    props: dict[str, str] = {}
    for name, attr, unit in _CONFIG_PROPERTIES:
        v = getattr(consumer, attr, None)
        if v is None:
            continue
        props[name] = _java_text(v // unit if unit != 1 else v)
    strategy = getattr(consumer, "allocate_strategy", None)
    if strategy is not None:
        props["allocateMessageQueueStrategy"] = str(getattr(strategy, "name", strategy))
    config = getattr(consumer, "config", None)
    if config is not None:
        props["unitMode"] = _java_text(bool(getattr(config, "unit_mode", False)))
    props[PROP_CONSUMER_START_TIMESTAMP] = str(getattr(consumer, "consumer_start_timestamp", 0))
    return props


def fill_process_queue_info(pq: ProcessQueue, info: ProcessQueueInfo) -> None:
    """ProcessQueue.fillProcessQueueInfo."""
    cached = pq.cached_range()
    if cached is not None:
        info.cached_msg_min_offset, info.cached_msg_max_offset, info.cached_msg_count = cached
    info.cached_msg_size_in_mib = pq.msg_size // (1024 * 1024)
    taken = pq.consuming_range()
    if taken is not None:
        info.transaction_msg_min_offset, info.transaction_msg_max_offset, info.transaction_msg_count = taken
    info.locked = pq.locked
    info.try_unlock_times = pq.try_unlock_times
    info.last_lock_timestamp = pq.last_lock_timestamp
    info.droped = pq.dropped
    info.last_pull_timestamp = pq.last_pull_timestamp
    info.last_consume_timestamp = pq.last_consume_timestamp


async def consumer_running_info(c: Any) -> ConsumerRunningInfo:
    """DefaultMQPushConsumerImpl / DefaultLitePullConsumerImpl.consumerRunningInfo (the
    instance adds the NameServer addresses, consume type and version: consumer_calls).
    ``c``: a PushConsumer or LitePullConsumer (their settings differ: read by name)."""
    info = ConsumerRunningInfo(_properties(c))
    subs = c.subscriptions()
    info.subscription_set = list(subs)
    service = getattr(c, "consume_service", None)
    if not isinstance(service, ConsumeServiceBase):
        return info  # a lite pull consumer: properties and subscriptions only, as Java
    info.properties[PROP_CONSUME_ORDERLY] = _java_text(isinstance(service, ConsumeMessageOrderlyService))
    info.properties[PROP_THREADPOOL_CORE_SIZE] = str(c.consume_thread_max)
    store = c.offset_store
    for mq, pq in list(c.rebalance.process_queue_table.items()):
        pq_info = ProcessQueueInfo()
        if store is not None:
            try:
                pq_info.commit_offset = await store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
            except Exception as e:  # Java's readOffset answers -1 when the broker cannot be asked
                log.warning("running info of %s: reading the offset of %s failed: %s", c.group, mq, e)
                pq_info.commit_offset = -1
        fill_process_queue_info(pq, pq_info)
        info.mq_table[mq] = pq_info
    inst = c.instance
    for sd in subs:
        info.status_table[sd.topic] = (
            inst.consumer_stats.consume_status(c.group, sd.topic) if inst is not None else ConsumeStatus()
        )
    return info


_CONCURRENT_RESULTS = {ConsumeResult.SUCCESS: CMResult.CR_SUCCESS, ConsumeResult.RECONSUME_LATER: CMResult.CR_LATER}
_ORDERLY_RESULTS = {
    ConsumeOrderlyResult.COMMIT: CMResult.CR_COMMIT,
    ConsumeOrderlyResult.ROLLBACK: CMResult.CR_ROLLBACK,
    ConsumeOrderlyResult.SUCCESS: CMResult.CR_SUCCESS,
    ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT: CMResult.CR_LATER,
}


async def consume_message_directly(
    service: ConsumeServiceBase, msg: MessageExt, broker_name: str
) -> ConsumeMessageDirectlyResult:
    """ConsumeMessage{Concurrently,Orderly}Service.consumeMessageDirectly: the listener
    once, on the message alone; a raise is CR_THROW_EXCEPTION, None CR_RETURN_NULL."""
    orderly = isinstance(service, ConsumeMessageOrderlyService)
    result = ConsumeMessageDirectlyResult(order=orderly, auto_commit=True)
    mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
    ctx: ConsumeOrderlyContext | ConsumeConcurrentlyContext
    ctx = ConsumeOrderlyContext(mq) if orderly else ConsumeConcurrentlyContext(mq)
    msgs = [msg]
    service.consumer.reset_retry_topic(msgs)
    group = service.consumer.group
    log.info("consumeMessageDirectly receive new message: group=%s msgId=%s %s", group, msg.msg_id, mq)
    begin = time.monotonic()
    try:
        status = await service._call_listener(msgs, ctx)
        if status is None:
            result.consume_result = CMResult.CR_RETURN_NULL
        else:
            table: dict[Any, CMResult] = _ORDERLY_RESULTS if orderly else _CONCURRENT_RESULTS
            result.consume_result = table.get(status)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        result.consume_result = CMResult.CR_THROW_EXCEPTION
        result.remark = exception_text(e)
        log.warning(
            "consumeMessageDirectly exception: %s Group: %s msgId: %s MQ: %s", result.remark, group, msg.msg_id, mq
        )
    if isinstance(ctx, ConsumeOrderlyContext):
        result.auto_commit = ctx.auto_commit
    result.spent_time_mills = int((time.monotonic() - begin) * 1000)
    log.info("consumeMessageDirectly Result: group=%s msgId=%s %s", group, msg.msg_id, result)
    return result
