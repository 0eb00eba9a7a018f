"""LitePullConsumer (Java ``DefaultLitePullConsumer``): the application polls.

    c = LitePullConsumer("g", "127.0.0.1:9876")
    c.subscribe("T", "*")            # group rebalance ...
    # c.assign([mq0, mq1])           # ... or a fixed set of queues
    await c.start()
    msgs = await c.poll(1000)
    await c.commit()

Each owned queue has a pull task that long-polls the broker (PULL_MESSAGE with the lite-pull
flag and the subscription in every request) and queues the messages it gets; ``poll`` hands out one
pulled batch at a time. Offsets: ``poll`` marks what it returned as consumed;
``commit`` writes the consumed offsets to the broker; with ``auto_commit`` (default)
``poll`` does that every ``auto_commit_interval_ms`` and ``shutdown`` once more — so a
message is committed only after a later ``poll`` (at-least-once).

BROADCASTING consumers keep their offsets in a local file (``LocalFileOffsetStore``,
``local_offset_store_dir``). An offset reset pushed by the broker
(RESET_CONSUMER_CLIENT_OFFSET, ``rmq admin resetOffsetByTime``) acts like ``seek`` on
the queues it names: what was pulled for them and not yet polled is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rmq.client.config import ClientConfig
from rmq.client.consumer_base import (
    CREATE_JUST,
    RUNNING,
    SHUTDOWN_ALREADY,
    ConsumeFromWhere,
    ConsumerBase,
    ConsumerRebalanceImpl,
    MessageModel,
)
from rmq.client.errors import MQClientError
from rmq.client.instance import MQClientInstance
from rmq.client.message import PullStatus
from rmq.client.offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType
from rmq.client.process_queue import ProcessQueue
from rmq.client.rebalance import AVG, AllocateStrategy, PullRequest
from rmq.client.routes import topic_route_to_subscribe_info
from rmq.client.running_info import consumer_running_info
from rmq.common.clock import now_ms
from rmq.protocol.bodies import MessageQueue, SubscriptionData
from rmq.protocol.codes import PullSysFlag
from rmq.protocol.message import MessageExt
from rmq.protocol.running_info import ConsumerRunningInfo

__all__ = ["LitePullConsumer"]

log = logging.getLogger("rmq.client.lite")

BROKER_SUSPEND_MAX_TIME_MILLIS = 20000
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND = 30000
PULL_TIME_DELAY_MILLS_WHEN_PAUSE = 1000
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_ON_EXCEPTION = 1000

_NONE, _SUBSCRIBE, _ASSIGN = "NONE", "SUBSCRIBE", "ASSIGN"


@dataclass(eq=False)
class _QueueState:
    """AssignedMessageQueue's per-queue record."""

    process_queue: ProcessQueue
    pull_offset: int = -1
    consume_offset: int = -1
    seek_offset: int = -1
    paused: bool = False
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class _ConsumeRequest:
    messages: list[MessageExt]
    message_queue: MessageQueue
    process_queue: ProcessQueue = field(repr=False)


class RebalanceLitePullImpl(ConsumerRebalanceImpl):
    consume_type = "CONSUME_ACTIVELY"
    consumer: LitePullConsumer

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        await self.consumer.release_queue(mq)
        return True

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        for r in requests:
            self.consumer.take_queue(r.message_queue, r.process_queue, r.next_offset)


