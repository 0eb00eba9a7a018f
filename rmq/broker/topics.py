"""TopicConfigManager: the broker's topics, system topics and auto-creation from TBW102."""

from __future__ import annotations

import logging
from typing import Any

from rmq.broker.persist import MetadataFile, MetadataTable
from rmq.common.clock import now_ms as _now_ms
from rmq.common.mixall import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
)
from rmq.protocol.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from rmq.protocol.codes import PermName

log = logging.getLogger("rmq.broker.topics")


class TopicConfigManager(MetadataTable[TopicConfig]):
    def __init__(
        self,
        config_dir: str,
        cluster_name: str,
        broker_name: str,
        default_topic_queue_nums: int = 8,
        auto_create_topic: bool = True,
        cluster_topic_enable: bool = True,
        broker_topic_enable: bool = True,
        schedule_levels: int = 18,
        trace_topic: str | None = None,
    ) -> None:
        # on_change: the broker re-registers with the NameServers
        super().__init__(MetadataFile(config_dir, "topics", "topics.json"), log)
        self.data_version = DataVersion(timestamp=_now_ms(), counter=0)
        self.auto_create_topic = auto_create_topic
        rw = PermName.PERM_READ | PermName.PERM_WRITE
        self._put_system(TopicConfig(SELF_TEST_TOPIC, 1, 1, rw))
        if auto_create_topic:
            self._put_system(
                TopicConfig(
                    AUTO_CREATE_TOPIC_KEY_TOPIC,
                    default_topic_queue_nums,
                    default_topic_queue_nums,
                    rw | PermName.PERM_INHERIT,
                )
            )
        self._put_system(TopicConfig(BENCHMARK_TOPIC, 1024, 1024, rw))
        perm = PermName.PERM_INHERIT | (rw if cluster_topic_enable else 0)
        self._put_system(TopicConfig(cluster_name, 16, 16, perm))
        perm = PermName.PERM_INHERIT | (rw if broker_topic_enable else 0)
        self._put_system(TopicConfig(broker_name, 1, 1, perm))
        self._put_system(TopicConfig(OFFSET_MOVED_EVENT, 1, 1, rw))
        self._put_system(TopicConfig(SCHEDULE_TOPIC, schedule_levels, schedule_levels, rw))
        if trace_topic:  # traceTopicEnable: the message trace topic, one queue
            self._put_system(TopicConfig(trace_topic, 1, 1, rw))
        self._put_system(TopicConfig(f"{cluster_name}_REPLY_TOPIC", 1, 1, rw))

    def _put_system(self, tc: TopicConfig) -> None:
        self.table[tc.topic_name] = tc

    # --- persistence ---
    def load(self) -> None:
        data, adopted = self.file.load()
        if not data:
            return
        for name, obj in (data.get("topicConfigTable") or {}).items():
            try:
                tc = TopicConfig.from_obj(obj)
            except Exception as e:  # one bad entry must not lose the others
                log.error("topic %s in %s is unreadable: %s", name, self.file.path, e)
                continue
            self.table[tc.topic_name] = tc
        dv = data.get("dataVersion")
        if isinstance(dv, dict):
            self.data_version = DataVersion.from_obj(dv)
        self.dirty = adopted

    def snapshot(self) -> dict[str, Any]:
        return {
            "topicConfigTable": {k: v.to_obj() for k, v in self.table.items()},
            "dataVersion": self.data_version.to_obj(),
        }

    def _next_version(self) -> None:
        self.data_version = self.data_version.next_version(_now_ms())

    # --- queries ---
    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def is_order_topic(self, topic: str) -> bool:
        tc = self.table.get(topic)
        return tc is not None and tc.order

    def serialize_wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(dict(self.table), self.data_version)

    # --- changes ---
    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, remote_addr: str, client_default_queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        """Create topic by inheriting from default_topic (TBW102), as a producer's send does."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        default = self.table.get(default_topic)
        if default is None:
            log.warning(
                "create new topic %s failed: the default topic [%s] does not exist (producer %s)",
                topic,
                default_topic,
                remote_addr,
            )
            return None
        perm = default.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.auto_create_topic:
            perm = PermName.PERM_READ | PermName.PERM_WRITE
        if not perm & PermName.PERM_INHERIT:
            log.warning(
                "create new topic %s failed: the default topic [%s] has no inherit perm [%d] (producer %s)",
                topic,
                default_topic,
                perm,
                remote_addr,
            )
            return None
        nums = max(min(client_default_queue_nums, default.write_queue_nums), 0)
        tc = TopicConfig(topic, nums, nums, perm & ~PermName.PERM_INHERIT, default.topic_filter_type, topic_sys_flag)
        self.table[topic] = tc
        log.info("created topic %s from default topic %s: %s (producer %s)", topic, default_topic, tc, remote_addr)
        self._changed()
        return tc

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int
    ) -> TopicConfig:
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, "SINGLE_TAG", topic_sys_flag)
        self.table[topic] = tc
        log.info("created topic %s: %s", topic, tc)
        self._changed()
        return tc

    def update_topic_config(self, tc: TopicConfig) -> None:
        old = self.table.get(tc.topic_name)
        self.table[tc.topic_name] = tc
        log.info("topic %s %s: %s", tc.topic_name, "updated" if old else "created", tc)
        self._changed()

    def bump_data_version(self) -> None:
        """A new data version without a table change (brokerPermission changed): the
        NameServers take the next registration's queue data again."""
        self.data_version = self.data_version.next_version(_now_ms())

    def delete_topic_config(self, topic: str) -> bool:
        return self._delete(topic, "topic")

    def update_order_topic_config(self, order_topics: dict[str, str]) -> None:
        """The NameServer's ORDER_TOPIC_CONFIG namespace decides which topics are ordered."""
        changed = False
        for name, tc in self.table.items():
            want = name in order_topics
            if tc.order != want:
                tc.order = want
                changed = True
        if changed:
            self.data_version = self.data_version.next_version(_now_ms())
            self.dirty = True

    def replace_all(self, table: dict[str, TopicConfig], data_version: DataVersion) -> None:
        """A slave takes its master's topics (and re-registers them: on_change)."""
        self.table = dict(table)
        self.data_version = data_version
        self.dirty = True
        if self.on_change is not None:
            self.on_change()
