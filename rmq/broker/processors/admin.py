"""Admin requests (AdminBrokerProcessor): offsets, topics, runtime info, stats."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from rmq.broker.config import BrokerConfig
from rmq.broker.processors.decode import with_header
from rmq.broker.processors.send import validate_topic
from rmq.broker.seams import (
    ConsumerOffsets,
    ConsumerRegistry,
    DelayOffsets,
    HAStatus,
    MetadataPersist,
    Registration,
    RuntimeInfo,
    StoreReader,
    SubscriptionGroups,
    TopicConfigs,
)
from rmq.broker.topic_attributes import TopicAttributeError, alter_attributes, parse_attribute_changes
from rmq.common.mixall import is_sys_topic
from rmq.protocol.bodies import KVTable, TopicConfig, dumps_fastjson, dumps_object_keyed_map
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    CreateTopicRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
)

log = logging.getLogger("rmq.broker.admin")


def _ok(request: RemotingCommand, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    resp = request.create_response(ResponseCode.SUCCESS, body=body)
    if ext is not None:
        resp.ext_fields = ext
    return resp


@dataclass(eq=False)
class AdminBrokerProcessor:
    broker_config: BrokerConfig
    store: StoreReader
    topics: TopicConfigs
    offsets: ConsumerOffsets
    subscriptions: SubscriptionGroups
    consumers: ConsumerRegistry
    delay_offsets: DelayOffsets
    metadata: MetadataPersist
    registration: Registration
    ha: HAStatus
    runtime: RuntimeInfo

    def _header(self, cls: Any, request: RemotingCommand) -> Any:
        return cls.from_ext_fields(request.ext_fields)

    # --- offsets (spec 2.6) ---
    def get_max_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = self._header(GetMaxOffsetRequestHeader, request)
        off = self.store.get_max_offset_in_queue(h.topic, h.queue_id)
        return _ok(request, GetMaxOffsetResponseHeader(off).to_ext_fields())

    def get_min_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = self._header(GetMinOffsetRequestHeader, request)
        off = max(self.store.get_min_offset_in_queue(h.topic, h.queue_id), 0)
        return _ok(request, GetMinOffsetResponseHeader(off).to_ext_fields())

    def search_offset_by_timestamp(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = self._header(SearchOffsetRequestHeader, request)
        boundary = None
        if h.boundary_type is not None:
            boundary = "UPPER" if h.boundary_type.upper() == "UPPER" else "LOWER"
        off = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp, boundary)
        return _ok(request, SearchOffsetResponseHeader(off).to_ext_fields())

    def get_earliest_msg_storetime(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = self._header(GetEarliestMsgStoretimeRequestHeader, request)
        ts = self.store.get_earliest_message_time(h.topic, h.queue_id)
        return _ok(request, GetEarliestMsgStoretimeResponseHeader(ts).to_ext_fields())

    # --- topics ---
    @with_header(CreateTopicRequestHeader)
    def update_and_create_topic(
        self, conn: Any, request: RemotingCommand, h: CreateTopicRequestHeader
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        if h.topic == self.broker_config.brokerClusterName:
            return request.create_response(
                ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is conflict with system reserved words."
            )
        bad = validate_topic(h.topic)
        if bad is not None:
            return request.create_response(ResponseCode.SYSTEM_ERROR, bad)
        if is_sys_topic(h.topic):
            return request.create_response(
                ResponseCode.SYSTEM_ERROR, f"The topic[{h.topic}] is conflict with system topic."
            )
        if h.read_queue_nums < 0 or h.write_queue_nums < 0:
            return request.create_response(ResponseCode.SYSTEM_ERROR, "queue numbers must be >= 0")
        current = self.topics.select(h.topic)
        try:
            attributes = alter_attributes(
                current is None,
                current.attributes if current is not None else None,
                parse_attribute_changes(h.attributes),
            )
        except TopicAttributeError as e:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"topic {h.topic}: {e}")
        tc = TopicConfig(
            h.topic,
            h.read_queue_nums,
            h.write_queue_nums,
            h.perm,
            h.topic_filter_type or "SINGLE_TAG",
            h.topic_sys_flag or 0,
            bool(h.order),
            attributes,
        )
        log.info("updateAndCreateTopic %s from %s: %s", h.topic, conn.remote_address, tc)
        self.topics.update_topic_config(tc)
        metadata, registration = self.metadata, self.registration

        async def registered() -> RemotingCommand:
            # As 4.9.8: answer after the NameServers know the topic, so a route lookup
            # right after updateTopic finds it.
            await metadata.persist_metadata()
            await registration.register_broker_all()
            return _ok(request)

        return registered()

    def query_topic_consume_by_who(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """Groups consuming a topic: online subscribers and groups with committed offsets."""
        topic = (request.ext_fields or {}).get("topic", "")
        groups = set(self.consumers.groups_of_topic(topic)) | self.offsets.groups_of_topic(topic)
        return _ok(request, body=dumps_fastjson({"groupList": sorted(groups)}))

    def get_all_topic_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return _ok(request, body=self.topics.serialize_wrapper().to_json())

    # --- what a slave copies from its master (rmq/broker/slave_sync.py) ---
    def get_all_consumer_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_CONSUMER_OFFSET (43): ConsumerOffsetSerializeWrapper."""
        return _ok(request, body=dumps_fastjson(self.offsets.snapshot()))

    def get_all_delay_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET (45): the schedule service's offsets (delayOffset.json)."""
        return _ok(request, body=dumps_fastjson(self.delay_offsets.snapshot()))

    def get_broker_ha_status(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_HA_STATUS (907): RocketMQ 5.x HARuntimeInfo, plus our brokerRole,
        epoch and brokerId (what `rmq admin haStatus` prints)."""
        return _ok(request, body=dumps_fastjson(self.ha.ha_runtime_info()))

    def get_topic_stats_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        topic = (request.ext_fields or {}).get("topic", "")
        tc = self.topics.select(topic)
        if tc is None:
            return request.create_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.store
        broker_name = self.broker_config.brokerName
        entries = []
        for qid in range(tc.write_queue_nums):
            mq = {"brokerName": broker_name, "queueId": qid, "topic": topic}
            mn = max(store.get_min_offset_in_queue(topic, qid), 0)
            mx = store.get_max_offset_in_queue(topic, qid)
            last = store.get_message_store_timestamp(topic, qid, mx - 1) if mx > 0 else 0
            entries.append((mq, {"lastUpdateTimestamp": max(last, 0), "maxOffset": mx, "minOffset": mn}))
        return _ok(request, body=dumps_object_keyed_map("offsetTable", entries))

    @with_header(ResetOffsetRequestHeader)
    def reset_offset(self, conn: Any, request: RemotingCommand, h: ResetOffsetRequestHeader) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (222): Broker2Client.resetOffset.

        Offsets by timestamp per queue (only moved back unless isForce), committed here
        and pushed to every live consumer of the group with RESET_CONSUMER_CLIENT_OFFSET;
        the answer carries the table. Committing on the broker too means the reset holds
        even for consumers that are offline (mqadmin's fallback does that by hand)."""
        offsets = self.offsets
        tc = self.topics.select(h.topic)
        if tc is None:
            return request.create_response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}",
            )
        online = self.consumers.get_group(h.group)
        entries = []
        for qid in range(tc.write_queue_nums):
            current = offsets.query_offset(h.group, h.topic, qid)
            if h.timestamp == -1:
                target = self.store.get_max_offset_in_queue(h.topic, qid)
            else:
                target = self.store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp, "LOWER")
            target = max(target, 0)
            if not h.is_force and current >= 0 and target >= current:
                target = current
            offsets.commit_offset(conn.remote_address, h.group, h.topic, qid, target)
            entries.append(({"brokerName": self.broker_config.brokerName, "queueId": qid, "topic": h.topic}, target))
        body = dumps_object_keyed_map("offsetTable", entries)
        log.info(
            "reset offsets of group %s on %s to time %d (force=%s): %s",
            h.group,
            h.topic,
            h.timestamp,
            h.is_force,
            [e[1] for e in entries],
        )
        if online is not None:
            push = RemotingCommand(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=h.to_ext_fields(), body=body)
            for c in online.channels.values():
                try:
                    c.conn.send_oneway(push)
                except Exception as e:
                    log.warning("pushing the offset reset to %s failed: %s", c.client_id, e)
        return _ok(request, body=body)

    # --- runtime ---
    def get_broker_runtime_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return _ok(request, body=KVTable(self.runtime.runtime_table()).to_json())
