"""RocketMQ's system names (MixAll, TopicValidator): retry/DLQ prefixes, system topics and
groups. One place, so a name is never spelled twice."""

from __future__ import annotations

import re

__all__ = [
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "SELF_TEST_TOPIC",
    "BENCHMARK_TOPIC",
    "OFFSET_MOVED_EVENT",
    "SCHEDULE_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRACE_TOPIC",
    "SYSTEM_TOPIC_PREFIX",
    "SYSTEM_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "TRANS_SYS_GROUP",
    "TOOLS_CONSUMER_GROUP",
    "CLIENT_INNER_PRODUCER_GROUP",
    "DEFAULT_PRODUCER_GROUP",
    "DEFAULT_CONSUMER_GROUP",
    "DLQ_NUMS_PER_GROUP",
    "TOPIC_MAX_LENGTH",
    "VALID_PATTERN_STR",
    "VALID_NAME",
    "MASTER_ID",
    "retry_topic",
    "dlq_topic",
    "is_retry_topic",
    "is_dlq_topic",
    "is_sys_topic",
]

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DLQ_NUMS_PER_GROUP = 1
TOPIC_MAX_LENGTH = 127
# TopicValidator.VALID_PATTERN_STR: what a topic or group name may be made of (matched with
# re.match, as Java's Pattern.matcher(...).matches() is meant to be).
VALID_PATTERN_STR = "^[%|a-zA-Z0-9_-]+$"
VALID_NAME = re.compile(VALID_PATTERN_STR)
MASTER_ID = 0

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SELF_TEST_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT,
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        TRACE_TOPIC,
    }
)
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})

TRANS_SYS_GROUP = "CID_RMQ_SYS_TRANS"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"


def retry_topic(group: str) -> str:
    """``%RETRY%<group>`` (MixAll.getRetryTopic)."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>`` (MixAll.getDLQTopic)."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def is_sys_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic: a named system topic or the ``rmq_sys_`` prefix."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)
