"""PullAPIWrapper: one pull from the right broker, and the client side of its result.

Picks the broker member to pull from (the master unless the broker suggested a slave),
sends PULL_MESSAGE, then decodes the records (decompressing COMPRESSED bodies),
re-checks the tag filter on the client (the broker filters by tag hash code only, spec
2.5) and stamps ``MIN_OFFSET`` / ``MAX_OFFSET`` on each message. The push consumer takes
the result undecoded (``pulled_batch``): the tag check is then made on the records' raw
properties, and the rest when the batch is consumed.
"""

from __future__ import annotations

import logging

from rmq.client.errors import MQClientError
from rmq.client.instance import MQClientInstance
from rmq.client.message import PullResult, PullStatus
from rmq.client.process_queue import PulledBatch
from rmq.protocol.bodies import MASTER_ID, MessageQueue, SubscriptionData
from rmq.protocol.codes import PullSysFlag
from rmq.protocol.headers import PullMessageRequestHeader
from rmq.protocol.message import MessageConst, decode_records_batch, scan_records

__all__ = ["PullAPIWrapper"]

log = logging.getLogger("rmq.client.pull")


class PullAPIWrapper:
    def __init__(self, instance: MQClientInstance, consumer_group: str, unit_mode: bool = False) -> None:
        self.instance = instance
        self.consumer_group = consumer_group
        self.unit_mode = unit_mode
        self.pull_from_which_node: dict[MessageQueue, int] = {}

    def update_pull_from_which_node(self, mq: MessageQueue, broker_id: int) -> None:
        self.pull_from_which_node[mq] = broker_id

    def recalculate_pull_from_which_node(self, mq: MessageQueue) -> int:
        return self.pull_from_which_node.get(mq, MASTER_ID)

    async def pull_kernel_impl(
        self,
        mq: MessageQueue,
        sub_expression: str | None,
        expression_type: str | None,
        sub_version: int,
        offset: int,
        max_nums: int,
        sys_flag: int,
        commit_offset: int,
        broker_suspend_max_ms: int,
        timeout_ms: int,
    ) -> PullResult:
        inst = self.instance
        broker_id = self.recalculate_pull_from_which_node(mq)
        found = await inst.find_broker_address_in_subscribe_or_update(mq.broker_name, broker_id, False, mq.topic)
        if found is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        if found.slave:
            sys_flag = PullSysFlag.clear_commit_offset(sys_flag)
        header = PullMessageRequestHeader(
            self.consumer_group,
            mq.topic,
            mq.queue_id,
            offset,
            max_nums,
            sys_flag,
            commit_offset,
            broker_suspend_max_ms,
            sub_version,
            sub_expression,
            expression_type,
        )
        return await inst.api.pull_message(found.broker_addr, header, timeout_ms)

    def process_pull_result(
        self, mq: MessageQueue, result: PullResult, subscription: SubscriptionData | None
    ) -> PullResult:
        self.update_pull_from_which_node(mq, result.suggest_which_broker_id)
        if result.status is PullStatus.FOUND and result.body:
            msgs = decode_records_batch(result.body, decompress=True)
            if subscription is not None and subscription.tags_set and not subscription.class_filter_mode:
                tags = set(subscription.tags_set)
                msgs = [m for m in msgs if m.properties.get(MessageConst.TAGS) in tags]
            lo, hi = str(result.min_offset), str(result.max_offset)
            for m in msgs:
                props = m.properties
                props[MessageConst.MIN_OFFSET] = lo
                props[MessageConst.MAX_OFFSET] = hi
            result.msg_found_list = msgs
        result.body = None
        return result

    def pulled_batch(
        self, mq: MessageQueue, result: PullResult, subscription: SubscriptionData | None
    ) -> PulledBatch | None:
        """``process_pull_result`` without decoding: the messages found (tag-filtered) as
        a batch for the process queue, decoded when consumed; None when there are none.
        A body with a record of another kind (compressed, IPv6, magic v2) is decoded now."""
        body = result.body
        if result.status is not PullStatus.FOUND or not body:
            self.process_pull_result(mq, result, subscription)
            return None
        tags = None
        if subscription is not None and subscription.tags_set and not subscription.class_filter_mode:
            tags = frozenset(t.encode() for t in subscription.tags_set)
        scanned = scan_records(body, tags)
        if scanned is None:
            msgs = self.process_pull_result(mq, result, subscription).msg_found_list
            return PulledBatch.of_messages(msgs) if msgs else None
        self.update_pull_from_which_node(mq, result.suggest_which_broker_id)
        result.body = None
        offsets, sizes, gappy = scanned
        if not offsets:
            return None
        return PulledBatch(
            offsets, sizes, data=body, gappy=gappy, stamp=(str(result.min_offset), str(result.max_offset))
        )
