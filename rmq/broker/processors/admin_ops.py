"""The rest of AdminBrokerProcessor that mqadmin's operations commands use:

DELETE_TOPIC_IN_BROKER (215), GET_CONSUME_STATS (208), GET_CONSUMER_CONNECTION_LIST (203),
GET_PRODUCER_CONNECTION_LIST (204), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207),
UPDATE_BROKER_CONFIG (25), GET_BROKER_CONFIG (26). Bodies are RocketMQ's JSON
(rmq.protocol.bodies) so the Java mqadmin works against this broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from rmq.broker.config import BrokerConfig
from rmq.broker.consume_stats import build_consume_stats
from rmq.broker.processors.decode import with_header
from rmq.broker.processors.send import validate_topic
from rmq.broker.runtime_config import all_config_properties, check_update, properties_text
from rmq.broker.seams import (
    ConsumerOffsets,
    ConsumerRegistry,
    MetadataPersist,
    ProducerRegistry,
    QueueStore,
    Registration,
    SubscriptionGroups,
    TopicConfigs,
)
from rmq.broker.stats import BrokerStatsManager
from rmq.broker.subscriptions import SubscriptionGroupConfig
from rmq.common.clock import now_ms
from rmq.common.mixall import VALID_NAME, VALID_PATTERN_STR, is_sys_topic
from rmq.common.properties import PropertiesError, parse_properties_text, rewrite_properties_file
from rmq.protocol.bodies import (
    SUBSCRIPTION_GROUP_ACCEPTED_KEYS,
    Connection,
    ConsumerConnection,
    ConsumeStatsList,
    DataVersion,
    ProducerConnection,
    ProducerInfo,
    ProducerTableInfo,
    dumps_fastjson,
    loads_fastjson,
)
from rmq.protocol.codes import LanguageCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
)
from rmq.store.config import ConfigError, MessageStoreConfig

log = logging.getLogger("rmq.broker.admin")
GROUP_MAX_LENGTH = 255


def _error(request: RemotingCommand, remark: str, code: int = ResponseCode.SYSTEM_ERROR) -> RemotingCommand:
    return request.create_response(code, remark)


def _ok(
    request: RemotingCommand, body: bytes | None = None, remark: str | None = None, ext: dict[str, str] | None = None
) -> RemotingCommand:
    resp = request.create_response(ResponseCode.SUCCESS, remark, body=body)
    if ext is not None:
        resp.ext_fields = ext
    return resp


def _language(info: Any) -> str:
    lang = info.language
    return LanguageCode.name_of(lang) if isinstance(lang, int) else str(lang)


def _connection(info: Any) -> Connection:
    return Connection(info.client_id, info.conn.remote_address, _language(info), int(info.version))


def _persist_config_file(path: str, changes: dict[str, str]) -> None:
    """Blocking: rewrite broker.conf with changes (atomic replace)."""
    rewrite_properties_file(path, changes)


@dataclass(eq=False)
class AdminOpsProcessor:
    broker_config: BrokerConfig
    store_config: MessageStoreConfig
    store: QueueStore
    topics: TopicConfigs
    offsets: ConsumerOffsets
    subscriptions: SubscriptionGroups
    consumers: ConsumerRegistry
    producers: ProducerRegistry
    stats_items: BrokerStatsManager
    metadata: MetadataPersist
    registration: Registration
    # broker.conf given with -c: UPDATE_BROKER_CONFIG writes changes back to it
    config_path: str | None = None

    def __post_init__(self) -> None:
        self.config_version = DataVersion(timestamp=0, counter=0)

    # ------------------------------------------------------------------ topics
    @with_header(DeleteTopicRequestHeader)
    def delete_topic(
        self, conn: Any, request: RemotingCommand, h: DeleteTopicRequestHeader
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """4.9.8: the topic config goes, then its consume queues; offsets of every group
        on it too (cleanOffsetByTopic), so a topic created again starts clean."""
        bc = self.broker_config
        topic = h.topic
        bad = validate_topic(topic)
        if bad is not None:
            return _error(request, bad)
        if is_sys_topic(topic) or topic in (bc.brokerClusterName, bc.brokerName):
            return _error(request, f"The topic[{topic}] is conflict with system topic.")
        log.info("deleteTopic %s called by %s", topic, conn.remote_address)
        existed = self.topics.delete_topic_config(topic)
        self.offsets.remove_topic(topic)
        self.stats_items.on_topic_deleted(topic)
        store, metadata = self.store, self.metadata

        async def deleted() -> RemotingCommand:
            queues = await store.delete_topics([topic])
            await metadata.persist_metadata()
            log.info(
                "deleteTopic %s: config %s, %d consume queue(s) destroyed",
                topic,
                "removed" if existed else "was not there",
                queues,
            )
            return _ok(request)

        return deleted()

    # ------------------------------------------------------------------ consumers / producers
    @with_header(GetConsumeStatsRequestHeader)
    def get_consume_stats(
        self, conn: Any, request: RemotingCommand, h: GetConsumeStatsRequestHeader
    ) -> RemotingCommand:
        stats = build_consume_stats(
            self.store,
            self.topics,
            self.offsets,
            self.consumers,
            self.broker_config.brokerName,
            h.consumer_group,
            h.topic or None,
            self.stats_items.tps_group_get_nums,
        )
        return _ok(request, stats.to_json())

    @with_header(GetConsumeStatsInBrokerHeader)
    def get_broker_consume_stats(
        self, conn: Any, request: RemotingCommand, h: GetConsumeStatsInBrokerHeader
    ) -> RemotingCommand:
        """Every subscription group's stats per topic it has offsets for (mqadmin
        brokerConsumeStats); with isOrder only ordered topics."""
        bc = self.broker_config
        out = ConsumeStatsList(f"{bc.brokerIP1}:{bc.listenPort}")
        for group in self.subscriptions.names():
            per_topic = []
            for topic in sorted(self.offsets.topics_of_group(group)):
                if h.is_order and not self.topics.is_order_topic(topic):
                    continue
                stats = build_consume_stats(
                    self.store,
                    self.topics,
                    self.offsets,
                    self.consumers,
                    bc.brokerName,
                    group,
                    topic,
                    self.stats_items.tps_group_get_nums,
                )
                if stats.offset_table:  # a topic whose config is gone, or not subscribed by the online group
                    per_topic.append(stats)
                    out.total_diff += stats.compute_total_diff()
            out.groups.append((group, per_topic))
        return _ok(request, out.to_json())

    @with_header(GetConsumerConnectionListRequestHeader)
    def get_consumer_connection_list(
        self, conn: Any, request: RemotingCommand, h: GetConsumerConnectionListRequestHeader
    ) -> RemotingCommand:
        g = self.consumers.get_group(h.consumer_group)
        if g is None:
            return _error(
                request, f"the consumer group[{h.consumer_group}] not online", ResponseCode.CONSUMER_NOT_ONLINE
            )
        body = ConsumerConnection(
            [_connection(c) for c in g.channels.values()],
            dict(g.subscriptions),
            g.consume_type,
            g.message_model,
            g.consume_from_where,
        )
        return _ok(request, body.to_json())

    @with_header(GetProducerConnectionListRequestHeader)
    def get_producer_connection_list(
        self, conn: Any, request: RemotingCommand, h: GetProducerConnectionListRequestHeader
    ) -> RemotingCommand:
        chans = self.producers.table.get(h.producer_group)
        if not chans:
            return _error(request, f"the producer group[{h.producer_group}] not exist")
        return _ok(request, ProducerConnection([_connection(c) for c in chans.values()]).to_json())

    def get_all_producer_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        table = ProducerTableInfo(
            {
                group: [
                    ProducerInfo(c.client_id, "/" + c.conn.remote_address, _language(c), int(c.version), c.last_update)
                    for c in chans.values()
                ]
                for group, chans in self.producers.table.items()
                if chans
            }
        )
        return _ok(request, table.to_json())

    # ------------------------------------------------------------------ subscription groups
    def update_and_create_subscription_group(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            obj = loads_fastjson(request.body or b"")
        except ProtocolError as e:
            return _error(request, f"bad SubscriptionGroupConfig body: {e}")
        if not isinstance(obj, dict):
            return _error(request, "bad SubscriptionGroupConfig body: not an object")
        values: dict[str, Any] = {}
        for key, typ in SUBSCRIPTION_GROUP_ACCEPTED_KEYS:
            v = obj.get(key)
            if v is None:
                continue
            if (
                typ is int
                and (isinstance(v, bool) or not isinstance(v, int))
                or typ is not int
                and not isinstance(v, typ)
            ):
                return _error(
                    request,
                    f"SubscriptionGroupConfig.{key}: expected "
                    f"{'a boolean' if typ is bool else typ.__name__}, got {v!r:.40}",
                )
            values[key] = v
        group = values.get("groupName") or ""
        if not group or not VALID_NAME.match(group) or len(group) > GROUP_MAX_LENGTH:
            return _error(
                request,
                f"SubscriptionGroupConfig.groupName {group!r} is not a valid "
                f"group name ({VALID_PATTERN_STR}, at most {GROUP_MAX_LENGTH})",
            )
        for key in ("retryQueueNums", "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly"):
            if values.get(key, 0) < 0:
                return _error(request, f"SubscriptionGroupConfig.{key}: must not be negative")
        cfg = SubscriptionGroupConfig.from_dict(values)
        log.info("updateAndCreateSubscriptionGroup called by %s: %s", conn.remote_address, cfg)
        self.subscriptions.update(cfg)
        return _ok(request)

    def get_all_subscription_group_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): SubscriptionGroupWrapper (slaves sync from it)."""
        return _ok(request, dumps_fastjson(self.subscriptions.snapshot()))

    @with_header(DeleteSubscriptionGroupRequestHeader)
    def delete_subscription_group(
        self, conn: Any, request: RemotingCommand, h: DeleteSubscriptionGroupRequestHeader
    ) -> RemotingCommand:
        log.info("deleteSubscriptionGroup %s called by %s", h.group_name, conn.remote_address)
        if not self.subscriptions.delete(h.group_name):
            log.warning("delete subscription group failed, subscription groupName: %s not exist", h.group_name)
        if h.remove_offset or h.clean_offset:
            self.offsets.remove_group(h.group_name)
            log.info("offsets of group %s removed", h.group_name)
        self.stats_items.on_group_deleted(h.group_name)
        return _ok(request)

    # ------------------------------------------------------------------ broker config
    def update_broker_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        bc, sc = self.broker_config, self.store_config
        if not request.body:
            return _ok(request)
        try:
            props = parse_properties_text(request.body.decode("utf-8"))
        except (UnicodeDecodeError, PropertiesError) as e:
            return _error(request, f"string2Properties error: {e}")
        try:
            upd = check_update(bc, sc, props)
        except ConfigError as e:
            return _error(request, str(e))
        log.info("updateBrokerConfig called by %s: %s", conn.remote_address, upd.text)

        async def apply() -> RemotingCommand:
            path = self.config_path
            if path:
                try:
                    await asyncio.get_running_loop().run_in_executor(None, _persist_config_file, path, upd.text)
                except OSError as e:
                    return _error(request, f"cannot write {path}: {e}; nothing changed")
            for key in upd.at_once:
                target: Any = bc if hasattr(bc, key) else sc
                setattr(target, key, upd.values[key])
            self._side_effects(upd.at_once)
            self.config_version = self.config_version.next_version(now_ms())
            notes = [upd.remark] if upd.remark else []
            if not path:
                notes.append("not persisted: the broker was started without a config file")
            elif upd.on_restart or upd.at_once:
                notes.append(f"persisted to {os.path.basename(path)}")
            if "brokerPermission" in upd.at_once:
                self.topics.bump_data_version()
                await self.registration.register_broker_all()
            return _ok(request, remark="; ".join(notes) or None)

        return apply()

    def _side_effects(self, keys: list[str]) -> None:
        bc = self.broker_config
        if "autoCreateTopicEnable" in keys:
            self.topics.auto_create_topic = bc.autoCreateTopicEnable
        if "autoCreateSubscriptionGroup" in keys:
            self.subscriptions.auto_create = bc.autoCreateSubscriptionGroup

    def get_broker_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        text = properties_text(all_config_properties(self.broker_config, self.store_config))
        return _ok(request, text.encode("utf-8"), ext={"version": self.config_version.to_json().decode()})