class LitePullConsumer(ConsumerBase):
    OFFSET_READ_TYPE = ReadOffsetType.MEMORY_FIRST_THEN_STORE

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        config: ClientConfig | None = None,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | int | datetime | None = None,
        allocate_strategy: AllocateStrategy = AVG,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        pull_batch_size: int = 10,
        pull_threshold_for_all: int = 10000,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_max_span: int = 2000,
        poll_timeout_ms: int = 5000,
        offset_store: OffsetStore | None = None,
        **config_kwargs: Any,
    ) -> None:
        super().__init__(
            group,
            namesrv_addr,
            config,
            config_kwargs,
            message_model,
            consume_from_where,
            consume_timestamp,
            allocate_strategy,
            offset_store,
        )
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_all = pull_threshold_for_all
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.consume_max_span = consume_max_span
        self.poll_timeout_ms = poll_timeout_ms
        self._subscription_type = _NONE
        self._assigned: dict[MessageQueue, _QueueState] = {}
        self._cache: asyncio.Queue[_ConsumeRequest] | None = None
        self._next_auto_commit_deadline = 0

    def _new_rebalance(self) -> RebalanceLitePullImpl:
        return RebalanceLitePullImpl(self)

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Subscribe to ``topic``; queues come from the group's rebalance."""
        if self._subscription_type == _ASSIGN:
            raise MQClientError("Subscribe and assign are mutually exclusive.")
        self._subscription_type = _SUBSCRIBE
        self._subscriptions[topic] = expression or "*"
        self._subscribe_now(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        super().unsubscribe(topic)
        for mq in [m for m in self._assigned if m.topic == topic]:
            self._drop_state(mq)

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no rebalance)."""
        if self._subscription_type == _SUBSCRIBE:
            raise MQClientError("Subscribe and assign are mutually exclusive.")
        mqs = set(mqs)
        if not mqs:
            raise MQClientError("Message queues can not be null or empty.")
        self._subscription_type = _ASSIGN
        for mq in list(self._assigned):
            if mq not in mqs:
                self._drop_state(mq)
        for mq in mqs:
            if mq not in self._assigned:
                self._assigned[mq] = _QueueState(ProcessQueue())
                if self._state == RUNNING:
                    self._start_pull_task(mq)

    def assignment(self) -> set[MessageQueue]:
        return set(self._assigned)

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            st = self._assigned.get(mq)
            if st is not None:
                st.paused = True

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            st = self._assigned.get(mq)
            if st is not None:
                st.paused = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._state == RUNNING:
            return
        if self._state != CREATE_JUST:
            raise MQClientError(f"The LitePullConsumer service state not OK, {self._state}")
        self._cache = asyncio.Queue()
        inst = self._create_instance()
        await self._start_instance(inst)
        self._next_auto_commit_deadline = now_ms() + self.auto_commit_interval_ms
        if self._subscription_type == _SUBSCRIBE:
            await self._announce_subscriptions(inst)
        else:
            for mq in list(self._assigned):
                self._start_pull_task(mq)
        log.info("lite pull consumer %s started (client %s)", self.group, inst.client_id)

    async def shutdown(self) -> None:
        if self._state != RUNNING:
            return
        self._state = SHUTDOWN_ALREADY
        await self._end_side_tasks("pull tasks")
        if self.auto_commit:
            self._update_store_from_consumed()
        await self._persist(list(self._assigned), oneway=False)
        await self._shutdown_instance()
        log.info("lite pull consumer %s shut down", self.group)

    def _check_running(self) -> None:
        if self._state != RUNNING:
            raise MQClientError(f"The consumer service state not OK, {self._state}")

    # ------------------------------------------------------------------ polling
    async def poll(self, timeout_ms: int | None = None) -> list[MessageExt]:
        """The next pulled batch, or [] after ``timeout_ms`` (default ``poll_timeout_ms``)."""
        self._check_running()
        timeout = self.poll_timeout_ms if timeout_ms is None else timeout_ms
        if timeout < 0:
            raise MQClientError("Timeout must not be negative")
        if self.auto_commit and now_ms() >= self._next_auto_commit_deadline:
            self._next_auto_commit_deadline = now_ms() + self.auto_commit_interval_ms
            await self.commit()
        assert self._cache is not None
        deadline = time.monotonic() + timeout / 1000
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    req = self._cache.get_nowait()
                else:
                    async with asyncio.timeout(left):
                        req = await self._cache.get()
            except (TimeoutError, asyncio.QueueEmpty):
                return []
            st = self._assigned.get(req.message_queue)
            if req.process_queue.dropped or st is None or st.process_queue is not req.process_queue:
                continue
            offset = req.process_queue.remove_messages(req.messages)
            if offset >= 0:
                st.consume_offset = offset
            return req.messages

    # ------------------------------------------------------------------ offsets
    def _update_store_from_consumed(self, only: Iterable[MessageQueue] | None = None) -> None:
        store = self.offset_store
        assert store is not None
        for mq in self._assigned if only is None else only:
            st = self._assigned.get(mq)
            if st is not None and st.consume_offset != -1 and not st.process_queue.dropped:
                store.update_offset(mq, st.consume_offset, False)

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Write consumed offsets (or the given ones) to the broker and wait for it."""
        self._check_running()
        store = self.offset_store
        assert store is not None
        if offsets is None:
            self._update_store_from_consumed()
            mqs = list(self._assigned)
        else:
            for mq, off in offsets.items():
                store.update_offset(mq, off, False)
            mqs = list(offsets)
        await self._persist(mqs, oneway=False)

    commit_sync = commit

    async def committed(self, mq: MessageQueue) -> int:
        """The offset stored on the broker for ``mq`` (-1 if none)."""
        self._check_running()
        assert self.offset_store is not None
        return await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Continue ``mq`` from ``offset`` (within the queue's [min, max])."""
        self._check_running()
        st = self._assigned.get(mq)
        if st is None:
            raise MQClientError(f"The message queue is not in assigned list, message queue: {mq}")
        lo = await self.min_offset(mq)
        hi = await self.max_offset(mq)
        if offset < lo or offset > hi:
            raise MQClientError(f"Seek offset illegal, seek offset = {offset}, min offset = {lo}, max offset = {hi}")
        st.seek_offset = offset
        self._clear_cached(mq)
        if st.task is not None:
            st.task.cancel()
            st.task = None
        self._start_pull_task(mq)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.max_offset(mq))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self.search_offset(mq, timestamp_ms)

    async def fetch_message_queues(self, topic: str) -> set[MessageQueue]:
        """The topic's readable queues, from the NameServer."""
        self._check_running()
        assert self.instance is not None
        route = await self.instance.api.get_topic_route_info(topic)
        if route is None:
            raise MQClientError(f"Can not find Message Queue for this topic, {topic}")
        for bd in route.broker_datas:
            self.instance.broker_addr_table[bd.broker_name] = dict(bd.broker_addrs)
        return topic_route_to_subscribe_info(topic, route)

    async def _master_addr_fallback(self, inst: MQClientInstance, mq: MessageQueue) -> str | None:
        # An assigned queue's topic may be in no route table yet: ask the NameServer.
        route = await inst.api.get_topic_route_info(mq.topic)
        for bd in route.broker_datas if route else []:
            inst.broker_addr_table[bd.broker_name] = dict(bd.broker_addrs)
        return inst.find_broker_address_in_publish(mq.broker_name)

    # ------------------------------------------------------------------ MQConsumerInner
    def _rebalance_enabled(self) -> bool:
        return self._state == RUNNING and self._subscription_type == _SUBSCRIBE

    async def consumer_running_info(self) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO (rmq.client.running_info): no queues, as Java's."""
        return await consumer_running_info(self)

    async def persist_consumer_offset(self) -> None:
        if self._state == RUNNING:
            await self._persist(list(self._assigned), oneway=True)

    async def reset_offset(self, topic: str, offset_table: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: ``seek`` the named queues of ``topic`` we own."""
        if self._state != RUNNING:
            return
        store = self.offset_store
        assert store is not None
        for mq, offset in offset_table.items():
            st = self._assigned.get(mq)
            if mq.topic != topic or st is None:
                continue
            st.seek_offset = offset
            st.consume_offset = offset
            store.update_offset(mq, offset, False)
            self._clear_cached(mq)
            if st.task is not None:
                st.task.cancel()
                st.task = None
            self._start_pull_task(mq)
            log.info("[reset-offset] %s %s continues at offset %d", self.group, mq, offset)
        if isinstance(store, LocalFileOffsetStore):
            await store.persist_all(set(self._assigned))

    # ------------------------------------------------------------------ queue ownership
    def take_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """Rebalance gave us ``mq``, to be pulled from ``offset``."""
        old = self._assigned.get(mq)
        if old is not None:
            self._drop_state(mq)
        self._assigned[mq] = _QueueState(pq, pull_offset=offset)
        if self._state == RUNNING:
            self._start_pull_task(mq)

    async def release_queue(self, mq: MessageQueue) -> None:
        """Rebalance took ``mq`` away: commit what was consumed, stop pulling it."""
        store = self.offset_store
        assert store is not None
        if self.auto_commit:
            self._update_store_from_consumed([mq])
        await store.persist(mq)
        store.remove_offset(mq)
        self._drop_state(mq)

    def _drop_state(self, mq: MessageQueue) -> None:
        st = self._assigned.pop(mq, None)
        if st is None:
            return
        st.process_queue.dropped = True
        if st.task is not None:
            st.task.cancel()
        self._clear_cached(mq)

    def _clear_cached(self, mq: MessageQueue) -> None:
        st = self._assigned.get(mq)
        if st is not None:
            st.process_queue.clear()
        q = self._cache
        if q is None or q.empty():
            return
        keep = []
        while not q.empty():
            r = q.get_nowait()
            if r.message_queue != mq:
                keep.append(r)
        for r in keep:
            q.put_nowait(r)

    def _start_pull_task(self, mq: MessageQueue) -> None:
        st = self._assigned[mq]
        if st.task is not None and not st.task.done():
            return
        st.task = self._tasks.spawn(self._pull_loop(mq, st), f"pull {mq}")

    async def _pull_loop(self, mq: MessageQueue, st: _QueueState) -> None:
        try:
            while self._state == RUNNING and self._assigned.get(mq) is st and not st.process_queue.dropped:
                delay = await self._pull_once(mq, st)
                if delay:
                    await asyncio.sleep(delay / 1000)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pull task of %s crashed", mq)

    async def _pull_once(self, mq: MessageQueue, st: _QueueState) -> int:
        pq = st.process_queue
        pq.last_pull_timestamp = now_ms()
        if st.paused:
            return PULL_TIME_DELAY_MILLS_WHEN_PAUSE
        assert self._cache is not None and self.pull_api is not None
        if (
            self._cache.qsize() * self.pull_batch_size > self.pull_threshold_for_all
            or pq.msg_count > self.pull_threshold_for_queue
            or pq.msg_size_mib > self.pull_threshold_size_for_queue
            or pq.max_span() > self.consume_max_span
        ):
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        if st.seek_offset != -1:
            offset = st.seek_offset
            st.seek_offset = -1
            st.pull_offset = offset
            st.consume_offset = -1
            pq.clear()
        elif st.pull_offset == -1:
            try:
                offset = await self.compute_pull_from_where(mq)
            except Exception as e:
                log.warning("compute the pull offset of %s failed: %s", mq, e)
                return PULL_TIME_DELAY_MILLS_ON_EXCEPTION
            if offset < 0:
                return PULL_TIME_DELAY_MILLS_ON_EXCEPTION
            st.pull_offset = offset
        else:
            offset = st.pull_offset
        sd = self.rebalance.subscription_inner.get(mq.topic) or SubscriptionData.build(mq.topic, "*", None, 0)
        sys_flag = PullSysFlag.build(False, True, True, False, True)
        try:
            result = await self.pull_api.pull_kernel_impl(
                mq,
                sd.sub_string,
                sd.expression_type,
                0,
                offset,
                self.pull_batch_size,
                sys_flag,
                0,
                BROKER_SUSPEND_MAX_TIME_MILLIS,
                CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND,
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("pull of %s at %d failed: %s", mq, offset, e)
            return PULL_TIME_DELAY_MILLS_ON_EXCEPTION
        if self._assigned.get(mq) is not st or pq.dropped or st.seek_offset != -1:
            return 0
        result = self.pull_api.process_pull_result(mq, result, sd)
        if result.status is PullStatus.FOUND and result.msg_found_list:
            pq.put_messages(result.msg_found_list)
            self._cache.put_nowait(_ConsumeRequest(result.msg_found_list, mq, pq))
            st.pull_offset = result.next_begin_offset
            return 0
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "the pull request offset of %s is illegal (%d), continue at %d", mq, offset, result.next_begin_offset
            )
        st.pull_offset = result.next_begin_offset
        if pq.msg_count == 0 and result.status is not PullStatus.OFFSET_ILLEGAL:
            # Nothing pulled is waiting for poll(): filtered-out messages count as consumed.
            st.consume_offset = st.pull_offset
        return 0
