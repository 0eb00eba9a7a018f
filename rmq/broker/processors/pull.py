"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) with long polling — spec 2.5."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rmq.broker.config import BrokerConfig
from rmq.broker.pull_hold import HeldPullRequest
from rmq.broker.seams import (
    ConsumerOffsets,
    ConsumerRegistry,
    GetStats,
    PullHold,
    StoreReader,
    SubscriptionGroups,
    TopicConfigs,
)
from rmq.common.clock import monotonic_ms
from rmq.common.mixall import MASTER_ID
from rmq.protocol.codes import ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.message_filter import TagsMessageFilter
from rmq.store.results import GetMessageStatus

log = logging.getLogger("rmq.broker.pull")

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

_STATUS_CODE = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


@dataclass(eq=False)
class PullMessageProcessor:
    """The hold service (``pull_hold``) is given after construction: it calls back into
    ``execute_when_wakeup``, so one of the two has to exist first."""

    broker_config: BrokerConfig
    store_config: MessageStoreConfig
    store: StoreReader
    topics: TopicConfigs
    subscriptions: SubscriptionGroups
    consumers: ConsumerRegistry
    offsets: ConsumerOffsets
    stats: GetStats
    pull_hold: PullHold | None = None

    def __post_init__(self) -> None:
        self._filters: dict[str, TagsMessageFilter] = {}

    def process(self, conn: Any, request: RemotingCommand) -> RemotingCommand | None:
        return self._process(conn, request, allow_suspend=True)

    def execute_when_wakeup(self, held: HeldPullRequest) -> None:
        """Called by the hold service: answer the parked pull, never park it again."""
        resp = self._process(held.conn, held.request, allow_suspend=False)
        if resp is not None:
            held.conn.send_response(resp)

    def _filter_for(self, expression: str | None) -> TagsMessageFilter:
        key = expression or "*"
        f = self._filters.get(key)
        if f is None:
            if len(self._filters) > 10000:
                self._filters.clear()
            f = self._filters[key] = TagsMessageFilter.from_expression(expression)
        return f

    def _process(self, conn: Any, request: RemotingCommand, allow_suspend: bool) -> RemotingCommand | None:
        try:
            h = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        except ProtocolError as e:
            return request.create_response(ResponseCode.SYSTEM_ERROR, str(e))
        bc = self.broker_config
        if not (bc.brokerPermission & 4):
            return request.create_response(
                ResponseCode.NO_PERMISSION, f"the broker[{bc.brokerIP1}] pulling message is forbidden"
            )
        sub_group = self.subscriptions.find(h.consumer_group)
        if sub_group is None:
            return request.create_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{h.consumer_group}] does not exist"
            )
        if not sub_group.consumeEnable:
            return request.create_response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}"
            )
        has_suspend = bool(h.sys_flag & FLAG_SUSPEND)
        has_commit = bool(h.sys_flag & FLAG_COMMIT_OFFSET)
        has_subscription = bool(h.sys_flag & FLAG_SUBSCRIPTION)
        suspend_ms = h.suspend_timeout_millis if has_suspend else 0
        tc = self.topics.select(h.topic)
        if tc is None:
            log.warning("pull from %s for topic %s which does not exist", conn.remote_address, h.topic)
            return request.create_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{h.topic}] not exist, apply first please! "
                "See http://rocketmq.apache.org/docs/faq/ for further details.",
            )
        if not (tc.perm & 4):
            return request.create_response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
            )
        if h.queue_id < 0 or h.queue_id >= tc.read_queue_nums:
            return request.create_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{conn.remote_address}]",
            )
        if has_subscription:
            if h.expression_type not in (None, "", "TAG"):
                return request.create_response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    f"expression type {h.expression_type} is not supported (TAG only)",
                )
            message_filter = self._filter_for(h.subscription)
        else:
            group_info = self.consumers.get_group(h.consumer_group)
            if group_info is None:
                return request.create_response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist"
                )
            if not sub_group.consumeBroadcastEnable and group_info.message_model == "BROADCASTING":
                return request.create_response(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{h.consumer_group}] can not consume by broadcast way",
                )
            sub = group_info.find_subscription(h.topic)
            if sub is None:
                return request.create_response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"
                )
            if sub.sub_version < h.sub_version:
                return request.create_response(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
                )
            message_filter = self._filter_for(sub.sub_string)

        t0 = monotonic_ms()
        result = self.store.get_messages(
            h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, message_filter
        )
        read_ms = monotonic_ms() - t0
        self.stats.on_get_done(read_ms, bool(result.buffers))
        store_config = self.store_config
        role = store_config.brokerRole
        code = _STATUS_CODE.get(result.status)
        if code is None:  # NO_MATCHED_LOGIC_QUEUE / NO_MESSAGE_IN_QUEUE
            if h.queue_offset != 0:
                code = ResponseCode.PULL_OFFSET_MOVED
                log.info(
                    "the broker stores no data for %s-%d; fix the request offset %d (group %s)",
                    h.topic,
                    h.queue_id,
                    h.queue_offset,
                    h.consumer_group,
                )
            else:
                code = ResponseCode.PULL_NOT_FOUND
        if role == BrokerRole.SLAVE and not bc.slaveReadEnable:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            suggest = MASTER_ID
        if bc.slaveReadEnable:
            suggest = (
                sub_group.whichBrokerWhenConsumeSlowly if result.suggest_pulling_from_slave else sub_group.brokerId
            )
        else:
            suggest = MASTER_ID
        if code == ResponseCode.PULL_OFFSET_MOVED and role == BrokerRole.SLAVE and not store_config.offsetCheckInSlave:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning(
                "PULL_OFFSET_MOVED: correction offset. topic=%s queue=%d group=%s "
                "requestOffset=%d newOffset=%d (queue min %d, max %d) client=%s",
                h.topic,
                h.queue_id,
                h.consumer_group,
                h.queue_offset,
                result.next_begin_offset,
                result.min_offset,
                result.max_offset,
                conn.remote_address,
            )

        response: RemotingCommand | None
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and has_suspend:
            timeout = suspend_ms if bc.longPollingEnable else bc.shortPollingTimeMills
            assert self.pull_hold is not None
            self.pull_hold.suspend(conn, request, h.topic, h.queue_id, h.queue_offset, timeout)
            response = None
        else:
            response = request.create_response(code, result.status.value)
            response.ext_fields = PullMessageResponseHeader(
                suggest, result.next_begin_offset, result.min_offset, result.max_offset
            ).to_ext_fields()
            if code == ResponseCode.SUCCESS:
                response.body = result.body()
                self.stats.on_get(h.consumer_group, h.topic, result, h.queue_id, read_ms)

        if allow_suspend and has_commit and role != BrokerRole.SLAVE:
            self.offsets.commit_offset(conn.remote_address, h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return response
