"""POP_MESSAGE (200050): RocketMQ 5's pop, with long polling.

The checks and answers are RocketMQ 5's PopMessageProcessor's. Messages found: SUCCESS,
the records as the body and PopMessageResponseHeader (popTime, invisibleTime, reviveQid,
restNum, startOffsetInfo, msgOffsetInfo, orderCountInfo). None found: with ``pollTime``
the request is parked on the pull-hold service (under queue id -1 for a pop of every
queue, and on the group's POP retry topic) until a message arrives or the poll time ends;
then, or at once without ``pollTime``, POLLING_TIMEOUT (the 5.x client reads it as
"no new message"); too many parked pops: POLLING_FULL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from rmq.broker.config import BrokerConfig
from rmq.broker.pop.pop_service import PopRequest, PopResult, TopicLookup
from rmq.broker.pull_hold import HeldPullRequest
from rmq.broker.seams import SubscriptionGroups
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.pop import PopMessageRequestHeader, PopMessageResponseHeader, build_queue_info, pop_retry_topic
from rmq.runtime.service import TaskSet
from rmq.store.message_filter import TagsMessageFilter

__all__ = ["PopMessageProcessor", "PopHold", "Popper"]

log = logging.getLogger("rmq.broker.pop")

MAX_POP_POLLING = 100_000  # BrokerConfig.maxPopPollingSize
MAX_BATCH = 32  # PopMessageProcessor's limit


class Popper(Protocol):
    async def pop(self, req: PopRequest, tc: TopicConfig) -> PopResult: ...


class PopHold(Protocol):
    """The pull-hold service as POP parks on it."""

    held_count: int

    def suspend(
        self,
        conn: Any,
        request: Any,
        topic: str,
        queue_id: int,
        pull_from_offset: int,
        timeout_ms: int,
        on_wake: Callable[[HeldPullRequest], None] | None = None,
    ) -> HeldPullRequest: ...

    def cancel(self, req: HeldPullRequest) -> None: ...

    def notify_pop_arriving(self, topic: str, queue_id: int) -> None: ...

    def wake_all(self, pops_only: bool = False) -> None: ...


class PopMessageProcessor:
    def __init__(
        self,
        broker_config: BrokerConfig,
        popper: Popper,
        topics: TopicLookup,
        subscriptions: SubscriptionGroups,
        hold: PopHold,
    ) -> None:
        self.broker_config = broker_config
        self.popper = popper
        self.topics = topics
        self.subscriptions = subscriptions
        self.hold = hold
        self._tasks = TaskSet(log)
        self._closing = False

    async def close(self, grace: float = 2.0) -> None:
        """Answer the parked pops now (POLLING_TIMEOUT unless a message is there)."""
        self._closing = True
        self.hold.wake_all(pops_only=True)
        try:
            await asyncio.wait_for(self._tasks.wait(), grace)
        except TimeoutError:
            pass
        await self._tasks.close()

    def process(self, conn: Any, request: RemotingCommand) -> Any:
        return self._run(conn, request, None)

    async def _rerun(self, conn: Any, request: RemotingCommand, deadline: float) -> None:
        resp = await self._run(conn, request, deadline)
        if resp is not None and not getattr(conn, "closed", False):
            conn.send_response(resp)

    def _refusal(self, h: PopMessageRequestHeader, tc: TopicConfig | None) -> tuple[int, str] | None:
        """RocketMQ 5's checks of a pop, in its order: (code, remark) of the first failing."""
        bc = self.broker_config
        if not (bc.brokerPermission & 4):
            return ResponseCode.NO_PERMISSION, f"the broker[{bc.brokerIP1}] pop message is forbidden"
        if h.max_msg_nums > MAX_BATCH:
            return ResponseCode.INVALID_PARAMETER, f"the broker[{bc.brokerIP1}] pop message's num is greater than 32"
        if h.max_msg_nums <= 0:
            return ResponseCode.INVALID_PARAMETER, f"the custom field <maxMsgNums> must be positive: {h.max_msg_nums}"
        if h.invisible_time <= 0:
            return (
                ResponseCode.INVALID_PARAMETER,
                f"the custom field <invisibleTime> must be positive: {h.invisible_time}",
            )
        if tc is None:
            return ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
        if not (tc.perm & 4):
            return ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] peeking message is forbidden"
        if h.queue_id >= tc.read_queue_nums:
            return (
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            )
        group = self.subscriptions.find(h.consumer_group)
        if group is None:
            return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{h.consumer_group}] does not exist"
        if not group.consumeEnable:
            return ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}"
        if h.exp_type not in (None, "", "TAG"):
            return ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"expression type {h.exp_type} is not supported (TAG only)"
        return None

    async def _run(self, conn: Any, request: RemotingCommand, deadline: float | None) -> RemotingCommand | None:
        h = PopMessageRequestHeader.from_ext_fields(request.ext_fields)
        tc = self.topics.select(h.topic)
        refused = self._refusal(h, tc)
        if refused is not None:
            return request.create_response(*refused)
        assert tc is not None
        req = PopRequest(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.max_msg_nums,
            h.invisible_time,
            h.init_mode,
            h.order,
            h.attempt_id,
            TagsMessageFilter.from_expression(h.exp),
            getattr(conn, "remote_address", "?"),
        )
        result = await self.popper.pop(req, tc)
        if result.buffers:
            resp = self._response(request, ResponseCode.SUCCESS, "FOUND", result)
            resp.body = b"".join(result.buffers)
            return resp
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + max(h.poll_time, 0) / 1000
        remaining_ms = int((deadline - loop.time()) * 1000)
        if remaining_ms > 0 and not self._closing:
            if self.hold.held_count >= MAX_POP_POLLING:
                return self._response(request, ResponseCode.POLLING_FULL, "NO_MESSAGE_IN_QUEUE", result)
            if result.unblock_in_ms is not None:
                # a blocked FIFO queue frees itself then: look again at that time
                remaining_ms = max(min(remaining_ms, result.unblock_in_ms), 1)
            self._park(conn, request, h, deadline, remaining_ms)
            return None
        return self._response(request, ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", result)

    def _park(
        self, conn: Any, request: RemotingCommand, h: PopMessageRequestHeader, deadline: float, remaining_ms: int
    ) -> None:
        twins: list[HeldPullRequest] = []

        def wake(_held: HeldPullRequest) -> None:
            for t in twins:
                self.hold.cancel(t)
            self._tasks.spawn(self._rerun(conn, request, deadline), name="pop-rerun")

        keys = [(h.topic, h.queue_id if h.queue_id >= 0 else -1)]
        if not h.order:
            keys.append((pop_retry_topic(h.topic, h.consumer_group), -1))
        for topic, qid in keys:
            twins.append(self.hold.suspend(conn, request, topic, qid, -1, remaining_ms, on_wake=wake))

    @staticmethod
    def _response(request: RemotingCommand, code: int, remark: str, result: PopResult) -> RemotingCommand:
        start, msgs, counts = build_queue_info(result.queues)
        resp = request.create_response(code, remark)
        resp.ext_fields = PopMessageResponseHeader(
            result.pop_time, result.invisible_time, result.revive_qid, result.rest_num, start, msgs, counts or None
        ).to_ext_fields()
        return resp
